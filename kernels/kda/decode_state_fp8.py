"""KDA decode with the state pool stored in float8 e4m3 with a static per-tensor scale (precision
variant `kda.decode.state-fp8`, manifest decode_state_fp8.toml): a quarter of the state bytes.

The scale is a calibrated constant of the contract (STATE_SCALE, the manifest's `storage.scale`):
nothing beside the data is read or written. It folds into the fp32 math where a scalar already
is: dequantising multiplies the loaded codes once, and the query scale of the readout is applied
to the fp32 state. Codes are clamped to +-448 before the cast (e4m3fn has no infinity; the GPU's
satfinite conversion does the same). The pool holds e4m3 bit patterns in a uint8 tensor (numpy
has no float8; a torch.float8_e4m3fn pool viewed as uint8 is the same bytes).
"""
import triton
import triton.language as tl

__all__ = ["kda_decode_state_fp8", "STATE_SCALE"]

STATE_SCALE = 0.03125   # 2^-5: codes up to 448 hold |S| <= 14


@triton.jit
def kda_decode_state_fp8_kernel(
    q, k,       # [N, H, K]
    v,          # [N, HV, V]
    g,          # [N, HV, K]
    beta,       # [N, HV]
    state,      # [S, HV, K, V]  uint8: e4m3 bits of S / SS, updated in place at rows `slots`
    slots,      # [N]
    o,          # [N, HV, V]
    scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, SS: tl.constexpr,
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
    b_s = tl.load(p_s, mask=m_s, other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32) * SS   # [BK, BV]

    b_s = b_s * tl.exp(b_g)[:, None]
    b_d = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)

    b_c = tl.minimum(tl.maximum(b_s * (1.0 / SS), -448.0), 448.0)   # codes, clamped: no NaN code
    tl.store(p_s, b_c.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=m_s)
    tl.store(o + i_nh * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


def kda_decode_state_fp8(q, k, v, g, beta, state, slots, o, scale=None):
    """kernels.kda.decode.kda_decode with `state` `[S, HV, K, V]` uint8 holding e4m3 bits of
    S / STATE_SCALE."""
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    assert tuple(state.shape[1:]) == (HV, K, V) and HV % H == 0
    assert str(state.dtype).endswith("uint8"), "the fp8 pool travels as uint8 bits"
    scale = K ** -0.5 if scale is None else scale
    BK, BV = triton.next_power_of_2(K), min(triton.next_power_of_2(V), 32)
    kda_decode_state_fp8_kernel[(triton.cdiv(V, BV), N * HV)](
        q, k, v, g, beta, state, slots, o, scale, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, SS=STATE_SCALE)
    return o
