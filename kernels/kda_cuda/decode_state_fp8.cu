// KDA decode step with the state pool stored in float8 e4m3 with a static per-tensor scale (precision
// variant kda_cuda.decode.state-fp8, manifest decode_state_fp8.toml): a quarter of the state bytes.
// The scale is a calibrated constant of the contract (STATE_SCALE = the manifest's storage.scale):
// nothing beside the data is read or written. Codes are clamped to +-448 and rounded to nearest even,
// as cvt.rn.satfinite.e4m3x2.f32 does (cuda_fp8.h is not on the host: the conversions are written here).
//
//   q, k [N, H, K], v [N, HV, V], g [N, HV, K], beta [N, HV]  float32
//   state [S, HV, K, V] e4m3 bits of S / STATE_SCALE (unsigned char);  slots [N] int64;  o [N, HV, V] float32

#define STATE_SCALE 0.03125f

__device__ inline float e4m3_to_f32(unsigned char c)
{
    unsigned e = (c >> 3) & 15u, m = c & 7u;
    // normal: 2^(e-7) (1 + m/8), the float with exponent e - 7 + 127; subnormal: m 2^-9
    float a = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0.001953125f;
    return (c & 0x80) ? -a : a;
}

__device__ inline unsigned char f32_to_e4m3(float x)
{
    unsigned sign = (__float_as_uint(x) >> 24) & 0x80u;
    float a = fminf(fabsf(x), 448.0f);                 // satfinite: e4m3fn has no infinity
    if (a < 0.015625f) {
        // below 2^-6 the codes are the subnormal steps of 2^-9 (8 is the smallest normal, 0x08)
        return (unsigned char)(sign | (unsigned)rintf(a * 512.0f));
    }
    unsigned bits = __float_as_uint(a);
    unsigned e = (bits >> 23) - 120u;                  // e4m3 exponent field, 1..15
    unsigned m = (bits >> 20) & 7u, rest = bits & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {   // nearest, ties to even
        m++;
        if (m == 8u) {
            m = 0u;
            e++;
        }
    }
    return (unsigned char)(sign | (e << 3) | m);
}

extern "C" __global__ void kda_decode_state_fp8_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    unsigned char* state, const long long* slots, float* o,
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
    unsigned char* s = state + (slots[n] * HV + hv) * K * V;
    float* o_n = o + nh * V;

    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * (e4m3_to_f32(s[i * V + j]) * STATE_SCALE) * k_n[i];
        }
        float d = b * (v_n[j] - p);
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * (e4m3_to_f32(s[i * V + j]) * STATE_SCALE) + k_n[i] * d;
            s[i * V + j] = f32_to_e4m3(s_ij * (1.0f / STATE_SCALE));
            acc += s_ij * q_n[i];
        }
        o_n[j] = scale * acc;
    }
}
