"""KDA decode with the state pool stored in int8 with one scale per (slot, head, k-channel) row
(precision variant `kda.decode.state-int8`, manifest decode_state_int8.toml): a quarter of the
state bytes plus 4 bytes per row of V codes.

value = code * scale; at every store a row's scale is recomputed from the new fp32 row,
scale = amax(|row|) / 127, and code = clamp(floor(x / scale + 0.5), -127, 127). The scales live
beside the pool in `state_scale` `[S, HV, K]` float32, read and rewritten with it. A row's amax
spans all V columns, so one program owns whole rows (BV covers V): no cross-program reduction.
"""
import triton
import triton.language as tl

__all__ = ["kda_decode_state_int8"]


@triton.jit
def kda_decode_state_int8_kernel(
    q, k,          # [N, H, K]
    v,             # [N, HV, V]
    g,             # [N, HV, K]
    beta,          # [N, HV]
    state,         # [S, HV, K, V]  int8 codes, updated in place at rows `slots`
    state_scale,   # [S, HV, K]     float32 scale of each code row, updated with it
    slots,         # [N]
    o,             # [N, HV, V]
    scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
):
    i_nh = tl.program_id(0)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_s = m_k[:, None] & m_v[None, :]

    # i_nh is the flat (sequence, value head) index: the offsets of g, v, beta and o derive from it
    i_qk = (i_n * H + i_h) * K
    i_slot = tl.load(slots + i_n)
    p_s = state + ((i_slot * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    p_c = state_scale + (i_slot * HV + i_hv) * K + o_k
    b_q = tl.load(q + i_qk + o_k, mask=m_k, other=0.).to(tl.float32) * scale   # [BK]
    b_k = tl.load(k + i_qk + o_k, mask=m_k, other=0.).to(tl.float32)           # [BK]
    b_g = tl.load(g + i_nh * K + o_k, mask=m_k, other=0.).to(tl.float32)         # [BK]
    b_v = tl.load(v + i_nh * V + o_v, mask=m_v, other=0.).to(tl.float32)         # [BV]
    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)
    b_c = tl.load(p_c, mask=m_k, other=0.)                                                    # [BK]
    b_s = tl.load(p_s, mask=m_s, other=0).to(tl.float32) * b_c[:, None]                       # [BK, BV]

    b_s = b_s * tl.exp(b_g)[:, None]
    b_d = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)

    # new scale per row from its amax; an all-zero row keeps scale 0 and codes 0
    b_a = tl.max(tl.where(m_s, tl.abs(b_s), 0.), axis=1)                                      # [BK]
    b_c = b_a / 127.0
    b_r = tl.where(b_a > 0, 127.0 / tl.maximum(b_a, 1e-30), 0.)
    b_x = tl.minimum(tl.maximum(tl.floor(b_s * b_r[:, None] + 0.5), -127.0), 127.0)
    tl.store(p_s, b_x.to(tl.int8), mask=m_s)
    tl.store(p_c, b_c, mask=m_k)
    tl.store(o + i_nh * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


def kda_decode_state_int8(q, k, v, g, beta, state, state_scale, slots, o, scale=None):
    """kernels.kda.decode.kda_decode with `state` `[S, HV, K, V]` int8 codes and `state_scale`
    `[S, HV, K]` float32 row scales, both updated in place at rows `slots`."""
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    assert tuple(state.shape[1:]) == (HV, K, V) and tuple(state_scale.shape) == tuple(state.shape[:3])
    assert str(state.dtype).split(".")[-1] == "int8" and HV % H == 0
    scale = K ** -0.5 if scale is None else scale
    BK, BV = triton.next_power_of_2(K), triton.next_power_of_2(V)
    # a program holds a whole [BK, BV] state tile: at 128 x 128, 4 warps take 255 registers a thread
    kda_decode_state_int8_kernel[(N * HV,)](
        q, k, v, g, beta, state, state_scale, slots, o, scale, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
        num_warps=8 if BK * BV >= 8192 else 4)
    return o
