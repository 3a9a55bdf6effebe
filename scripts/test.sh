#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, the Rust workspace
# (unit, integration and doc tests) and the kernel tests under Triton's
# interpreter. Installs what it needs (the Python environment in .venv/, a
# headless Chromium for the review site's browser tests).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

scripts/setup-python.sh
# The GPU machine's Triton (3.6), for the tests that emit launch specs under it too.
KIDIOM_VENV="$root/.venv-triton36" KIDIOM_REQUIREMENTS=kernels/requirements-triton36.txt scripts/setup-python.sh
scripts/setup-chromium.sh
. scripts/test-env.sh
trap 'rm -rf "$suite_scratch"' EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== bench READMEs agree with their raw files"
.venv/bin/python bench/readme.py --check bench/runs/*/
# After the Rust tests, not beside them: the suite's CPU locks (tests/util.rs, kernels/tests/conftest.py)
# cover each test's body, not pytest's module fixtures (parallel C++ builds) or the services they
# leave running (a Ray head), so a timed Rust test beside pytest measured them (a CI run's host bench:
# noise floor 29.9%, the GIL release not accepted).
echo "== pytest kernels/tests"
.venv/bin/python -m pytest kernels/tests -q -n "$test_jobs" --durations=15
