"""KDA (Kimi Delta Attention) kernels in Triton: `kda_decode` and `kda_prefill`.

`reference` holds the float64 numpy references; `decode.toml` and `prefill.toml` are the
frozen contracts (kernels/README.md)."""
from .decode import kda_decode
from .prefill import kda_prefill

__all__ = ["kda_decode", "kda_prefill"]
