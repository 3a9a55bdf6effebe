"""The host C++ side of the harness (`language = "cpp"`, e.g. kernels/kv_transfer/): pybind11
modules built with the system compiler, checked and timed on the CPU.

- commands.py: the `compile`, `check` and `bench` commands for such a kernel (cases, judging,
  the ThreadSanitizer run, the scheduler-throughput bench).
- build.py: the sandboxed build of a module (and its TSan variant), cached.
- stats.py: the bench's statistics (noise floor, speedups, flags).
- worker_client.py is the harness's side (runs a worker on a plan, reads back its report) of
  worker.py, the worker's side: the only process that loads a candidate module, run by file path
  from a copy in its scratch directory (it imports nothing of kernels/).
"""
