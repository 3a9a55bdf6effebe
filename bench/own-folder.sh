#!/usr/bin/env bash
# Issue #43's path, timed: a kernel of our own in a folder outside the repository, with no
# kidiom.toml, from `kidiom init` to verdicts, then a contract change judged again.
#
#   bench/own-folder.sh OUT_DIR        writes OUT_DIR/transcript.txt, verdicts.tsv, gates.txt, phases.txt
#
# The folder is a fresh temporary one; the harness's content caches (compiles, profiles, contract
# checks) start empty ($KIDIOM_CONTENT_CACHE points at a new folder), the corpora come from the
# user cache as `kidiom run` finds them (or the snapshot). $PROFILE_BUDGET, when set, goes in the
# manifest as `[profile] budget` (1: the profile counted at the bench shape, as before kidiom
# reduced it itself). $KIDIOM_BIN: the binary (default:
# target/release/kidiom, else target/debug/kidiom; build it first: a stale one lacks commands).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:?usage: bench/own-folder.sh OUT_DIR}" && cd "$1" && pwd)"
bin="${KIDIOM_BIN:-}"
if [ -z "$bin" ]; then
  bin="$root/target/release/kidiom"
  [ -x "$bin" ] || bin="$root/target/debug/kidiom"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export KIDIOM_CONTENT_CACHE="$tmp/content-cache"
dir="$tmp/project"
mkdir -p "$dir/mine"
# the kernel of our own tests/contract_check.rs takes through the same path
cp "$root/tests/fixtures/own_folder/gated_mean.py" "$dir/mine/gated_mean.py"
git -C "$dir" init -q
log="$out/transcript.txt"
: > "$log"
step() {   # step TITLE CMD...: runs CMD in the folder, its output and wall time in the transcript
  local title="$1"; shift
  local t0=$EPOCHREALTIME rc=0
  printf '## %s\n$ %s\n' "$title" "$*" >> "$log"
  (cd "$dir" && "$@") >> "$log" 2>&1 || rc=$?
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN{printf "(exit %d, %.1f s)\n\n", rc, b-a}' >> "$log"
}
fill() {   # the user's part: the reference, the shape init could not read, the sizes
  python3 - "$dir" "$1" "$tmp/skeleton.py" "${PROFILE_BUDGET:-}" <<'PY'
import re, sys
d, ref, skeleton = sys.argv[1], sys.argv[2], sys.argv[3]
c = f"{d}/mine/gated_mean_contract.py"
s = open(skeleton).read()
s = re.sub(r"    raise NotImplementedError\(.*\)\n", ref, s)
s = s.replace('"g": ((n_cols,), "float32"),', '"g": ((n_rows, n_cols), "float32"),')
open(c, "w").write(s)
m = f"{d}/mine/gated_mean.toml"
t = open(m).read()
t = re.sub(r"^cpu = .*$", "cpu = [{ n_rows = 3, n_cols = 64 }]", t, flags=re.M)
t = re.sub(r"^bench = .*$", "bench = { n_rows = 4096, n_cols = 512 }", t, flags=re.M)
if sys.argv[4] and "[profile]" not in t:
    t += f"\n[profile]\nbudget = {int(sys.argv[4])}\n"
open(m, "w").write(t)
PY
}
right='    xx, gg = x["x"].astype(np.float64), x["g"].astype(np.float64)
    return {"out": (xx / (1 + np.exp(-gg))).sum(axis=-1) * x["scale"] / xx.shape[-1]}
'
step "init (no kidiom.toml here)" "$bin" init mine/gated_mean.py
cp "$dir/mine/gated_mean_contract.py" "$tmp/skeleton.py"
step "check before the reference is written" "$bin" check mine
fill "${right/ \/ xx.shape\[-1\]/}"
step "check with a planted contract mistake (the sum where the mean is meant)" "$bin" check mine
fill "$right"
step "check with the contract right" "$bin" check mine
step "run (mine kidiom's corpora, apply to mine/, validate)" "$bin" run
step "review" "$bin" review
sed -i 's/^rel_l2 = 1e-5/rel_l2 = 2e-5/' "$dir/mine/gated_mean.toml"
step "review after a contract change" "$bin" review
step "run again" "$bin" run
# each candidate's verdict and seconds (verdicts.tsv), and each gate's seconds (gates.txt: what a
# candidate costs beyond its gates), as the catalog holds them
(cd "$dir" && "$bin" review --json) > "$tmp/review.json"
python3 - "$tmp/review.json" "$out" <<'PY'
import json, sys
cands, out = json.load(open(sys.argv[1])), sys.argv[2]
rows, gates = ["candidate\tverdict\tseconds"], ["candidate\tseconds\tgates\tgate seconds"]
for c in cands:
    e = c.get("evidence") or {}
    if not e.get("verdict"):
        continue
    g = e.get("gates") or []
    rows.append("\t".join([c["id"], e["verdict"]["kind"], "%.1f" % e["seconds"]]))
    each = ", ".join("%s %.1f" % (r["gate"], r["seconds"]) for r in g)
    gates.append("\t".join([c["id"], "%.1f" % e["seconds"], "%.1f" % sum(r["seconds"] for r in g), each]))
open(f"{out}/verdicts.tsv", "w").write("\n".join(rows) + "\n")
open(f"{out}/gates.txt", "w").write("\n".join(gates) + "\n")
# the harness calls each candidate paid for, summed by kind over the candidates (evidence `phases`)
per = {}
for c in cands:
    for ph in (c.get("evidence") or {}).get("phases") or []:
        n, w = per.get(ph["name"], (0, 0.0))
        per[ph["name"]] = (n + 1, w + ph["seconds"])
lines = ["phase\tcalls\twall s"] + ["%s\t%d\t%.1f" % (k, *per[k]) for k in sorted(per)]
open(f"{out}/phases.txt", "w").write("\n".join(lines) + "\n")
PY
echo "wrote $log, $out/verdicts.tsv, $out/gates.txt and $out/phases.txt"
