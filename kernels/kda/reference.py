"""Float64 references for Kimi Delta Attention (KDA), in numpy, independent of the kernels.

Two forms of the same math (kernels/README.md, SPEC section 9):

* `naive_recurrent_kda`: token by token. For one sequence and one value head, with the state
  S (K x V), the log-space decay g (K), the scalar beta, q and k (K) and v (V):

      S <- diag(exp(g)) S;  p = S^T k;  d = beta (v - p);  S <- S + k d^T;  o = S^T (scale q)

* `naive_chunk_kda`: the chunked (WY / UT) form over chunks of `chunk_size` tokens.

Both take `[B, T, H, K]` q/k, `[B, T, HV, V]` v, `[B, T, HV, K]` g, `[B, T, HV]` beta and an
optional `[B, HV, K, V]` initial state, and return `(o [B, T, HV, V], S [B, HV, K, V])` in
float64. Query/key head of value head `hv` is `hv // (HV // H)` (grouped value attention).
`naive_decode_kda` is one recurrent step over a slot-indexed state pool (the decode contract).
"""
import numpy as np

__all__ = ["naive_recurrent_kda", "naive_chunk_kda", "naive_decode_kda", "default_scale"]


def default_scale(K):
    return float(K) ** -0.5


def _check_shapes(q, k, v, g, beta):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert k.shape == (B, T, H, K), k.shape
    assert v.shape == (B, T, HV, V), v.shape
    assert g.shape == (B, T, HV, K), g.shape
    assert beta.shape == (B, T, HV), beta.shape
    assert HV % H == 0, (H, HV)
    return B, T, H, HV, K, V


def naive_recurrent_kda(q, k, v, g, beta, scale=None, initial_state=None):
    """Token-by-token recurrence in float64. Returns (o [B,T,HV,V], final state [B,HV,K,V])."""
    q, k, v, g, beta = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g, beta))
    B, T, H, HV, K, V = _check_shapes(q, k, v, g, beta)
    scale = default_scale(K) if scale is None else scale
    G = HV // H
    S = np.zeros((B, HV, K, V)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    o = np.zeros((B, T, HV, V))
    kh = np.repeat(k, G, axis=2)  # [B, T, HV, K]
    qh = np.repeat(q, G, axis=2)
    for t in range(T):
        S = S * np.exp(g[:, t])[..., None]                                  # decay
        p = np.einsum("bhkv,bhk->bhv", S, kh[:, t])                         # predict
        d = beta[:, t, :, None] * (v[:, t] - p)                             # delta
        S = S + kh[:, t][..., None] * d[:, :, None, :]                      # update
        o[:, t] = np.einsum("bhkv,bhk->bhv", S, scale * qh[:, t])           # output
    return o, S


def naive_chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, chunk_size=64):
    """Chunked WY/UT form in float64 (same results as the recurrence to rounding).

    Per chunk of n tokens and value head, with G the in-chunk cumulative log-decay (n x K):
      L_ij = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (i > j),  T = (I + L)^-1 diag(beta)
      W = T (exp(G) * K),  U = T V,  D = U - W S0
      A_ij = scale sum_d q_id k_jd exp(G_id - G_jd)   (j <= i)
      O = scale (exp(G) * Q) S0 + A D,  S_next = diag(exp(G_n)) S0 + (exp(G_n - G) * K)^T D
    exp(G_i - G_j) is formed directly (never as exp(G_i) * exp(-G_j)), so nothing overflows.
    """
    q, k, v, g, beta = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g, beta))
    B, T, H, HV, K, V = _check_shapes(q, k, v, g, beta)
    scale = default_scale(K) if scale is None else scale
    grp = HV // H
    S_all = np.zeros((B, HV, K, V)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    o = np.zeros((B, T, HV, V))
    for b in range(B):
        for hv in range(HV):
            h = hv // grp
            S = S_all[b, hv].copy()
            for t0 in range(0, T, chunk_size):
                t1 = min(t0 + chunk_size, T)
                n = t1 - t0
                Q, Kc, Vc = q[b, t0:t1, h], k[b, t0:t1, h], v[b, t0:t1, hv]
                bt = beta[b, t0:t1, hv]
                Gc = np.cumsum(g[b, t0:t1, hv], axis=0)                     # [n, K]
                E = np.exp(np.minimum(Gc[:, None, :] - Gc[None, :, :], 0))  # [n, n, K], i >= j part valid
                KK = np.einsum("id,jd,ijd->ij", Kc, Kc, E)
                QK = np.einsum("id,jd,ijd->ij", Q, Kc, E)
                L = np.tril(bt[:, None] * KK, -1)
                Tm = np.linalg.solve(np.eye(n) + L, np.diag(bt))
                W = Tm @ (np.exp(Gc) * Kc)
                U = Tm @ Vc
                D = U - W @ S
                A = scale * np.tril(QK)
                o[b, t0:t1, hv] = scale * (np.exp(Gc) * Q) @ S + A @ D
                Gn = Gc[-1]
                S = np.exp(Gn)[:, None] * S + (np.exp(Gn[None, :] - Gc) * Kc).T @ D
            S_all[b, hv] = S
    return o, S_all


def naive_decode_kda(q, k, v, g, beta, state_pool, slots, scale=None):
    """One decode step per sequence against a state pool, in float64.

    q, k: [N, H, K]; v: [N, HV, V]; g: [N, HV, K]; beta: [N, HV];
    state_pool: [num_slots, HV, K, V]; slots: [N] (distinct indices into the pool).
    Returns (o [N, HV, V], new pool [num_slots, HV, K, V]); the input pool is not modified.
    """
    pool = np.array(state_pool, dtype=np.float64)
    slots = np.asarray(slots)
    o, S = naive_recurrent_kda(
        np.asarray(q)[:, None], np.asarray(k)[:, None], np.asarray(v)[:, None],
        np.asarray(g)[:, None], np.asarray(beta)[:, None], scale=scale, initial_state=pool[slots])
    pool[slots] = S
    return o[:, 0], pool
