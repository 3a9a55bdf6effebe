"""KDA decode: one token per sequence per call, state held in a slot-indexed pool.

First working version, written for clarity: no autotuning, no cache hints, default numerics.
The kernel -> launcher -> public function layering follows FLA (kernels/README.md).
"""
import triton
import triton.language as tl

__all__ = ["kda_decode"]


@triton.jit
def kda_decode_kernel(
    q,          # [N, H, K]
    k,          # [N, H, K]
    v,          # [N, HV, V]
    g,          # [N, HV, K]   log-space decay
    beta,       # [N, HV]
    state,      # [num_slots, HV, K, V]  fp32, updated in place
    slots,      # [N]          pool slot of each sequence
    o,          # [N, HV, V]
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    # one program per (value block, sequence * value head)
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_s = m_k[:, None] & m_v[None, :]

    i_slot = tl.load(slots + i_n)
    p_q = q + (i_n * H + i_h) * K + o_k
    p_k = k + (i_n * H + i_h) * K + o_k
    p_g = g + (i_n * HV + i_hv) * K + o_k
    p_v = v + (i_n * HV + i_hv) * V + o_v
    p_s = state + ((i_slot * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    p_o = o + (i_n * HV + i_hv) * V + o_v

    b_q = tl.load(p_q, mask=m_k, other=0.).to(tl.float32) * scale   # [BK]
    b_k = tl.load(p_k, mask=m_k, other=0.).to(tl.float32)           # [BK]
    b_g = tl.load(p_g, mask=m_k, other=0.).to(tl.float32)           # [BK]
    b_v = tl.load(p_v, mask=m_v, other=0.).to(tl.float32)           # [BV]
    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)         # []
    b_s = tl.load(p_s, mask=m_s, other=0.)                           # [BK, BV]

    # decay, predict, delta, update, read out
    b_s = b_s * tl.exp(b_g)[:, None]
    b_p = tl.sum(b_s * b_k[:, None], axis=0)                         # [BV]
    b_d = b_beta * (b_v - b_p)                                       # [BV]
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)                         # [BV]

    tl.store(p_s, b_s, mask=m_s)
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)


def kda_decode_launch(q, k, v, g, beta, state, slots, o, scale):
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(V), 32)
    grid = (triton.cdiv(V, BV), N * HV)
    kda_decode_kernel[grid](
        q=q, k=k, v=v, g=g, beta=beta, state=state, slots=slots, o=o, scale=scale,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
    )
    return o


def kda_decode(q, k, v, g, beta, state, slots, o, scale=None):
    """One KDA recurrent step for each of N sequences, in place on a state pool.

    Args:
        q, k:  `[N, H, K]` query and key of the new token (shared by HV // H value heads).
        v:     `[N, HV, V]` value.
        g:     `[N, HV, K]` log-space decay (typically <= 0).
        beta:  `[N, HV]` delta-rule step size.
        state: `[num_slots, HV, K, V]` float32 state pool; the rows named by `slots` are updated.
        slots: `[N]` integer (int32 or int64) slot of each sequence; slots must be distinct.
        o:     `[N, HV, V]` preallocated output (destination passing); every element is written.
        scale: query scale, `K ** -0.5` by default.
    All tensors are contiguous. HV must be a multiple of H. K and V need not be powers of two.
    The arguments may be torch CUDA tensors or, under TRITON_INTERPRET=1, any object exposing
    the torch tensor surface (kernels.harness.triton.arrays.NpTensor). Returns `o`.
    """
    N, H, K = q.shape
    HV = v.shape[1]
    assert k.shape == (N, H, K) and g.shape == (N, HV, K) and beta.shape == (N, HV)
    assert tuple(o.shape) == tuple(v.shape) and state.shape[1:] == (HV, K, v.shape[2])
    assert HV % H == 0, "HV must be a multiple of H"
    scale = K ** -0.5 if scale is None else scale
    return kda_decode_launch(q, k, v, g, beta, state, slots, o, scale)
