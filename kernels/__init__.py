"""kidiom's local kernels: KDA decode and prefill (Triton, CUDA C++), their float64 references
and the harness that compiles, checks and benchmarks them. See kernels/README.md."""
