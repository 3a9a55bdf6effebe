#!/usr/bin/env bash
# Regenerates corpora/snapshot.json, the catalog snapshot the repository carries for machines
# that cannot reach GitHub: the edit idioms of FLA's and DeepGEMM's histories and DeepGEMM's
# usage idioms, mined at the revisions their manifests pin, exported with
# `kidiom catalog export --format json --snapshot` (templates, counts, values and references:
# corpus, revision, path, line, commit id; no upstream source lines or commit messages).
# `kidiom run` imports the parts of a corpus it cannot reach, and says so.
#
# Needs clones of both repositories (URL sources are cloned into ~/.cache/kidiom/git/ on first
# use, or place one there).
#
#   scripts/snapshot.sh            # writes corpora/snapshot.json
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release --locked --quiet
kidiom="$root/target/release/kidiom"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
db="$tmp/catalog.sqlite"

"$kidiom" mine corpora/deepgemm.toml --db "$db" -q
"$kidiom" mine --history corpora/fla.toml corpora/deepgemm.toml --db "$db" -q
# every corpus must have been read from git at its pin (a fallback would not be the same corpus)
"$kidiom" catalog stats --db "$db" --json | python3 -c '
import json, sys
kinds = {c["name"]: c["kind"] for c in json.load(sys.stdin)["corpora"]}
if kinds.get("deepgemm") != "git":
    sys.exit(f"snapshot.sh: expected deepgemm mined from git, got {kinds}")
'
"$kidiom" catalog export --format json --snapshot --corpus fla --corpus deepgemm --db "$db" \
  --out corpora/snapshot.json
python3 - <<'PY'
import json, sys, tomllib
f = json.load(open("corpora/snapshot.json"))
# a corpus mined only for its history has no corpus row: take its source from its manifest
for c in f["corpora"]:
    if not c["source"]:
        with open(f"corpora/{c['name']}.toml", "rb") as m:
            c["source"] = tomllib.load(m).get("source", "")
json.dump(f, open("corpora/snapshot.json", "w"), indent=2)
open("corpora/snapshot.json", "a").write("\n")
names = {c["name"] for c in f["corpora"]}
edit = {s["corpus"] for p in f["patterns"] if p["kind"] == "edit" for s in p["support"]}
if not {"fla", "deepgemm"} <= edit:
    sys.exit(f"snapshot.sh: the history of fla and deepgemm must both be in the snapshot (edit support: {edit})")
PY
python3 - <<'PY'
import json
f = json.load(open("corpora/snapshot.json"))
kinds = {}
for p in f["patterns"]:
    for s in p["support"]:
        kinds[(s["corpus"], p["kind"])] = kinds.get((s["corpus"], p["kind"]), 0) + 1
print("corpora/snapshot.json:", ", ".join(f"{c} {k} {n}" for (c, k), n in sorted(kinds.items())),
      "|", ", ".join(f"{c['name']}@{c['revision'][:12]}" for c in f["corpora"]))
PY
