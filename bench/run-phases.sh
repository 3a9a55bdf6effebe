#!/usr/bin/env bash
# The time of `kidiom run` on kidiom.toml's defaults, by phase, as a newcomer meets it: on a fresh
# copy of this checkout (its tracked files, no .kidiom catalog) from an empty cache (cold: no
# fetched corpora, no sweep or compile cache, no Triton cache), then again in the same copy (warm:
# the catalog, the history cache and the harness's caches kept). The phases are what the run
# itself records in its report (`kidiom run --json`, `phases`): usage mining, history mining, the
# snapshot's fill-in, the dry-run apply with its site searches (and the searches alone), the
# validation, the total. The build is not timed (scripts/run.sh builds first).
#
#   bench/run-phases.sh [RUN ARGS...]        e.g. --no-search, --timeout 300
#
# Uses target/release/kidiom (built here if missing), or $KIDIOM_BIN; copies this checkout's
# tracked files, or the directory $KIDIOM_BENCH_TREE (e.g. `git archive` of an earlier commit, to
# time it with its own binary: a kidiom that records no phases shows the usage mining's, the
# searches' and the validation's own seconds, and the rest as "other"). Needs .venv.
# Writes bench/runs/<date>-<host>/run-phases.json (and each pass's report beside it) and prints one
# line per pass. A machine that
# cannot reach GitHub measures the no-GitHub path (the snapshot fills the git corpora in).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ -x .venv/bin/python ]] || scripts/setup-python.sh >&2
py="$root/.venv/bin/python"
export KIDIOM_PYTHON="$py"
kidiom="${KIDIOM_BIN:-$root/target/release/kidiom}"
[[ -x "$kidiom" ]] || cargo build --release --locked --quiet
out="${KIDIOM_BENCH_RUN:-bench/runs/$(date +%F)-vm}"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# a fresh copy: the tracked files only (no catalog, no __pycache__), the same Python environment
mkdir "$tmp/copy"
if [[ -n "${KIDIOM_BENCH_TREE:-}" ]]; then
  cp -r "$KIDIOM_BENCH_TREE/." "$tmp/copy/"
  rm -rf "$tmp/copy/.kidiom" "$tmp/copy/.venv"
else
  git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tmp/copy"
fi
ln -s "$root/.venv" "$tmp/copy/.venv"

pass() {
  local name="$1" t0 t1
  shift
  t0=$(date +%s.%N)
  # exit 1 with a report: no corpus could be mined here (the snapshot still filled them in)
  (cd "$tmp/copy" && KIDIOM_CACHE="$tmp/cache" TRITON_CACHE_DIR="$tmp/triton" HOME="$tmp/home" \
    "$kidiom" run --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err") || [[ -s "$tmp/$name.json" ]] || {
    echo "kidiom run ($name) failed; its stderr:" >&2
    tail -20 "$tmp/$name.err" >&2
    exit 1
  }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}' >"$tmp/$name.wall"
}
mkdir -p "$tmp/home"
pass cold "$@"
pass warm "$@"

"$py" - "$tmp" "$out/run-phases.json" <<'PY'
import json, os, sys
tmp, dest = sys.argv[1:3]
rows = {}
for name in ("cold", "warm"):
    report = json.load(open(os.path.join(tmp, f"{name}.json")))
    v = report.get("validate") or {}
    searches = (report.get("apply") or {}).get("searches", [])
    # an earlier kidiom records no phases: what its reports time themselves
    phases = report.get("phases") or {
        "mine": report["mine"].get("seconds", 0.0), "history": (report.get("history") or {}).get("seconds", 0.0),
        "snapshot": float("nan"), "apply": float("nan"), "search": sum(s.get("seconds", 0.0) for s in searches),
        "validate": v.get("seconds", 0.0), "total": float("nan")}
    phases["wall"] = float(open(os.path.join(tmp, f"{name}.wall")).read())
    phases["candidates_validated"] = len(v.get("candidates", []))
    phases["searches"] = len(searches)
    rows[name] = phases
for name in ("cold", "warm"):   # the reports themselves, for the searches' fronts and the verdicts
    os.replace(os.path.join(tmp, f"{name}.json"), os.path.join(os.path.dirname(dest), f"run-phases-{name}.json"))
json.dump({"cpus": os.cpu_count(), "tree": os.environ.get("KIDIOM_BENCH_TREE") or "this checkout",
           "passes": rows}, open(dest, "w"), indent=1, default=str)
for name, p in rows.items():
    print(f"{name}: mine {p['mine']:.1f}s, history {p['history']:.1f}s, snapshot {p['snapshot']:.1f}s, "
          f"apply+search {p['apply']:.1f}s (search {p['search']:.1f}s), validation {p['validate']:.1f}s "
          f"({p['candidates_validated']} candidates), total {p['total']:.1f}s (wall {p['wall']:.1f}s)")
PY
