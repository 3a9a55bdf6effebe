"""Host C++ KV-cache transfer kernels (prefill -> decode handoff): `kv_transfer.cpp`, a pybind11
module built by the harness (`kernels/harness/host/build.py`), and its numpy reference."""
