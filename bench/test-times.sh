#!/usr/bin/env bash
# The whole suite's time, per phase and per test (issue #42): what scripts/test.sh runs, each phase
# timed (the Python set-up beside fmt and the debug build of every test binary with clippy's lints
# in it, each test binary with the integration tests beside the others, the bench README check,
# pytest), and every test's own time: Rust tests through libtest's JSON report
# (`--report-time`, an unstable libtest option that RUSTC_BOOTSTRAP=1 unlocks for the test binaries
# alone: the build is the ordinary one), pytest through its JUnit XML.
#
#   bench/test-times.sh [OUT_DIR]         default bench/runs/<date>-tests
#
# Writes phases.tsv, rust/<binary>.jsonl, pytest.xml, and prints the table bench/test_times.py
# makes of them (the slowest tests, and the totals by phase). Run it on an idle machine: the figures
# are wall-clock seconds on however many cores there are (CI has 2); wall.txt holds the whole run's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-bench/runs/$(date +%F)-tests}"
mkdir -p "$out/rust"
out="$(cd "$out" && pwd)"   # the test binaries run from their package's directory
phases="$out/phases.tsv"
: > "$phases"
phase() {   # phase NAME CMD...: runs CMD, appends "NAME<TAB>seconds<TAB>exit" to phases.tsv
  local name="$1"; shift
  local t0="$EPOCHREALTIME" rc=0
  "$@" || rc=$?
  awk -v n="$name" -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "%s\t%.1f\t%d\n", n, b - a, rc }' >> "$phases"
  return 0
}

started="$EPOCHREALTIME"
# each test's wait for the suite's CPU locks (tests/util.rs, kernels/tests/conftest.py), this run's only
locks=target/tmp/kidiom-cpu-locks
mkdir -p "$locks"
: > "$locks/waits.tsv"
. scripts/test-env.sh
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$suite_scratch"' EXIT
# as scripts/test.sh: the set-up beside the build, clippy's lints inside it (test-env.sh), the other
# test binaries beside the integration tests
(
  phase setup-python scripts/setup-python.sh
  phase setup-python-triton36 env KIDIOM_VENV="$root/.venv-triton36" \
    KIDIOM_REQUIREMENTS=kernels/requirements-triton36.txt scripts/setup-python.sh
  phase setup-chromium scripts/setup-chromium.sh
) > "$tmp/setup.log" 2>&1 &
setup=$!
phase fmt cargo fmt --all -- --check
if [ "$lint_apart" = 1 ]; then
  phase clippy cargo clippy --workspace --all-targets --locked -- -D warnings
fi
# the test binaries as `cargo test` builds them, then each run from its package's directory
cargo_json="$tmp/build.json"
phase build-tests sh -c "cargo test --workspace --locked --no-run --message-format=json > '$cargo_json'"
wait "$setup" || { cat "$tmp/setup.log" >&2; exit 1; }
phase compile-harness .venv/bin/python -m compileall -q -j 0 --invalidation-mode checked-hash kernels
.venv/bin/python - "$cargo_json" > "$tmp/binaries.tsv" <<'PY'
import json, sys, os
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        name = m["target"]["name"] + ("-" + m["target"]["kind"][0] if m["target"]["kind"][0] != "lib" else "")
        print(f"{name}\t{os.path.dirname(m['manifest_path'])}\t{m['executable']}")
PY
run_binary() {   # run_binary NAME DIR EXE
  phase "test:$1" sh -c "cd '$2' && RUSTC_BOOTSTRAP=1 '$3' -Z unstable-options --format json --report-time \
    > '$out/rust/$1.jsonl'"
}
# the kidiom package's (the integration tests) beside the other crates' and the doc tests
while IFS=$'\t' read -r name dir exe; do
  if [ "$dir" = "$root" ]; then run_binary "$name" "$dir" "$exe"; fi
done < "$tmp/binaries.tsv" &
kidiom=$!
(
  # a share of the suite's CPU, as scripts/test.sh takes for them
  exec 8>>"$locks/gate" 9>>"$locks/cpu"
  flock 8
  flock -s 9
  flock -u 8
  while IFS=$'\t' read -r name dir exe; do
    if [ "$dir" != "$root" ]; then run_binary "$name" "$dir" "$exe"; fi
  done < "$tmp/binaries.tsv"
  phase doctests cargo test --workspace --locked --doc -q
)
wait "$kidiom"
# (this run's own folder has no README yet: you write it, with `bench/readme.py` filling its numbers)
mapfile -t runs < <(for d in bench/runs/*/; do [ "$(cd "$d" && pwd)" = "$out" ] || echo "$d"; done)
phase bench-readmes .venv/bin/python bench/readme.py --check "${runs[@]}"
phase pytest .venv/bin/python -m pytest kernels/tests -q -n "$test_jobs" --junitxml="$out/pytest.xml"
cp "$locks/waits.tsv" "$out/waits.tsv"
awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }' > "$out/wall.txt"
.venv/bin/python bench/test_times.py "$out"
