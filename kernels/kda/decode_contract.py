"""Contract of the KDA decode step (docs/CONTRACTS.md): kda_decode(q, k, v, g, beta, state, slots, o)
updates the rows `slots` of a state pool in place and writes o. Shape variables: N sequences, H
query/key heads, HV value heads, K, V head dims, S pool slots."""
import numpy as np

from kernels.kda import distributions as d
from kernels.kda.reference import naive_decode_kda

OP = "kda_decode"
ARGS = ["q", "k", "v", "g", "beta", "state", "slots", "o"]
INPUTS = ["q", "k", "v", "g", "beta", "slots"]
INOUTS = ["state"]
OUTPUTS = ["o"]
VARIANTS = ["long_memory"]
AGAINST = {"fla": "fla_against.py:kda_decode"}   # bench --against fla
SLICE_AXES = {"o": 2, "state": 2}   # (sequence or slot, value head)
# What each input takes in production, ends included: the check's second call draws over all of it
# (docs/CONTRACTS.md, RANGES). make_inputs stays realistic (distributions.py). FLA's KDA gate is
# g = -exp(A_log) * softplus(x + dt_bias) (fla/ops/kda/gate.py): log-space decay, 0 exactly where
# softplus underflows, unbounded below (A = exp(A_log) starts in [1, 16]); from -30 on, exp(g) <
# 1e-13 leaves nothing of a state of |S| <= 32 that float32 can see: "forget everything". beta is a
# sigmoid. v: activations, a generous symmetric bound. The state: the delta rule pulls S^T k toward
# v, so entries stay of the order of |v|; a long-memory stream with |v| <= 16 drove |S| to 30.
RANGES = {"g": (-30.0, 0.0), "beta": (0.0, 1.0), "v": (-16.0, 16.0), "state": (-32.0, 32.0)}


def tensors(s):
    N, H, HV, K, V, S = (s[x] for x in ("N", "H", "HV", "K", "V", "S"))
    f = "float32"
    return {"q": ((N, H, K), f), "k": ((N, H, K), f), "v": ((N, HV, V), f), "g": ((N, HV, K), f),
            "beta": ((N, HV), f), "state": ((S, HV, K, V), f), "slots": ((N,), "int64"), "o": ((N, HV, V), f)}


def make_inputs(s, rng, variant=None):
    N, H, HV, K, V, S = (s[x] for x in ("N", "H", "HV", "K", "V", "S"))
    lm = variant == "long_memory"
    return {"q": d.normed(rng, (N, H, K)), "k": d.normed(rng, (N, H, K)),
            "v": d.values(rng, (N, HV, V), lm), "g": d.gates(rng, (N, HV, K), lm), "beta": d.betas(rng, (N, HV), lm),
            "state": d.state(rng, (S, HV, K, V)), "slots": rng.permutation(S)[:N].astype(np.int64)}


def reference(x):
    o, pool = naive_decode_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], x["slots"])
    return {"o": o, "state": pool}


def written(name, x):
    """The pool's rows of `slots`; every other slot must come back bit-identical."""
    mask = np.zeros(np.shape(x[name]), dtype=bool)
    mask[x["slots"]] = True
    return mask


def smaller(s):
    """The sequences (one pool slot more than sequences; at least 2), then the pool alone, and the
    heads (their ratio kept); never K or V."""
    N, S = int(s["N"]), int(s["S"])
    seqs = [{"N": n, "S": n + 1} for n in d.doubling(min(N, 2), N)] + ([{"S": N + 1}] if S > N + 1 else [])
    return d.combine(s, [seqs, d.head_ladder(s)]) + [dict(s)]


def counted(s):
    """Where `profile` may count (as `smaller`, down to one sequence: counting needs no second)."""
    N, S = int(s["N"]), int(s["S"])
    return d.combine(s, [[{"N": n, "S": min(S, n + 1)} for n in d.doubling(1, N)], d.head_ladder(s)]) + [dict(s)]


def launch(s):
    """The CUDA kernel (kernels/kda_cuda/decode.cu): N * HV blocks of min(V, 128) threads."""
    return {"grid": [s["N"] * s["HV"]], "block": [min(s["V"], 128)],
            "params": ARGS + [{"int": s[n]} for n in ("N", "H", "HV", "K", "V")] + [{"float": float(s["K"]) ** -0.5}]}


def sequence(s, steps, rng):
    """`steps` decode steps of one stream of tokens (the drift): the pool in the first only."""
    N, H, HV, K, V, S = (s[x] for x in ("N", "H", "HV", "K", "V", "S"))
    toks = d.tokens(rng, N, steps, H, HV, K, V, True)
    pool = d.state(rng, (S, HV, K, V))
    slots = rng.permutation(S)[:N].astype(np.int64)
    xs = [dict({n: np.ascontiguousarray(a[:, t]) for n, a in toks.items()}, slots=slots) for t in range(steps)]
    xs[0]["state"] = pool
    return xs


# the relation with prefill: prefill(T) then M decode steps == prefill(T + M) ---------------------

def _prefill_then_decode(run_prefill, run_decode, shape, rng):
    B, T, M, H, HV, K, V = (shape[x] for x in ("B", "T", "M", "H", "HV", "K", "V"))
    x = d.tokens(rng, B, T + M, H, HV, K, V, False)
    x["initial_state"] = d.state(rng, (B, HV, K, V))
    S = B + 2
    slots = rng.permutation(S)[:B].astype(np.int64)
    pshape = {"B": B, "H": H, "HV": HV, "K": K, "V": V}
    full = run_prefill(dict(pshape, T=T + M), x)
    head = {n: (a[:, :T] if n != "initial_state" else a) for n, a in x.items()}
    part = run_prefill(dict(pshape, T=T), head)
    pool = np.zeros((S, HV, K, V), dtype=np.float32)
    pool[slots] = part["final_state"]
    os = []
    for m in range(M):
        step = {n: np.ascontiguousarray(x[n][:, T + m]) for n in ("q", "k", "v", "g", "beta")}
        res = run_decode({"N": B, "H": H, "HV": HV, "K": K, "V": V, "S": S}, dict(step, slots=slots, state=pool))
        pool = res["state"]
        os.append(res["o"])
    return [("o", np.stack(os, axis=1), full["o"][:, T:]), ("state", pool[slots], full["final_state"])]


def continues(run, shape, rng):
    """This manifest's kernel is a decode, `with` a prefill."""
    return _prefill_then_decode(lambda s, a: run("with", s, a), lambda s, a: run("self", s, a), shape, rng)


def continued_by(run, shape, rng):
    """This manifest's kernel is a prefill, `with` a decode."""
    return _prefill_then_decode(lambda s, a: run("self", s, a), lambda s, a: run("with", s, a), shape, rng)
