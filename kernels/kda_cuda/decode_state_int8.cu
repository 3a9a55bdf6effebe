// KDA decode step with the state pool stored in int8 with one scale per (slot, head, k-channel) row
// (precision variant kda_cuda.decode.state-int8, manifest decode_state_int8.toml): a quarter of the
// state bytes plus 4 bytes per row of V codes. value = code * scale; at every store a row's scale is
// recomputed from the new fp32 row, scale = amax(|row|) / 127, code = clamp(floor(x / scale + 0.5), +-127).
// The scales live beside the pool in state_scale [S, HV, K] (one pointer more than decode.cu: launched
// by launch_state.py). K <= KMAX.
//
//   q, k [N, H, K], v [N, HV, V], g [N, HV, K], beta [N, HV]  float32
//   state [S, HV, K, V] int8 codes;  state_scale [S, HV, K] float32;  slots [N] int64;  o [N, HV, V] float32
//
// A row's amax spans every column, and each thread owns columns: pass 1 computes the new columns and
// takes the rows' amax in shared memory (atomicMax on the bits: non-negative floats order as unsigned
// ints), pass 2 computes them again from the codes still in place (a thread rewrites only its own
// columns) and stores them with the new scales. Reading the state twice costs no bytes of DRAM at
// decode sizes (the rows stay in L1/L2); keeping them in registers would bound V per thread.

#define KMAX 256

extern "C" __global__ void kda_decode_state_int8_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    signed char* state, float* state_scale, const long long* slots, float* o,
    int N, int H, int HV, int K, int V, float scale)
{
    __shared__ float s_old[KMAX];      // the rows' scales before the step
    __shared__ unsigned s_amax[KMAX];  // bits of the new rows' amax
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
    long long row = (slots[n] * HV + hv) * K;
    signed char* s = state + row * V;
    float* c = state_scale + row;
    float* o_n = o + nh * V;

    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        s_old[i] = c[i];
        s_amax[i] = 0u;
    }
    __syncthreads();

    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * ((float)s[i * V + j] * s_old[i]) * k_n[i];
        }
        float d = b * (v_n[j] - p);
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * ((float)s[i * V + j] * s_old[i]) + k_n[i] * d;
            atomicMax(&s_amax[i], __float_as_uint(fabsf(s_ij)));
        }
    }
    __syncthreads();

    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        c[i] = __uint_as_float(s_amax[i]) / 127.0f;
    }
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * ((float)s[i * V + j] * s_old[i]) * k_n[i];
        }
        float d = b * (v_n[j] - p);
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * ((float)s[i * V + j] * s_old[i]) + k_n[i] * d;
            float a = __uint_as_float(s_amax[i]);
            float r = a > 0.0f ? 127.0f / a : 0.0f;
            s[i * V + j] = (signed char)fminf(fmaxf(floorf(s_ij * r + 0.5f), -127.0f), 127.0f);
            acc += s_ij * q_n[i];
        }
        o_n[j] = scale * acc;
    }
}
