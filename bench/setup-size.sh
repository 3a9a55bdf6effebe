#!/usr/bin/env bash
# The Python set-up's time and size (issue #48: torch in the environment): a fresh environment
# made by scripts/setup-python.sh from each requirements file given, one after another, with
# pip's cache as it is (wheels cached: the time is unpacking and installing, not downloading).
#
#   bench/setup-size.sh OUT_DIR NAME=REQUIREMENTS_FILE...
#
# Writes OUT_DIR/setup.tsv: name, wall seconds, exit status, the environment's size in MB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"; shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
: > "$out/setup.tsv"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for pair in "$@"; do
  name="${pair%%=*}"; req="$(cd "$(dirname "${pair#*=}")" && pwd)/$(basename "${pair#*=}")"
  t0=$EPOCHREALTIME rc=0
  KIDIOM_VENV="$scratch/$name" KIDIOM_REQUIREMENTS="$req" "$root/scripts/setup-python.sh" > "$out/$name.log" 2>&1 || rc=$?
  size=$(du -sm "$scratch/$name" | cut -f1)
  awk -v n="$name" -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" -v s="$size" \
    'BEGIN { printf "%s\t%.1f\t%d\t%d MB\n", n, b - a, rc, s }' >> "$out/setup.tsv"
  rm -rf "${scratch:?}/$name"
done
cat "$out/setup.tsv"
