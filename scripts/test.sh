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
echo "== build the tests"
cargo test --workspace --locked --no-run
echo "== bench READMEs agree with their raw files"
.venv/bin/python bench/readme.py --check bench/runs/*/
# The Rust tests and the kernel tests side by side: either alone leaves a core idle while its tests
# wait on harness processes, sleeps and deadlines. They share the CPU through the suite's locks
# (tests/util.rs `cpu_heavy`/`cpu_alone`, kernels/tests/conftest.py): a timed test still has it alone.
echo "== cargo test, with pytest kernels/tests beside it (its output follows)"
pylog="$(mktemp)"
# two workers: most tests wait on harness subprocesses
.venv/bin/python -m pytest kernels/tests -q -n 2 --durations=15 > "$pylog" 2>&1 &
pytest_pid=$!
trap 'kill "$pytest_pid" 2>/dev/null || true; rm -f "$pylog"' EXIT
rust=0
cargo test --workspace --locked || rust=$?
py=0
wait "$pytest_pid" || py=$?
echo "== pytest kernels/tests"
cat "$pylog"
if [ "$rust" -ne 0 ] || [ "$py" -ne 0 ]; then
  echo "test.sh: cargo test exited $rust, pytest exited $py" >&2
  exit 1
fi
