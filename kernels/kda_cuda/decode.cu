// KDA decode step in CUDA C++: one token per sequence, state held in a slot-indexed pool.
//
// First working version, written for clarity: one launch per step, one thread per value column,
// plain scalar loads, no launch bounds, no unrolling pragmas, no intrinsics.
// Same contract as kernels/kda/decode.py (kernels/kda_cuda/decode.toml):
//
//   q, k   [N, H, K]      float32
//   v      [N, HV, V]     float32
//   g      [N, HV, K]     float32, log-space decay
//   beta   [N, HV]        float32
//   state  [S, HV, K, V]  float32 pool, rows state[slots[n]] updated in place
//   slots  [N]            int64
//   o      [N, HV, V]     float32 output
//
// Launch: grid = (N * HV), block = (min(V, 128)); each thread walks the value columns
// j = threadIdx.x, threadIdx.x + blockDim.x, ... For column j of the state S (K x V):
//   decay S <- diag(exp(g)) S;  p_j = sum_i S_ij k_i;  d_j = beta (v_j - p_j);
//   S_ij <- S_ij + k_i d_j;  o_j = scale * sum_i S_ij q_i
// Columns are independent, so threads never share data and need no synchronisation.

extern "C" __global__ void kda_decode_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    float* state, const long long* slots, float* o,
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
    const float* g_n = g + (n * HV + hv) * K;
    const float* v_n = v + (n * HV + hv) * V;
    float b = beta[n * HV + hv];
    // slots are int64, so the pool offset is computed in 64 bits (pools can exceed 2^31 floats)
    float* s = state + (slots[n] * HV + hv) * K * V;
    float* o_n = o + (n * HV + hv) * V;

    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        // predict: p_j = sum_i exp(g_i) S_ij k_i
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += expf(g_n[i]) * s[i * V + j] * k_n[i];
        }
        float d = b * (v_n[j] - p);
        // update and read out
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = expf(g_n[i]) * s[i * V + j] + k_n[i] * d;
            s[i * V + j] = s_ij;
            acc += s_ij * q_n[i];
        }
        o_n[j] = scale * acc;
    }
}
