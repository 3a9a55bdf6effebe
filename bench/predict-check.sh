#!/usr/bin/env bash
# The device model against the published measurements of bench/published (issue #40): the work
# of every row's kernels made again (`--refresh`: profiles and compiles, rewriting work.json), then
# the check as CI runs it (from work.json), with its JSON, its table and both times.
#
#   bench/predict-check.sh RUN_DIR      writes RUN_DIR/predict-check.json, predict-check.txt, seconds.txt
#
# Set KIDIOM_CACHE to an empty folder for a cold refresh (the harness's profile and compile
# caches otherwise serve it). Then `python bench/readme.py RUN_DIR` puts the tables in its README.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
run="${1:?usage: bench/predict-check.sh RUN_DIR}"
mkdir -p "$run"
kidiom="${KIDIOM:-$root/target/release/kidiom}"
[ -x "$kidiom" ] || kidiom="$root/target/debug/kidiom"
now() { date +%s.%N; }
t0=$(now)
"$kidiom" predict --check bench/published --refresh > /dev/null
t1=$(now)
rc=0
"$kidiom" predict --check bench/published --json > "$run/predict-check.json" || rc=$?
t2=$(now)
"$kidiom" predict --check bench/published > "$run/predict-check.txt" || true
{
  echo "refresh (profile and compile every row's kernels): $(echo "$t1 - $t0" | bc) s"
  echo "check from work.json: $(echo "$t2 - $t1" | bc) s, exit $rc, $(nproc) cores, $(basename "$kidiom") build"
} > "$run/seconds.txt"
cat "$run/seconds.txt"
