// KDA decode step with the state pool stored as uniform int8: one fixed step for every element, no
// scales (precision variant kda_cuda.decode.state-int8-uniform, manifest decode_state_int8u.toml).
// The layout production reports as harmful; kept as the variant the precision gate must see cross its
// budget. value = code * STEP, code = clamp(floor(x / STEP + 0.5), -127, 127).
//
//   q, k [N, H, K], v [N, HV, V], g [N, HV, K], beta [N, HV]  float32
//   state [S, HV, K, V] int8 codes (signed char);  slots [N] int64;  o [N, HV, V] float32

#define STEP 0.03125f

extern "C" __global__ void kda_decode_state_int8u_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    signed char* state, const long long* slots, float* o,
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
    signed char* s = state + (slots[n] * HV + hv) * K * V;
    float* o_n = o + nh * V;

    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * ((float)s[i * V + j] * STEP) * k_n[i];
        }
        float d = b * (v_n[j] - p);
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * ((float)s[i * V + j] * STEP) + k_n[i] * d;
            s[i * V + j] = (signed char)fminf(fmaxf(floorf(s_ij * (1.0f / STEP) + 0.5f), -127.0f), 127.0f);
            acc += s_ij * q_n[i];
        }
        o_n[j] = scale * acc;
    }
}
