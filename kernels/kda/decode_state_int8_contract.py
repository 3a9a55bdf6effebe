"""Contract of the KDA decode with its state pool stored as int8 (decode_state_contract.py; the
manifests decode_state_int8.toml here and in kda_cuda/ name it). The storage must match their [storage]."""
from kernels.kda.decode_state_contract import storage_contract

globals().update(storage_contract({"tensor": "state", "dtype": "int8", "scales": "head_k", "scale_tensor": "state_scale"}, "kda_decode_state_int8"))
