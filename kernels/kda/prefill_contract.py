"""Contract of KDA prefill (docs/CONTRACTS.md): kda_prefill(q, k, v, g, beta, o, initial_state,
final_state) over whole sequences. Shape variables: B sequences, T tokens, H query/key heads, HV
value heads, K, V head dims."""
import numpy as np

from kernels.kda import distributions as d
from kernels.kda.reference import naive_recurrent_kda

OP = "kda_prefill"
ARGS = ["q", "k", "v", "g", "beta", "o", "initial_state", "final_state"]
INPUTS = ["q", "k", "v", "g", "beta", "initial_state"]
INOUTS = []
OUTPUTS = ["o", "final_state"]
OPTIONAL = ["initial_state"]          # None: zeros
VARIANTS = ["long_memory"]
AGAINST = {"fla": "fla_against.py:kda_prefill"}   # bench --against fla
SLICE_AXES = {"final_state": 2}       # (sequence, value head); o: `slices`
# Production ranges, ends included (the check's second call draws over them; why each: the decode's
# contract, decode_contract.py). g reaches -30 and below in production; the kernel forms no decay
# factor above 1, so the whole range is finite (it overflowed below about -2.8 per token until
# issue #50 found it, when the chunk's decay was factored through one mid-chunk row).
RANGES = {"g": (-30.0, 0.0), "beta": (0.0, 1.0), "v": (-16.0, 16.0), "initial_state": (-32.0, 32.0)}
CHUNK = 64


def tensors(s):
    B, T, H, HV, K, V = (s[x] for x in ("B", "T", "H", "HV", "K", "V"))
    f = "float32"
    return {"q": ((B, T, H, K), f), "k": ((B, T, H, K), f), "v": ((B, T, HV, V), f), "g": ((B, T, HV, K), f),
            "beta": ((B, T, HV), f), "o": ((B, T, HV, V), f), "initial_state": ((B, HV, K, V), f),
            "final_state": ((B, HV, K, V), f)}


def make_inputs(s, rng, variant=None):
    B, T, H, HV, K, V = (s[x] for x in ("B", "T", "H", "HV", "K", "V"))
    x = d.tokens(rng, B, T, H, HV, K, V, variant == "long_memory")
    x["initial_state"] = d.state(rng, (B, HV, K, V))
    return x


def reference(x):
    o, s = naive_recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"])
    return {"o": o, "final_state": s}


def slices(name, a):
    """Per (sequence, value head)."""
    if name == "o":
        for b in range(a.shape[0]):
            for hv in range(a.shape[2]):
                yield (b, hv), a[b, :, hv]
    else:
        for idx in np.ndindex(a.shape[:2]):
            yield idx, a[idx]


def smaller(s):
    """The sequences; the tokens above the chunk with the same remainder (never across it); the
    heads (their ratio kept); never K or V."""
    B, T = int(s["B"]), int(s["T"])
    rem = T % CHUNK or CHUNK
    toks = [{"T": CHUNK * k + rem} for k in d.doubling(1, T // CHUNK) if CHUNK * k + rem < T] if T > CHUNK else []
    return d.combine(s, [[{"B": b} for b in d.doubling(1, B)], toks, d.head_ladder(s)]) + [dict(s)]


def sequence(s, steps, rng):
    """`steps` chained calls of T tokens each (the drift): the initial state in the first only;
    each call's final state is the next one's initial state (CARRY)."""
    B, T, H, HV, K, V = (s[x] for x in ("B", "T", "H", "HV", "K", "V"))
    toks = make_inputs(dict(s, T=T * steps), rng, "long_memory")
    xs = [{n: np.ascontiguousarray(toks[n][:, i * T:(i + 1) * T]) for n in ("q", "k", "v", "g", "beta")}
          for i in range(steps)]
    xs[0]["initial_state"] = toks["initial_state"]
    return xs


CARRY = {"final_state": "initial_state"}
