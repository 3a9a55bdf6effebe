#!/usr/bin/env bash
# Mining on a Ray cluster against a local run (bench/ray_mine.py): `kidiom mine` and
# `kidiom mine --history` of one corpus (FLA by default, its clone in ~/.cache/kidiom) from an
# empty catalog, locally and through a local Ray head on 127.0.0.1 (cold: the binary crosses to
# the node; warm: it is in the node's cache), with the run's shards, their per-shard costs and a
# comparison of the two catalogs. Writes bench/runs/<date>-ray/ray_mine.json (and ray_mine.txt)
# and regenerates that run's README numbers when it has a README.
#
#   bench/ray_mine.sh                                   # corpora/fla.toml, 3 runs each
#   bench/ray_mine.sh --manifest corpora/deepgemm.toml --runs 1
#
# Needs .venv with Ray (scripts/setup-python.sh); starts and stops its own head.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup-python.sh >&2
cargo build --release --quiet
run="${KIDIOM_BENCH_RUN:-bench/runs/$(date +%F)-ray}"
mkdir -p "$run"
.venv/bin/python bench/ray_mine.py --out "$run" "$@" | tee "$run/ray_mine.txt"
if [[ -f "$run/README.md" ]]; then
  .venv/bin/python bench/readme.py "$run"
fi
