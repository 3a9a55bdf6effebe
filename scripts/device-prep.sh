#!/usr/bin/env bash
# Prepare what travels to a GPU machine (no Rust toolchain there, 64 MiB carried in all): the
# release kidiom, stripped of its symbols (34 MB -> about 29 MB), at .device/kidiom, which
# scripts/device-check.sh finds first. Prints the size to carry.
#
#   scripts/device-prep.sh    # then carry ".device" (and ".kidiom" for the catalog's candidates)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release --locked --bin kidiom
mkdir -p .device
strip -o .device/kidiom.tmp target/release/kidiom
mv .device/kidiom.tmp .device/kidiom
du -sh .device/kidiom ${KIDIOM_CATALOG:-.kidiom/catalog.sqlite} 2>/dev/null || true
