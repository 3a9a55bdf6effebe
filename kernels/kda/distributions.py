"""Realistic KDA inputs (float32), shared by the decode and prefill contracts: q and k
L2-normalised, beta in (0, 1), g = log of a decay in (0.5, 1). `long_memory`: decay in (0.999, 1),
beta < 0.1, v off-centre, which keeps information for thousands of tokens (the error-versus-length
curve and the drift)."""
import numpy as np


def normed(rng, shape):
    x = rng.standard_normal(shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def gates(rng, shape, long_memory):
    lo = 0.999 if long_memory else 0.5
    return np.log(rng.uniform(lo, 1.0, shape)).astype(np.float32)


def betas(rng, shape, long_memory):
    return rng.uniform(0.0, 0.1 if long_memory else 1.0, shape).astype(np.float32)


def values(rng, shape, long_memory):
    v = rng.standard_normal(shape)
    return (v + 1.0 if long_memory else v).astype(np.float32)


def tokens(rng, B, T, H, HV, K, V, long_memory):
    """q, k, v, g, beta of B sequences of T tokens, in this order from `rng`."""
    return {"q": normed(rng, (B, T, H, K)), "k": normed(rng, (B, T, H, K)),
            "v": values(rng, (B, T, HV, V), long_memory), "g": gates(rng, (B, T, HV, K), long_memory),
            "beta": betas(rng, (B, T, HV), long_memory)}


def state(rng, shape):
    return (0.5 * rng.standard_normal(shape)).astype(np.float32)


def doubling(lo, hi):
    """lo, 2 lo, 4 lo, ... below hi."""
    out, v = [], max(1, int(lo))
    while v < hi:
        out.append(v)
        v *= 2
    return out


def head_ladder(shape):
    """Fewer query/key heads, the value heads' ratio kept."""
    H, HV = int(shape["H"]), int(shape["HV"])
    return [{"H": h, "HV": h * (HV // H)} for h in doubling(1, H) if H % h == 0] if HV % H == 0 else []


def combine(shape, groups):
    """Every combination of one alternative (or none) per group, applied to `shape`."""
    import itertools
    out = []
    for combo in itertools.product(*[g + [None] for g in groups if g]):
        c = dict(shape)
        for g in combo:
            c.update(g or {})
        out.append(c)
    return out
