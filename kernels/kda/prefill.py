"""KDA prefill: the chunked (WY / UT) algorithm over chunks of BT = 64 tokens.

First working version, written for clarity: no autotuning, no cache hints, and `tl.dot` at
Triton's default input precision (for fp32 operands on a GPU that is TF32).
The math is in kernels/README.md (SPEC section 9); `kernels/kda/reference.py` has it in float64.
"""
import triton
import triton.language as tl

__all__ = ["kda_prefill"]


@triton.jit
def kda_prefill_kernel(
    q,          # [B, T, H, K]
    k,          # [B, T, H, K]
    v,          # [B, T, HV, V]
    g,          # [B, T, HV, K]   log-space decay
    beta,       # [B, T, HV]
    o,          # [B, T, HV, V]
    h0,         # [B, HV, K, V]   initial state (read when USE_INITIAL_STATE)
    ht,         # [B, HV, K, V]   final state (written when STORE_FINAL_STATE)
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr,
    STORE_FINAL_STATE: tl.constexpr,
):
    # one program per (value block, sequence * value head); it walks the chunks in order.
    # The columns of V are independent in every step below, so value blocks never meet.
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)

    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_s = m_k[:, None] & m_v[None, :]
    m_lower = o_t[:, None] > o_t[None, :]          # strictly lower triangle, i > j
    m_causal = o_t[:, None] >= o_t[None, :]        # lower triangle with the diagonal, j <= i
    m_eye = o_t[:, None] == o_t[None, :]
    # Sub-chunks of BC tokens. Between two sub-chunks the decay exp(G_i - G_j) is factored through
    # the last token of the earlier one (both factors <= 1, so neither overflows whatever the decay);
    # within a sub-chunk no single reference keeps both factors finite once a channel decays by more
    # than ln(FLT_MAX) over it, so those entries are computed exactly, one column at a time.
    BC: tl.constexpr = 16
    NC: tl.constexpr = BT // BC
    o_blk = o_t // BC
    o_c = tl.arange(0, BC)
    m_blk = o_blk[:, None] == o_blk[None, :]       # same sub-chunk

    p_state = (i_b * HV + i_hv) * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_s += tl.load(h0 + p_state, mask=m_s, other=0.).to(tl.float32)           # [BK, BV]

    for i_t in range(0, tl.cdiv(T, BT)):
        o_tc = i_t * BT + o_t
        m_t = o_tc < T
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        p_q = q + ((i_b * T + o_tc[:, None]) * H + i_h) * K + o_k[None, :]
        p_k = k + ((i_b * T + o_tc[:, None]) * H + i_h) * K + o_k[None, :]
        p_g = g + ((i_b * T + o_tc[:, None]) * HV + i_hv) * K + o_k[None, :]
        p_v = v + ((i_b * T + o_tc[:, None]) * HV + i_hv) * V + o_v[None, :]
        p_beta = beta + (i_b * T + o_tc) * HV + i_hv
        p_o = o + ((i_b * T + o_tc[:, None]) * HV + i_hv) * V + o_v[None, :]

        # rows past T load as zero: k = 0, beta = 0 and g = 0 make them inert
        b_q = tl.load(p_q, mask=m_tk, other=0.).to(tl.float32)                    # [BT, BK]
        b_k = tl.load(p_k, mask=m_tk, other=0.).to(tl.float32)                    # [BT, BK]
        b_g = tl.load(p_g, mask=m_tk, other=0.).to(tl.float32)                    # [BT, BK]
        b_v = tl.load(p_v, mask=m_tv, other=0.).to(tl.float32)                    # [BT, BV]
        b_beta = tl.load(p_beta, mask=m_t, other=0.).to(tl.float32)               # [BT]

        # cumulative decay in the chunk and its value at the chunk's end
        b_G = tl.cumsum(b_g, axis=0)                                              # [BT, BK]
        b_Gn = tl.sum(tl.where((o_t == BT - 1)[:, None], b_G, 0.), axis=0)        # [BK]

        # L_ij = beta_i k_i . (E_ij * k_j) for i > j;  A_ij = scale q_i . (E_ij * k_j) for j <= i,
        # E_ij = exp(G_i - G_j). Across sub-chunks: through the last token c of sub-chunk i_c,
        # E_ij = exp(G_i - G_c) * exp(G_c - G_j) for the rows after it and its own columns.
        # (a partial last chunk skips the sub-chunks and columns past T: they would only decay zeros)
        n_t = tl.minimum(T - i_t * BT, BT)                                        # tokens in the chunk
        b_L = tl.zeros([BT, BT], dtype=tl.float32)
        b_A = tl.zeros([BT, BT], dtype=tl.float32)
        for i_c in range(0, tl.cdiv(n_t, BC) - 1):
            m_c = (o_t == i_c * BC + BC - 1)[:, None]
            b_Gc = tl.sum(tl.where(m_c, b_G, 0.), axis=0)                         # [BK]
            m_i = (o_blk > i_c)[:, None]                                          # rows after it
            m_j = (o_blk == i_c)[:, None]                                         # its columns
            b_ei = tl.where(m_i, tl.exp(tl.where(m_i, b_G - b_Gc[None, :], 0.)), 0.)  # [BT, BK]
            b_ej = tl.where(m_j, tl.exp(tl.where(m_j, b_Gc[None, :] - b_G, 0.)), 0.)  # [BT, BK]
            b_kj = b_k * b_ej                                                     # [BT, BK]
            b_L += tl.dot(b_k * b_ei, tl.trans(b_kj))                             # [BT, BK] @ [BK, BT] -> [BT, BT]
            b_A += tl.dot(b_q * b_ei, tl.trans(b_kj))                             # [BT, BK] @ [BK, BT] -> [BT, BT]
        # within each sub-chunk, exactly: column j of every sub-chunk at once, below the diagonal
        # (on it E_ii = 1: A_ii = scale q_i . k_i, L_ii unused)
        b_k3 = tl.reshape(b_k, [NC, BC, BK])
        b_q3 = tl.reshape(b_q, [NC, BC, BK])
        b_G3 = tl.reshape(b_G, [NC, BC, BK])
        b_Ld = tl.zeros([NC, BC, BC], dtype=tl.float32)
        b_Ad = tl.zeros([NC, BC, BC], dtype=tl.float32)
        for j in range(0, tl.minimum(n_t, BC) - 1):
            m_j3 = (o_c == j)[None, :, None]
            b_kj3 = tl.sum(tl.where(m_j3, b_k3, 0.), axis=1)                       # [NC, BK]  token j of each
            b_Gj3 = tl.sum(tl.where(m_j3, b_G3, 0.), axis=1)                       # [NC, BK]
            m_ij = (o_c > j)[None, :, None]
            b_e = tl.where(m_ij, b_kj3[:, None, :] * tl.exp(tl.where(m_ij, b_G3 - b_Gj3[:, None, :], 0.)), 0.)  # [NC, BC, BK]
            m_col = (o_c == j)[None, None, :]
            b_Ld = tl.where(m_col, tl.sum(b_k3 * b_e, axis=2)[:, :, None], b_Ld)  # [NC, BC, BC]
            b_Ad = tl.where(m_col, tl.sum(b_q3 * b_e, axis=2)[:, :, None], b_Ad)  # [NC, BC, BC]
        # [NC, BC, BC] -> rows [BT, BC] -> repeated over the sub-chunks of the columns [BT, BT]
        b_Ld2 = tl.reshape(tl.broadcast_to(tl.reshape(b_Ld, [BT, BC])[:, None, :], [BT, NC, BC]), [BT, BT])
        b_Ad2 = tl.reshape(tl.broadcast_to(tl.reshape(b_Ad, [BT, BC])[:, None, :], [BT, NC, BC]), [BT, BT])
        b_L = tl.where(m_lower, tl.where(m_blk, b_Ld2, b_L) * b_beta[:, None], 0.)
        b_Ad2 = tl.where(m_eye, tl.sum(b_q * b_k, axis=1)[:, None], b_Ad2)
        b_A = tl.where(m_causal, tl.where(m_blk, b_Ad2, b_A) * scale, 0.)

        # M = (I + L)^-1. Within each sub-chunk by forward substitution, every sub-chunk at once,
        # M_i = e_i - sum_j<i L_ij M_j; then below them, a row of sub-chunks at a time,
        # M_ab = -M_aa sum_c<a L_ac M_cb (b < a), as (I + L) M = I reads block by block.
        b_L3 = b_Ld * tl.reshape(b_beta, [NC, BC])[:, :, None]                   # [NC, BC, BC]
        b_M3 = tl.broadcast_to(tl.where(o_c[:, None] == o_c[None, :], 1., 0.)[None, :, :], [NC, BC, BC])
        for i in range(1, tl.minimum(n_t, BC)):
            m_i3 = (o_c == i)[None, :, None]
            b_l3 = tl.sum(tl.where(m_i3, b_L3, 0.), axis=1)                      # [NC, BC]  row i of each
            b_r3 = tl.where((o_c == i)[None, :], 1., 0.) - tl.sum(b_l3[:, :, None] * b_M3, axis=1)  # [NC, BC]
            b_M3 = tl.where(m_i3, b_r3[:, None, :], b_M3)
        b_Md = tl.reshape(tl.broadcast_to(tl.reshape(b_M3, [BT, BC])[:, None, :], [BT, NC, BC]), [BT, BT])
        b_Md = tl.where(m_blk, b_Md, 0.)                                          # [BT, BT]  block diagonal
        b_M = b_Md
        for i_a in range(1, tl.cdiv(n_t, BC)):
            m_a = (o_blk == i_a)[:, None]
            m_ab = m_a & (o_blk < i_a)[None, :]
            b_X = tl.dot(tl.where(m_ab, b_L, 0.), b_M)                            # [BT, BT] @ [BT, BT] -> [BT, BT]
            b_Y = tl.dot(tl.where(m_a, b_Md, 0.), b_X)                            # [BT, BT] @ [BT, BT] -> [BT, BT]
            b_M = tl.where(m_ab, -b_Y, b_M)
        b_T = b_M * b_beta[None, :]                                               # T = M diag(beta)

        # WY / UT form: W = T (exp(G) * K), U = T V, D = U - W S
        b_W = tl.dot(b_T, b_k * tl.exp(b_G))                                      # [BT, BT] @ [BT, BK] -> [BT, BK]
        b_U = tl.dot(b_T, b_v)                                                    # [BT, BT] @ [BT, BV] -> [BT, BV]
        b_D = b_U - tl.dot(b_W, b_s)                                              # [BT, BK] @ [BK, BV] -> [BT, BV]

        # O = scale (exp(G) * Q) S + A D
        b_o = tl.dot(b_q * tl.exp(b_G), b_s) * scale                              # [BT, BK] @ [BK, BV] -> [BT, BV]
        b_o += tl.dot(b_A, b_D)                                                   # [BT, BT] @ [BT, BV] -> [BT, BV]
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_tv)

        # S <- diag(exp(G_n)) S + (exp(G_n - G) * K)^T D
        b_kn = b_k * tl.exp(b_Gn[None, :] - b_G)                                  # [BT, BK]
        b_s = b_s * tl.exp(b_Gn)[:, None] + tl.dot(tl.trans(b_kn), b_D)           # [BK, BT] @ [BT, BV] -> [BK, BV]

    if STORE_FINAL_STATE:
        tl.store(ht + p_state, b_s.to(ht.dtype.element_ty), mask=m_s)


def kda_prefill_launch(q, k, v, g, beta, o, initial_state, final_state, scale):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    BT = 64
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, min(32, triton.next_power_of_2(V)))
    grid = (triton.cdiv(V, BV), B * HV)
    kda_prefill_kernel[grid](
        q=q, k=k, v=v, g=g, beta=beta, o=o, h0=initial_state, ht=final_state, scale=scale, T=T,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=BK, BV=BV,
        USE_INITIAL_STATE=initial_state is not None,
        STORE_FINAL_STATE=final_state is not None,
    )
    return o


def kda_prefill(q, k, v, g, beta, o, initial_state=None, final_state=None, scale=None):
    """KDA over whole sequences with the chunked algorithm (chunk 64).

    Args:
        q, k:          `[B, T, H, K]` queries and keys (shared by HV // H value heads).
        v:             `[B, T, HV, V]` values.
        g:             `[B, T, HV, K]` log-space decay (typically <= 0).
        beta:          `[B, T, HV]` delta-rule step sizes.
        o:             `[B, T, HV, V]` preallocated output (destination passing).
        initial_state: `[B, HV, K, V]` float32 state before the first token, or None for zeros.
        final_state:   `[B, HV, K, V]` preallocated float32 state after the last token, or None.
        scale:         query scale, `K ** -0.5` by default.
    All tensors are contiguous. T need not be a multiple of 64, K and V need not be powers of
    two, HV must be a multiple of H. Every decay factor the kernel forms is at most 1, so any
    g <= 0 is finite (a decay past float32's range underflows to 0, as it should). Returns `o`.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert k.shape == (B, T, H, K) and g.shape == (B, T, HV, K) and beta.shape == (B, T, HV)
    assert tuple(o.shape) == (B, T, HV, V)
    for s in (initial_state, final_state):
        assert s is None or tuple(s.shape) == (B, HV, K, V)
    assert HV % H == 0, "HV must be a multiple of H"
    scale = K ** -0.5 if scale is None else scale
    return kda_prefill_launch(q, k, v, g, beta, o, initial_state, final_state, scale)
