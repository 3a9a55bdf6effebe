#!/usr/bin/env bash
# kidiom's main job on a fresh machine: build, set up the kernel harness's
# Python environment, then `kidiom run` (the whole loop on kidiom.toml's
# defaults). Extra arguments go to `kidiom run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup-python.sh >&2
export KIDIOM_PYTHON="$root/.venv/bin/python"
cargo build --release --locked --quiet
exec target/release/kidiom run "$@"
