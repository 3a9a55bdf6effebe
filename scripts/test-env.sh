# The test suite's environment, sourced by scripts/test.sh and bench/test-times.sh (which times
# what test.sh runs): the Python tools, the build's incremental state, the scratch directory and
# how many tests run at once. Expects $root, the repository.

# Tests that run Python tools (ast-grep, the harness) find them here.
export KIDIOM_PYTHON="$root/.venv/bin/python"
export KIDIOM_TRITON36_PYTHON="$root/.venv-triton36/bin/python"
export PATH="$root/.venv/bin:$PATH"

# A first build (a fresh clone, CI) has no incremental state to reuse: writing it costs 10% of the
# cold build (97 -> 88 s on 2 cores). Later runs keep cargo's default, which rebuilds a change faster.
if [ ! -d target/debug ] && [ -z "${CARGO_INCREMENTAL:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

# Scratch on a RAM-backed tmpfs, as kidiom itself chooses (exec/src/scratch.rs): the tests' own
# temporary trees and every harness they run directly pass arrays through thousands of small
# files, each ~5 ms of a disk's journal on the 2-core CI VM against 0.1 ms on a tmpfs. The caller
# removes $suite_scratch when the suite ends.
suite_scratch=""
if [ -z "${TMPDIR:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] \
  && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge 2097152 ]; then
  suite_scratch="$(mktemp -d /dev/shm/kidiom-tests.XXXXXX)"
  export TMPDIR="$suite_scratch"
fi

# Tests at once, in each Rust test binary and in pytest: at least four, however few the cores.
# Many tests spend much of their time waiting on a deadline, a Ray head or a child's pipe; a
# test that times something still takes the CPU alone (tests/util.rs, `cpu_alone`).
cores="$(nproc 2>/dev/null || echo 2)"
test_jobs=$(( cores > 4 ? cores : 4 ))
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$test_jobs}"

# Clippy's lints in the test build itself: clippy-driver as the workspace's compiler, as `cargo
# clippy` runs it (the same -D warnings, every target the tests build), so the workspace compiles
# once (a full build that also lints) instead of a `cargo clippy` check and then a build: 114 -> 75 s
# cold on 2 cores. A later build without this environment recompiles the workspace's own crates
# (not their dependencies) once. A wrapper of the caller's own (sccache, ...) keeps its place, and
# the lints run apart (`lint_apart`, scripts/test.sh).
lint_apart=0
if [ -z "${RUSTC_WORKSPACE_WRAPPER:-}" ]; then
  clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
  if [ -z "$clippy_driver" ]; then
    echo "test-env: clippy is not installed (rustup component add clippy)" >&2
    exit 1
  fi
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
elif [[ "$(basename "$RUSTC_WORKSPACE_WRAPPER")" != clippy-driver* ]]; then
  lint_apart=1
fi
