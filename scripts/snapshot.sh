#!/usr/bin/env bash
# Regenerates corpora/snapshot.json, the catalog snapshot the repository carries for machines
# that cannot reach GitHub: every default git corpus of kidiom.toml (FLA, DeepGEMM, Mooncake)
# as `kidiom run` mines it there -- the edit idioms of their histories (mined together, as `run`
# mines them) and their usage idioms (DeepGEMM's kernels, Mooncake's pybind11 bindings and their
# GIL handling; FLA's, imported only where its sdist fallback cannot be fetched either) --
# mined at the revisions their manifests pin, exported with
# `kidiom catalog export --format json --snapshot` (templates, counts, values and references:
# corpus, revision, path, line, commit id; no upstream source lines or commit messages).
# `kidiom run` imports the parts of a corpus it cannot reach, and says so.
#
# Needs clones of the three repositories (URL sources are cloned into ~/.cache/kidiom/git/, or
# $KIDIOM_CACHE/git/, on first use, or place one there).
#
#   scripts/snapshot.sh            # writes corpora/snapshot.json
#   KIDIOM=target/debug/kidiom scripts/snapshot.sh   # with a kidiom already built
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
kidiom="${KIDIOM:-}"
if [ -z "$kidiom" ]; then
  cargo build --release --locked --quiet
  kidiom="$root/target/release/kidiom"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
db="$tmp/catalog.sqlite"

git_corpora=(corpora/fla.toml corpora/deepgemm.toml corpora/mooncake.toml)
# Usage idioms are aggregated over the corpora mined together (a decoration recurs across
# them): mine every corpus kidiom.toml names, as `kidiom run` on a machine with GitHub does,
# so the support rows exported below are the ones that machine gets.
mapfile -t all_corpora < <(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("kidiom.toml", "rb"))["mine"]["corpora"]))')
"$kidiom" mine "${all_corpora[@]}" --db "$db" -q
"$kidiom" mine --history "${git_corpora[@]}" --db "$db" -q
# every corpus must have been read from git at its pin (a fallback would not be the same corpus)
"$kidiom" catalog stats --db "$db" --json | python3 -c '
import json, sys
kinds = {c["name"]: c["kind"] for c in json.load(sys.stdin)["corpora"]}
for name in ("fla", "deepgemm", "mooncake"):
    if kinds.get(name) != "git":
        sys.exit(f"snapshot.sh: expected {name} mined from git, got {kinds}")
'
"$kidiom" catalog export --format json --snapshot --corpus fla --corpus deepgemm --corpus mooncake --db "$db" \
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
usage = {s["corpus"] for p in f["patterns"] if p["kind"] == "usage" for s in p["support"]}
if not {"deepgemm", "mooncake"} <= usage:
    sys.exit(f"snapshot.sh: the usage idioms of deepgemm and mooncake must be in the snapshot (usage support: {usage})")
if not {"fla", "deepgemm", "mooncake"} <= names:
    sys.exit(f"snapshot.sh: every default git corpus must be in the snapshot (corpora: {names})")
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
