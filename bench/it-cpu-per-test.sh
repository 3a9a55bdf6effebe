#!/bin/bash
# Each integration test alone (RUST_TEST_THREADS=1): busy core-seconds of the whole machine (/proc/stat), wall seconds, exit, name (issue #42).
# bench/it-cpu-per-test.sh NAMES_FILE, after `cargo test --no-run`; the newest tests binary.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$root"; . scripts/test-env.sh
export TMPDIR=$(mktemp -d /dev/shm/x.XXXX)
export RUST_TEST_THREADS=1
while read t; do
  read -r _ u n s i w q sq st _ < /proc/stat; b0=$((u+n+s+q+sq+st)); t0=$EPOCHREALTIME
  $(ls -t target/debug/deps/tests-* | grep -v "\.d$" | head -1) --exact "$t" > /dev/null 2>&1; rc=$?
  read -r _ u n s i w q sq st _ < /proc/stat; b1=$((u+n+s+q+sq+st)); t1=$EPOCHREALTIME
  awk -v a=$t0 -v b=$t1 -v c=$(( b1-b0 )) -v t="$t" -v rc=$rc 'BEGIN{printf "%.1f\t%.1f\t%s\t%s\n", c/100, b-a, rc, t}'
done < "${1:?a file of test names, from the tests binary --list}" > /dev/stdout
echo done >> /dev/stdout
