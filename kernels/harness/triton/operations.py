"""The two KDA operations as the harness sees them: random inputs, the float64 reference, and
how a kernel's public function is called (destination passing): `args` is the argument order,
`layout(x)` which arguments are read-only inputs, in/out tensors and outputs (with shapes),
`written(name, x)` where the call writes an in/out tensor (the GPU gate's launch specs); the
check's worker (worker.py) makes the call from that description and never sees this module.

Inputs are float32 and realistic for KDA: q and k L2-normalised, beta in (0, 1), g = log of a
decay in (0.5, 1) (the `long_memory` variant: in (0.999, 1), beta < 0.1, v off-centre, which
keeps information for thousands of tokens and is used for the error-versus-length curve).
"""
import numpy as np

from ...kda import reference as ref

__all__ = ["DecodeOp", "PrefillOp", "OPS", "slices"]


def _normed(rng, shape):
    x = rng.standard_normal(shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _gates(rng, shape, long_memory):
    lo = 0.999 if long_memory else 0.5
    return np.log(rng.uniform(lo, 1.0, shape)).astype(np.float32)


def _betas(rng, shape, long_memory):
    return rng.uniform(0.0, 0.1 if long_memory else 1.0, shape).astype(np.float32)


def _values(rng, shape, long_memory):
    v = rng.standard_normal(shape)
    return (v + 1.0 if long_memory else v).astype(np.float32)


class DecodeOp:
    """kda_decode(q, k, v, g, beta, state, slots, o, scale): one step on a slot pool."""
    name = "kda_decode"
    # output name -> number of leading axes that define a slice (sequence / slot, value head)
    slice_axes = {"o": 2, "state": 2}

    def make_inputs(self, shape, rng, long_memory=False):
        N, H, HV, K, V, S = (shape[x] for x in ("N", "H", "HV", "K", "V", "S"))
        return {
            "q": _normed(rng, (N, H, K)), "k": _normed(rng, (N, H, K)),
            "v": _values(rng, (N, HV, V), long_memory), "g": _gates(rng, (N, HV, K), long_memory),
            "beta": _betas(rng, (N, HV), long_memory),
            "state": (0.5 * rng.standard_normal((S, HV, K, V))).astype(np.float32),
            "slots": rng.permutation(S)[:N].astype(np.int64),
        }

    def reference(self, x):
        o, pool = ref.naive_decode_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], x["slots"])
        return {"o": o, "state": pool}

    args = ("q", "k", "v", "g", "beta", "state", "slots", "o")
    results = ("o", "state")

    def layout(self, x):
        return {"inputs": ["q", "k", "v", "g", "beta", "slots"], "inouts": ["state"],
                "outputs": {"o": list(x["v"].shape)}}

    def result_shape(self, name, x):
        return tuple(x["v"].shape) if name == "o" else tuple(x["state"].shape)

    def written(self, name, x):
        """Where the call writes the in/out tensor `name` (the state pool: the rows of `slots`);
        every other element must come back bit-identical (the GPU gate's `.written.npy`)."""
        mask = np.zeros(x[name].shape, dtype=bool)
        mask[x["slots"]] = True
        return mask


class PrefillOp:
    """kda_prefill(q, k, v, g, beta, o, initial_state, final_state, scale)."""
    name = "kda_prefill"
    slice_axes = {"o": None, "final_state": 2}   # o is sliced by (sequence, value head) below

    def make_inputs(self, shape, rng, long_memory=False, initial_state=True):
        B, T, H, HV, K, V = (shape[x] for x in ("B", "T", "H", "HV", "K", "V"))
        x = {
            "q": _normed(rng, (B, T, H, K)), "k": _normed(rng, (B, T, H, K)),
            "v": _values(rng, (B, T, HV, V), long_memory), "g": _gates(rng, (B, T, HV, K), long_memory),
            "beta": _betas(rng, (B, T, HV), long_memory),
        }
        x["initial_state"] = (0.5 * rng.standard_normal((B, HV, K, V))).astype(np.float32) if initial_state else None
        return x

    def reference(self, x):
        o, s = ref.naive_recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"])
        return {"o": o, "final_state": s}

    args = ("q", "k", "v", "g", "beta", "o", "initial_state", "final_state")
    results = ("o", "final_state")

    def layout(self, x):
        names = ["q", "k", "v", "g", "beta"] + (["initial_state"] if x.get("initial_state") is not None else [])
        return {"inputs": names, "inouts": [],
                "outputs": {n: list(self.result_shape(n, x)) for n in self.results}}

    def result_shape(self, name, x):
        B, T, H, K = x["q"].shape
        HV, V = x["v"].shape[2:]
        return (B, T, HV, V) if name == "o" else (B, HV, K, V)

    @staticmethod
    def slices(name, a):
        """(index, sub-array) per slice: per (sequence, value head)."""
        if name == "o":
            B, T, HV, V = a.shape
            for b in range(B):
                for hv in range(HV):
                    yield (b, hv), a[b, :, hv]
        else:
            for idx in np.ndindex(a.shape[:2]):
                yield idx, a[idx]


OPS = {"kda_decode": DecodeOp(), "kda_prefill": PrefillOp()}


def slices(op, name, a):
    if hasattr(op, "slices"):
        yield from op.slices(name, a)
    else:
        for idx in np.ndindex(a.shape[: op.slice_axes[name]]):
            yield idx, a[idx]
