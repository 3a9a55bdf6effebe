#!/usr/bin/env bash
# The Ray executor's costs and scaling on this machine (bench/ray_scaling.py): real harness calls
# locally and as tasks on a local Ray head, then the validator's pipeline simulated on local heads
# that declare N = 1..64 logical GPUs. Writes bench/runs/<date>-ray/ray.json (and ray.txt, the
# printed table) and regenerates that run's README numbers when it has a README.
#
#   bench/ray_scaling.sh                        # --scale 0.1 --ns 1,2,4,8,16,64
#   bench/ray_scaling.sh --scale 0.25 --ns 1,8,64
#
# Needs .venv with Ray (scripts/setup-python.sh); starts and stops its own heads on 127.0.0.1.
# About 3 minutes and up to 5 GB of memory (N=64: 128 Ray workers) on the 2-core VM.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup-python.sh >&2
run="${KIDIOM_BENCH_RUN:-bench/runs/$(date +%F)-ray}"
mkdir -p "$run"
.venv/bin/python bench/ray_scaling.py --out "$run" "$@" | tee "$run/ray.txt"
if [[ -f "$run/README.md" ]]; then
  .venv/bin/python bench/readme.py "$run"
fi
