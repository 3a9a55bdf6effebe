"""KDA decode with the state pool stored as uniform int8: one fixed step for every element, no
scales at all (precision variant `kda.decode.state-int8-uniform`, manifest decode_state_int8u.toml).

The cheapest 8-bit layout, and the one production reports as harmful (uniform int8 state halved
GSM8K): a step coarse enough for the largest values rounds the small ones away, and the error is
carried from step to step. Kept as the variant the precision gate must show crossing its budget.
value = code * STEP, code = clamp(floor(x / STEP + 0.5), -127, 127).
"""
import triton
import triton.language as tl

__all__ = ["kda_decode_state_int8u", "STEP"]

STEP = 0.03125   # 2^-5: |S| <= 3.97


@triton.jit
def kda_decode_state_int8u_kernel(
    q, k,       # [N, H, K]
    v,          # [N, HV, V]
    g,          # [N, HV, K]
    beta,       # [N, HV]
    state,      # [S, HV, K, V]  int8 codes of S / STEP, updated in place at rows `slots`
    slots,      # [N]
    o,          # [N, HV, V]
    scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, STEP: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_s = m_k[:, None] & m_v[None, :]

    # i_nh is the flat (sequence, value head) index: the offsets of g, v, beta and o derive from it
    i_qk = (i_n * H + i_h) * K
    i_slot = tl.load(slots + i_n)
    p_s = state + ((i_slot * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    b_q = tl.load(q + i_qk + o_k, mask=m_k, other=0.).to(tl.float32) * scale
    b_k = tl.load(k + i_qk + o_k, mask=m_k, other=0.).to(tl.float32)
    b_g = tl.load(g + i_nh * K + o_k, mask=m_k, other=0.).to(tl.float32)
    b_v = tl.load(v + i_nh * V + o_v, mask=m_v, other=0.).to(tl.float32)
    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)
    b_s = tl.load(p_s, mask=m_s, other=0).to(tl.float32) * STEP                               # [BK, BV]

    b_s = b_s * tl.exp(b_g)[:, None]
    b_d = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)

    b_x = tl.minimum(tl.maximum(tl.floor(b_s * (1.0 / STEP) + 0.5), -127.0), 127.0)
    tl.store(p_s, b_x.to(tl.int8), mask=m_s)
    tl.store(o + i_nh * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


def kda_decode_state_int8u(q, k, v, g, beta, state, slots, o, scale=None):
    """kernels.kda.decode.kda_decode with `state` `[S, HV, K, V]` int8 codes of S / STEP."""
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    assert tuple(state.shape[1:]) == (HV, K, V) and HV % H == 0
    assert str(state.dtype).split(".")[-1] == "int8"
    scale = K ** -0.5 if scale is None else scale
    BK, BV = triton.next_power_of_2(K), min(triton.next_power_of_2(V), 32)
    kda_decode_state_int8u_kernel[(triton.cdiv(V, BV), N * HV)](
        q, k, v, g, beta, state, slots, o, scale, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, STEP=STEP)
    return o
