#!/usr/bin/env bash
# Benchmark: which edit families `kidiom mine --history` finds in a git
# corpus's history (FLA by default, at the revision its manifest pins), how
# many commits support each, how many edit patterns each has, and how many
# of them are classified as refactors (hidden by `kidiom catalog list`
# unless `--all`). The families are the edits a person would name in FLA's
# history: an explicit `tl.dot` precision added, `exp` -> `exp2`, int64
# promotion, `do_not_specialize`, a mask added to a load, an eviction hint
# added. A pattern belongs to a family by its before/after templates alone.
#
# Each run starts from an empty catalog. Needs a clone of the corpus where
# kidiom looks for it (`$KIDIOM_CACHE/git/<owner>+<name>`, see
# corpora/fla.toml).
#
# Usage: bench/history-families.sh [MANIFEST] [KIDIOM]
#        (default corpora/fla.toml, target/release/kidiom built here)
# With HISTORY_FAMILIES_DB=PATH the catalog is kept there (a second run
# reuses its cache of mined commits and only generalizes again).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="${1:-corpora/fla.toml}"
bin="${2:-}"
if [ -z "$bin" ]; then
  cargo build --release --quiet
  bin=target/release/kidiom
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s.%N)
db="${HISTORY_FAMILIES_DB:-$tmp/c.sqlite}"
"$bin" mine --history "$manifest" --db "$db" -q --json > "$tmp/report.json"
end=$(date +%s.%N)
"$bin" catalog list --kind edit --all --json --db "$db" > "$tmp/edit.json"
python3 - "$manifest" "$tmp/report.json" "$tmp/edit.json" "$(echo "$end - $start" | bc)" <<'PY'
import json, re, sys
manifest, report, pats, secs = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), float(sys.argv[4])

def n(s, pat):
    return len(re.findall(pat, s))

def more(p, pat):
    return n(p["after"], pat) > n(p["before"], pat)

FAMILIES = [
    ("explicit dot precision", lambda p: "dot(" in p["before"] and (more(p, r"\binput_precision\s*=") or more(p, r"\ballow_tf32\s*="))),
    ("exp -> exp2", lambda p: n(p["before"], r"\bexp\s*\(") > n(p["after"], r"\bexp\s*\(") and more(p, r"\bexp2\s*\(")),
    ("int64 promotion", lambda p: more(p, r"\bint64\b")),
    ("do_not_specialize", lambda p: more(p, r"\bdo_not_specialize\b")),
    # a load that gains a mask, not one migrated from `boundary_check=` to `mask=`
    ("mask added to a load", lambda p: "load(" in p["before"] and more(p, r"\bmask\s*=")
        and not n(p["before"], r"\bboundary_check\s*=") > n(p["after"], r"\bboundary_check\s*=")),
    ("eviction hint added", lambda p: more(p, r"\beviction_policy\s*=")),
]
c = report["corpora"][0]
print(f"corpus {c['name']} ({manifest}) at {c['revision'][:12]}: {c['commits']} commits, {c['edits']} concrete edits, "
      f"{len(pats)} edit patterns, {sum(p['category'] == 'refactor' for p in pats)} classified refactor "
      f"({100 * sum(p['category'] == 'refactor' for p in pats) / max(len(pats), 1):.0f}%), {secs:.1f}s")
print(f"{'family':<24} {'commits':>7} {'patterns':>8} {'refactor':>8}  categories")
for name, member in FAMILIES:
    ps = [p for p in pats if member(p)]
    commits = {m["id"] for p in ps for m in p["commits"]}
    refac = sum(p["category"] == "refactor" for p in ps)
    cats = {}
    for p in ps:
        cats[p["category"]] = cats.get(p["category"], 0) + 1
    share = f"{100 * refac / len(ps):.0f}%" if ps else "-"
    print(f"{name:<24} {len(commits):>7} {len(ps):>8} {share:>8}  {', '.join(f'{k} {v}' for k, v in sorted(cats.items()))}")
PY
