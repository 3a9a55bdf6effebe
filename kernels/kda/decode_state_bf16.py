"""KDA decode with the state pool stored in bfloat16 (precision variant `kda.decode.state-bf16`,
manifest decode_state_bf16.toml): half the state bytes of kda.decode, the bytes that bound decode.

The pool holds bf16 bit patterns in an int16 tensor (the numpy arrays of the CPU harness have no
bfloat16; on a GPU a torch.bfloat16 pool viewed as int16 is the same bytes). Cast at load, fp32
math, cast at store (round to nearest even); the output is read from the fp32 state before it is
rounded, so only the carried state loses precision.
"""
import triton
import triton.language as tl

__all__ = ["kda_decode_state_bf16"]


@triton.jit
def kda_decode_state_bf16_kernel(
    q,          # [N, H, K]
    k,          # [N, H, K]
    v,          # [N, HV, V]
    g,          # [N, HV, K]   log-space decay
    beta,       # [N, HV]
    state,      # [S, HV, K, V]  int16: bf16 bits, updated in place at rows `slots`
    slots,      # [N]
    o,          # [N, HV, V]
    scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
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
    b_q = tl.load(q + i_qk + o_k, mask=m_k, other=0.).to(tl.float32) * scale   # [BK]
    b_k = tl.load(k + i_qk + o_k, mask=m_k, other=0.).to(tl.float32)           # [BK]
    b_g = tl.load(g + i_nh * K + o_k, mask=m_k, other=0.).to(tl.float32)         # [BK]
    b_v = tl.load(v + i_nh * V + o_v, mask=m_v, other=0.).to(tl.float32)         # [BV]
    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)
    # bf16 bits -> fp32: the only change at load
    b_s = tl.load(p_s, mask=m_s, other=0).to(tl.bfloat16, bitcast=True).to(tl.float32)     # [BK, BV]

    b_s = b_s * tl.exp(b_g)[:, None]
    b_d = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))                                 # [BV]
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)                                                  # [BV]

    # fp32 -> bf16 (nearest even) -> bits: the only change at store
    tl.store(p_s, b_s.to(tl.bfloat16).to(tl.int16, bitcast=True), mask=m_s)
    tl.store(o + i_nh * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


def kda_decode_state_bf16(q, k, v, g, beta, state, slots, o, scale=None):
    """kernels.kda.decode.kda_decode with `state` `[S, HV, K, V]` int16 holding bf16 bits."""
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    assert tuple(state.shape[1:]) == (HV, K, V) and HV % H == 0
    assert str(state.dtype).endswith("int16"), "the bf16 pool travels as int16 bits"
    scale = K ** -0.5 if scale is None else scale
    BK, BV = triton.next_power_of_2(K), min(triton.next_power_of_2(V), 32)
    kda_decode_state_bf16_kernel[(triton.cdiv(V, BV), N * HV)](
        q, k, v, g, beta, state, slots, o, scale, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV)
    return o
