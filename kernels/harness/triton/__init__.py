"""The device-kernel side of the harness: Triton kernels and the CUDA kernels that share their
worker (launched by ../cuda/emulation.py), each judged by running it. What an operation is comes
from the kernel's contract module (../contract.py, docs/CONTRACTS.md), never from this package.

- check.py judges a candidate against the float64 reference (the contract's); profile.py counts work per source line; sweep.py measures many variants for
  the search; bench.py times a candidate against the baseline on a GPU; aot.py compiles ahead of
  time (PTX, SASS, the instruction mix); spec.py writes the Rust GPU gate's launch specs (its
  compiles through aot.py's worker, its inputs and expected values from the contract).
- Every run of candidate code happens in a sandboxed worker: worker_client.py is the harness's
  side (starts workers, sends requests, reads results) of worker.py, the worker's side. aot.py and
  bench.py pair the same way with aotworker.py and benchworker.py.
- What the workers import is copied into their scratch directory as the flat package `kidiom_rt`
  (worker_client.RUNTIME, aot.RUNTIME, bench.RUNTIME): worker.py, arrays.py (numpy tensors),
  backend.py, interp.py (the interpreter's GPU-faithful emulation), workprofile.py, cudatools.py
  and the CUDA launcher (../cuda/emulation.py, as cuda_launch.py). These files import each other only relatively, within this folder, so
  the same imports work here and in the copy.

CUDA's launch and emulation tools (cudatools.py) live here, not under host/: they run in these
workers, for kernels on the device.
"""
