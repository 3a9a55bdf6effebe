#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, the Rust workspace
# (unit, integration and doc tests) and the kernel tests under Triton's
# interpreter. Installs what it needs (the Python environment in .venv/, a
# headless Chromium for the review site's browser tests).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

. scripts/test-env.sh
logs="$(mktemp -d)"
trap 'rm -rf "$suite_scratch" "$logs"' EXIT

# The set-up (mostly downloads and unpacking) runs while the test binaries build (the CPU).
(
  scripts/setup-python.sh
  # the GPU machine's Triton (3.6), for the tests that emit launch specs under it too
  KIDIOM_VENV="$root/.venv-triton36" KIDIOM_REQUIREMENTS=kernels/requirements-triton36.txt scripts/setup-python.sh
  scripts/setup-chromium.sh
) > "$logs/setup.log" 2>&1 &
setup=$!

echo "== cargo fmt --check"
cargo fmt --all -- --check
# Clippy's lints (-D warnings, every target) run inside this build: test-env.sh makes clippy-driver
# the workspace's compiler, as `cargo clippy` does, so the workspace compiles once, not twice.
if [ "$lint_apart" = 1 ]; then
  echo "== cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi
echo "== cargo test --no-run (with clippy's lints)"
cargo test --workspace --locked --no-run
echo "== set-up (Python environments, Chromium)"
if ! wait "$setup"; then
  cat "$logs/setup.log" >&2
  echo "set-up failed" >&2
  exit 1
fi
cat "$logs/setup.log"
# The harness's bytecode, compiled once: every harness process the tests start would compile what
# it imports again (0.19 -> 0.13 core-s; this machine, as CI, has PYTHONDONTWRITEBYTECODE).
# Hash-checked, so a copy of kernels/ in a test's project reads it, and a changed source never does.
.venv/bin/python -m compileall -q -j 0 --invalidation-mode checked-hash kernels > /dev/null
echo "== bench READMEs agree with their raw files"
.venv/bin/python bench/readme.py --check bench/runs/*/
# The integration tests (tests/, one binary) and, beside them, every crate's unit and doc tests
# (about 30 s). All with --workspace: the features the build unified, so nothing is built again.
# Every test target must be one of these: a new one names itself here.
cargo metadata --no-deps --format-version 1 --locked > "$logs/metadata.json"
.venv/bin/python - "$logs/metadata.json" <<'PY'
import json, sys
other = [p["name"] + ": " + t["kind"][0] + " " + t["name"] for p in json.load(open(sys.argv[1]))["packages"]
         for t in p["targets"] if t.get("test") and t["kind"][0] not in ("lib", "bin")
         and not (t["kind"][0] == "test" and t["name"] == "tests")]
if other:
    sys.exit("scripts/test.sh runs `--lib --bins`, `--test tests` and `--doc`; it does not run " + ", ".join(other))
PY
echo "== cargo test"
locks="${CARGO_TARGET_DIR:-$root/target}/tmp/kidiom-cpu-locks"
mkdir -p "$locks"
(
  # a share of the suite's CPU, as each heavy integration test takes one (tests/util.rs): a timed
  # test waits for these to end, and a test that waits for one does not start them
  exec 8>>"$locks/gate" 9>>"$locks/cpu"
  flock 8
  flock -s 9
  flock -u 8
  cargo test --workspace --locked --lib --bins && cargo test --workspace --locked --doc
) > "$logs/crates.log" 2>&1 &
crates=$!
tests_rc=0
cargo test --workspace --locked --test tests || tests_rc=$?
crates_rc=0
wait "$crates" || crates_rc=$?
cat "$logs/crates.log"
if [ "$tests_rc" != 0 ] || [ "$crates_rc" != 0 ]; then
  echo "cargo test failed (the integration tests: exit $tests_rc, the unit and doc tests: exit $crates_rc)" >&2
  exit 1
fi
# After the Rust tests, not beside them: the suite's CPU locks (tests/util.rs, kernels/tests/conftest.py)
# cover each test's body, not pytest's module fixtures (parallel C++ builds) or the services they
# leave running (a Ray head), so a timed Rust test beside pytest measured them (a CI run's host bench:
# noise floor 29.9%, the GIL release not accepted).
echo "== pytest kernels/tests"
.venv/bin/python -m pytest kernels/tests -q -n "$test_jobs" --durations=15
