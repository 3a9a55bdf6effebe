// KDA decode step with the state pool stored in bfloat16 (precision variant kda_cuda.decode.state-bf16,
// manifest decode_state_bf16.toml): half the state bytes of decode.cu, the bytes that bound decode.
// Same launch and math as decode.cu (one thread per value column, fp32 arithmetic); only the pool's
// element type changes: bf16 bit patterns as unsigned short (cuda_bf16.h is not on the host, so the
// conversions are written here: widening is a shift, narrowing rounds to nearest even as cvt.rn does).
//
//   q, k [N, H, K], v [N, HV, V], g [N, HV, K], beta [N, HV]  float32
//   state [S, HV, K, V] bf16 bits, rows state[slots[n]] updated in place;  slots [N] int64;  o [N, HV, V] float32

__device__ inline float bf16_to_f32(unsigned short h)
{
    return __uint_as_float((unsigned)h << 16);
}

__device__ inline unsigned short f32_to_bf16(float x)
{
    // nearest even: add 0x7fff plus the lowest kept bit, keep the high half (finite x)
    unsigned b = __float_as_uint(x);
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

extern "C" __global__ void kda_decode_state_bf16_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    unsigned short* state, const long long* slots, float* o,
    int N, int H, int HV, int K, int V, float scale)
{
    int nh = blockIdx.x;
    if (nh >= N * HV) {
        return;
    }
    int n = nh / HV;
    int hv = nh % HV;
    int h = hv / (HV / H);
    const float* q_n = q + (n * H + h) * K;
    const float* k_n = k + (n * H + h) * K;
    const float* g_n = g + nh * K;
    const float* v_n = v + nh * V;
    float b = beta[nh];
    unsigned short* s = state + (slots[n] * HV + hv) * K * V;   // 64-bit: pools can exceed 2^31 elements
    float* o_n = o + nh * V;

    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * bf16_to_f32(s[i * V + j]) * k_n[i];
        }
        float d = b * (v_n[j] - p);
        // the output reads the fp32 state; only the carried state is rounded
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * bf16_to_f32(s[i * V + j]) + k_n[i] * d;
            s[i * V + j] = f32_to_bf16(s_ij);
            acc += s_ij * q_n[i];
        }
        o_n[j] = scale * acc;
    }
}
