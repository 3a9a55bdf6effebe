"""Contracts of the KDA decode with its state pool stored in fewer bytes (issue #27; the precision
variants, kernels/README.md "Precision variants"): `storage_contract(storage)` builds the module
globals of one storage format, and decode_state_{bf16,fp8,int8,int8u}_contract.py are its four
uses. The decode of kernels/kda/decode_contract.py with:

- `state` the pool's bits ([S, HV, K, V] int16 bf16 patterns, uint8 e4m3 codes or int8 codes),
  in/out; with per-row int8 scales, `state_scale` [S, HV, K] float32 after it, in/out too;
- `reference(x)`: the SIMULATED step (the float64 decode on the dequantised pool, its rows of
  `slots` stored again as the format stores them; storage.py), in the storage's own units: the
  codes and scales as numbers. What a correct kernel produces up to float32 arithmetic;
- `magnitude(name, x)`: what that float32 arithmetic may cost, per element (the terms' sizes).

The stored tensors are not float32: the contract declares them in STORED, which lets them pass
contract.py's rule that results travel as float32 (RESULT_DTYPES). Only the precision gate
(python -m kernels.harness precision, triton/precision.py) judges such a contract; check, bench,
spec and profile refuse a variant manifest (cli.py). compile and the CUDA launch use its ARGS,
tensors() and launch() like any contract's."""
import numpy as np

from kernels.kda import decode_contract as base
from kernels.harness.triton.storage import Storage

_BITS = {"bf16": "int16", "fp8e4m3": "uint8", "int8": "int8"}


def storage_contract(storage, op):
    """The globals of the contract of the decode whose pool is kept as `storage` (a manifest's
    [storage] table)."""
    st = Storage(storage)
    scales = st.scale_tensor
    args = ["q", "k", "v", "g", "beta", "state"] + ([scales] if scales else []) + ["slots", "o"]
    inouts = ["state"] + ([scales] if scales else [])

    def tensors(s):
        t = base.tensors(s)
        t["state"] = (t["state"][0], _BITS[storage["dtype"]])
        if scales:
            t[scales] = (t["state"][0][:3], "float32")
        return {n: t[n] for n in args}

    def make_inputs(s, rng, variant=None):
        x = base.make_inputs(s, rng, variant)
        bits, sc = st.encode(x["state"])
        x["state"] = bits
        if scales:
            x[scales] = sc
        return x

    def reference(x):
        pool = st.decode(x["state"], x.get(scales) if scales else None)
        r = base.reference(dict(x, state=pool))
        slots = x["slots"]
        bits = np.array(x["state"], copy=True)
        eb, es = st.encode(r["state"][slots])
        bits[slots] = eb
        out = {"o": r["o"], "state": bits.astype(np.float64)}
        if scales:
            sc = np.array(x[scales], copy=True)
            sc[slots] = es
            out[scales] = sc.astype(np.float64)
        return out

    def written(name, x):
        mask = np.zeros(np.shape(x[name]), dtype=bool)
        mask[x["slots"]] = True
        return mask

    def magnitude(name, x):
        """Per element of the stored tensor `name` after the step: the float64 sum of the absolute
        values of the terms its new value is computed from (0 where the call does not write). A
        kernel in float32 differs from the float64 simulation by a few float32 rounding errors of
        these, which is more than a rounding step of the format where they cancel (a state value
        1e-7 computed from terms of 3e-2: bf16's step there is 1e-9, float32's error of the terms
        2e-9). The decode: new = S' + k_i * beta * (v_j - sum_i' k_i' S'_i'j), S' = S * exp(g_i)."""
        pool = st.decode(x["state"], x.get(scales) if scales else None)
        out = np.zeros(pool.shape, dtype=np.float64)
        if name != "state":
            return out
        slots = x["slots"]
        N, HV = x["v"].shape[:2]
        h = np.arange(HV) // (HV // x["k"].shape[1])
        sp = np.abs(pool[slots] * np.exp(np.asarray(x["g"], np.float64))[..., None])    # [N, HV, K, V]
        kk = np.abs(np.asarray(x["k"], np.float64)[:, h])                             # [N, HV, K]
        dot = np.einsum("nhk,nhkv->nhv", kk, sp)                                       # [N, HV, V]
        beta = np.abs(np.asarray(x["beta"], np.float64))[..., None, None]
        out[slots] = sp + kk[..., None] * beta * (np.abs(np.asarray(x["v"], np.float64))[:, :, None, :]
                                                  + dot[:, :, None, :])
        return out

    def launch(s):
        """The CUDA variants (kernels/kda_cuda/decode_state_*.cu): the decode's launch, N * HV
        blocks of min(V, 128) threads, with the scales' pointer after the pool's where stored."""
        lay = base.launch(s)
        return dict(lay, params=args + lay["params"][len(base.ARGS):])

    return {"OP": op, "ARGS": args, "INPUTS": list(base.INPUTS), "INOUTS": inouts, "OUTPUTS": ["o"],
            "STORED": inouts, "VARIANTS": list(base.VARIANTS), "SLICE_AXES": dict(base.SLICE_AXES, **(
                {scales: 2} if scales else {})), "STORAGE": dict(storage),
            "tensors": tensors, "make_inputs": make_inputs, "reference": reference, "written": written,
            "magnitude": magnitude,
            "smaller": base.smaller, "counted": base.counted, "launch": launch}
