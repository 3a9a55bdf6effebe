#!/usr/bin/env bash
# The device model against the published measurements of bench/published (issue #40):
# `kidiom predict --check` with its JSON and its table, and how long it took.
#
#   bench/predict-check.sh RUN_DIR      writes RUN_DIR/predict-check.json, predict-check.txt, seconds.txt
#
# Then `python bench/readme.py RUN_DIR` puts the tables in its README. The harness's caches
# (profiles, compiles) make a second run fast; the first profiles and compiles every row's shape.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
run="${1:?usage: bench/predict-check.sh RUN_DIR}"
mkdir -p "$run"
kidiom="${KIDIOM:-$root/target/release/kidiom}"
[ -x "$kidiom" ] || kidiom="$root/target/debug/kidiom"
start=$(date +%s.%N)
rc=0
"$kidiom" predict --check bench/published --json > "$run/predict-check.json" || rc=$?
end=$(date +%s.%N)
"$kidiom" predict --check bench/published > "$run/predict-check.txt" || true
echo "predict --check: $(echo "$end - $start" | bc) s, exit $rc, $(nproc) cores" > "$run/seconds.txt"
cat "$run/seconds.txt"
