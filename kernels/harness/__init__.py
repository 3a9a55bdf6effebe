"""The kernel harness: `python -m kernels.harness compile|check|bench|sweep|profile|list|fleet`,
one JSON object out (cli.py; the validator calls it, wire.rs reads it).

- At the top, what every command shares: cli.py (the command line), wire.py (exit codes,
  versions, the commit), manifest.py (the kernel manifests), loader.py (a kernel's functions from
  its source), fleet.py (the same commands across a Ray cluster; validator/src/backend/fleet.rs
  compiles this file in, so it stays here and imports nothing of the package).
- triton/: Triton and CUDA kernels (check, compile, profile, sweep, the GPU bench).
- host/: host C++ (pybind11) kernels (build, check, bench).
- sandbox/: the confinement every process that runs candidate code gets.

In triton/ and host/, worker_client.py is the harness's side of worker.py, the sandboxed worker.
"""
