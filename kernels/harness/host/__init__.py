"""The host C++ side of the harness (`language = "cpp"`, e.g. kernels/kv_transfer/): pybind11
modules built with the system compiler, checked and timed on the CPU.

- hostcontract.py: the host contract beside the module (docs/CONTRACTS.md, "Host (C++) contracts"):
  loaded by file path on the checker's side only, every answer validated (a broken contract is a
  one-line error); cases.py: what a contract builds its cases and service workload from.
- commands.py: the `compile`, `check` and `bench` commands for such a kernel, driven by its contract
  (running and judging the cases, the ThreadSanitizer run, the scheduler-throughput bench); no
  operation-specific code.
- build.py: the sandboxed build of a module (and its TSan variant), cached.
- stats.py: the bench's statistics (noise floor, speedups, flags).
- worker_client.py is the harness's side (runs a worker on a plan, reads back its report) of
  worker.py, the worker's side: the only process that loads a candidate module, run by file path
  from a copy in its scratch directory (it imports nothing of kernels/).
"""
