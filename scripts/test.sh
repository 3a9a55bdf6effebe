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
# Tests that run Python tools (ast-grep, the harness) find them here.
export KIDIOM_PYTHON="$root/.venv/bin/python"
export KIDIOM_TRITON36_PYTHON="$root/.venv-triton36/bin/python"
export PATH="$root/.venv/bin:$PATH"

# A first build (a fresh clone, CI) has no incremental state to reuse: writing it costs 10% of the
# cold build (97 -> 88 s on 2 cores). Later runs keep cargo's default, which rebuilds a change faster.
if [ ! -d target/debug ] && [ -z "${CARGO_INCREMENTAL:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

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
# two workers: most tests wait on harness subprocesses, and cargo's tests are done by now
.venv/bin/python -m pytest kernels/tests -q -n 2 --durations=15
