"""Contract of the KDA decode with its state pool stored as bf16 (decode_state_contract.py; the
manifests decode_state_bf16.toml here and in kda_cuda/ name it). The storage must match their [storage]."""
from kernels.kda.decode_state_contract import storage_contract

globals().update(storage_contract({"tensor": "state", "dtype": "bf16"}, "kda_decode_state_bf16"))
