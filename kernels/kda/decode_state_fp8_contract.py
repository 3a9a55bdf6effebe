"""Contract of the KDA decode with its state pool stored as fp8 (decode_state_contract.py; the
manifests decode_state_fp8.toml here and in kda_cuda/ name it). The storage must match their [storage]."""
from kernels.kda.decode_state_contract import storage_contract

globals().update(storage_contract({"tensor": "state", "dtype": "fp8e4m3", "scales": "tensor", "scale": 0.03125}, "kda_decode_state_fp8"))
