"""The CUDA emulation's cooperating threads and its work counting (issue #23; kernels/harness/cuda/emulation.py).

(a) variants of our CUDA decode that need threads to cooperate, written here as fixtures, pass
    `check` on this CPU through the harness: one stages q, k and exp(g) in shared memory behind a
    `__syncthreads()`, one reduces over K with `__shfl_xor_sync` (a warp per value column);
(b) what a GPU would do wrong is reported, never hung on: a missing barrier (a race in shared
    memory), a barrier in a divergent branch, a wait no thread can end, a runaway block;
(c) the runtime's semantics, on kernels of the launcher's signature run in this process: shuffles
    with width and mask, votes, warp reductions, atomics on shared and global memory, NaN-filled
    shared memory, exited threads at a barrier, threads reordered at every barrier;
(d) `profile` of the CUDA decode: counts per source line that agree with arithmetic from
    decode.cu (the state read in both loops, the broadcasts of q, k, g once per warp instruction,
    two exp per state element), scaled counts equal to a whole count.
"""
import json
import time

import numpy as np
import pytest

from kernels.harness.triton.arrays import NpTensor
from kernels.harness.manifest import all_manifests
from kernels.harness.triton.profile import FIELDS, profile_kernel
from kernels.harness.contract import load_contract
from kernels.harness.cuda import emulation as launch

# the CUDA decode's launch (grid, block, parameters), from its contract
DECODE_CONTRACT = load_contract(all_manifests()["kda_cuda.decode"])

from .conftest import HAS_CUDA, ROOT, harness

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="the CPU emulation (a GPU runs the kernel natively)")
CUDA = all_manifests()["kda_cuda.decode"]
DECODE_CU = ROOT / "kernels" / "kda_cuda" / "decode.cu"

SIGNATURE = '''extern "C" __global__ void kda_decode_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    float* state, const long long* slots, float* o,
    int N, int H, int HV, int K, int V, float scale)
{
'''
PROLOG = '''    int nh = blockIdx.x;
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
    float* s = state + (slots[n] * HV + hv) * K * V;
    float* o_n = o + (n * HV + hv) * V;
'''
STAGE = '''    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        s_q[i] = q_n[i];
        s_k[i] = k_n[i];
        s_decay[i] = expf(g_n[i]);
    }
    __syncthreads();
'''
# q, k and exp(g) of the (sequence, value head) staged once per block in shared memory
SHARED = SIGNATURE + '''    __shared__ float s_q[256];
    __shared__ float s_k[256];
    __shared__ float s_decay[256];
''' + PROLOG + STAGE + '''    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; i++) {
            p += s_decay[i] * s[i * V + j] * s_k[i];
        }
        float d = b * (v_n[j] - p);
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            float s_ij = s_decay[i] * s[i * V + j] + s_k[i] * d;
            s[i * V + j] = s_ij;
            acc += s_ij * s_q[i];
        }
        o_n[j] = scale * acc;
    }
}
'''
# a warp per value column, its lanes splitting the K rows, the sums by a butterfly of shuffles
SHUFFLE = '''// the sum over a warp of nl lanes (a prefix of the warp: the block's last warp may be partial):
// a butterfly of __shfl_xor_sync, absent partners adding nothing; lane 0's sum to every lane
__device__ float warp_sum(float x, unsigned mask, int nl)
{
    int lane = threadIdx.x & 31;
    for (int off = 16; off > 0; off >>= 1) {
        float y = __shfl_xor_sync(mask, x, off);
        x += (lane ^ off) < nl ? y : 0.0f;
    }
    return __shfl_sync(mask, x, 0);
}

''' + SIGNATURE + PROLOG + '''    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int warps = (blockDim.x + 31) >> 5;
    int nl = min(32, (int)blockDim.x - warp * 32);
    unsigned mask = nl == 32 ? 0xffffffffu : (1u << nl) - 1u;
    for (int j = warp; j < V; j += warps) {
        float p = 0.0f;
        for (int i = lane; i < K; i += nl) {
            p += expf(g_n[i]) * s[i * V + j] * k_n[i];
        }
        p = warp_sum(p, mask, nl);
        float d = b * (v_n[j] - p);
        float acc = 0.0f;
        for (int i = lane; i < K; i += nl) {
            float s_ij = expf(g_n[i]) * s[i * V + j] + k_n[i] * d;
            s[i * V + j] = s_ij;
            acc += s_ij * q_n[i];
        }
        acc = warp_sum(acc, mask, nl);
        if (lane == 0) {
            o_n[j] = scale * acc;
        }
    }
}
'''
# the planted bugs
RACE = SHARED.replace("    __syncthreads();\n", "")   # the staged values read before every thread wrote them
# the staging and its barrier only in the threads below K; the others wait at a later barrier
DIVERGENT = SHARED.replace(STAGE, """    if (threadIdx.x < K) {
        for (int i = threadIdx.x; i < K; i += blockDim.x) {
            s_q[i] = q_n[i];
            s_k[i] = k_n[i];
            s_decay[i] = expf(g_n[i]);
        }
        __syncthreads();
    }
""").replace("        o_n[j] = scale * acc;\n    }\n}", "        o_n[j] = scale * acc;\n    }\n    __syncthreads();\n}")


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _check(src, *extra, timeout=300):
    return harness("check", "--kernel", "kda_cuda.decode", "--source", str(src), "--seed", "3", *extra,
                   "--timeout", str(timeout))


def _line_no(source_text, statement):
    nums = [i + 1 for i, t in enumerate(source_text.splitlines()) if t.strip().startswith(statement)]
    assert len(nums) == 1, (statement, nums)
    return nums[0]


def _line(profile, source_text, statement):
    n = _line_no(source_text, statement)
    hits = [e for e in profile["lines"] if e["line"] == n]
    assert hits, f"no counts at line {n} ({statement})"
    return hits[0]


def _deadline():
    return time.monotonic() + 300


# (a) cooperating variants pass check ---------------------------------------------------------------

@cpu_only
@pytest.mark.parametrize("name,text", [("shared", SHARED), ("shuffle", SHUFFLE)])
def test_variants_with_barriers_shared_memory_and_shuffles_pass_check(tmp_path, name, text):
    assert ("__syncthreads();" in text and "__shared__" in text) if name == "shared" else "__shfl_xor_sync" in text
    rc, out = _check(_write(tmp_path, f"{name}.cu", text))
    assert rc == 0 and out["status"] == "passed", (rc, out.get("status"), out.get("failures"), out.get("reason"),
                                                   out.get("error"))
    assert out["device"].startswith("cpu (") and "CUDA emulation" in out["device"], out["device"]
    assert out["mode"] == "emulation" and out["emulation"]["path"] == "device"
    assert out["baseline"]["compared"] is True
    # every CPU case ran, the GPU's K and V too, and every order of blocks and threads agreed
    assert len(out["cases"]) >= 3 and all(c["passed"] for c in out["cases"])
    assert out["specializations"]["cases"] and all(c["passed"] for c in out["specializations"]["cases"])
    po = out["program_order"]
    assert po["passed"] and po["identical"] == {"reversed": True, "shuffle": True}, po


# (b) what the GPU would do wrong ---------------------------------------------------------------------

@cpu_only
def test_a_missing_barrier_before_shared_memory_is_read_is_caught(tmp_path):
    rc, out = _check(_write(tmp_path, "race.cu", RACE))
    assert rc == 1 and out["status"] == "failed", (rc, out.get("status"), out.get("error"))
    joined = "\n".join(out["failures"])
    # shared memory is NaN until written: the threads that read before the others staged see it,
    # and which ones those are depends on the order the threads run in
    assert "non-finite" in joined
    assert "result depends on program order" in joined or not out["program_order"]["passed"], out["program_order"]


@cpu_only
def test_a_barrier_in_a_divergent_branch_fails_and_does_not_hang(tmp_path):
    assert "    if (threadIdx.x < K) {\n        for (int i" in DIVERGENT and DIVERGENT.count("__syncthreads();") == 2
    t0 = time.monotonic()
    rc, out = _check(_write(tmp_path, "divergent.cu", DIVERGENT), timeout=240)
    assert time.monotonic() - t0 < 120
    assert rc == 1 and out["status"] == "failed", (rc, out.get("status"), out.get("error"))
    joined = "\n".join(out["failures"])
    # K = 20 of 128 threads take the branch; the rest wait at the final barrier: a different one
    assert "N2-H2-HV2-K20-V200-S4" in joined and "raised EmulationError: CUDA emulation: barrier divergence" in joined
    src = DIVERGENT.splitlines()
    inner, last = [i + 1 for i, t in enumerate(src) if t.strip() == "__syncthreads();"]
    assert f"threads 0-19 (20 threads) wait at __syncthreads() on line {inner}" in joined
    assert f"threads 20-127 (108 threads) wait at __syncthreads() on line {last}" in joined
    # where every thread takes the branch, it passes
    assert all(c["passed"] for c in out["cases"] if "K20-V200" not in c["id"])


# (c) the runtime's semantics, in this process ---------------------------------------------------------

def _run(tmp_path, body, shape, order="natural", seed=0, name="k.cu", shared="", prelude=""):
    """Run a kernel of the launcher's signature whose body is `body`; (o, state) as arrays. The
    body sees t (threadIdx.x), lane, warp, s (the state row of its block: K x V floats, zeroed)."""
    src = _write(tmp_path, name, prelude + SIGNATURE + shared + '''    int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float* s = state + blockIdx.x * K * V;
    float* o_n = o + blockIdx.x * V;
''' + body + "\n}\n")
    N, H, HV, K, V = (shape[x] for x in ("N", "H", "HV", "K", "V"))
    arrays = {"q": np.zeros((N, H, K), np.float32), "k": np.zeros((N, H, K), np.float32),
              "v": np.zeros((N, HV, V), np.float32), "g": np.zeros((N, HV, K), np.float32),
              "beta": np.zeros((N, HV), np.float32), "state": np.zeros((N, HV, K, V), np.float32),
              "slots": np.arange(N, dtype=np.int64)}
    t = {n: NpTensor.from_numpy(a) for n, a in arrays.items()}
    t["o"] = NpTensor.full((N, HV, V), np.nan)
    launch.ORDER.update(order=order, seed=seed)
    try:
        launch.launch_kernel(DECODE_CONTRACT.launch(dict(shape, S=N)), t, source_path=src, entry="kda_decode_kernel")
    finally:
        launch.ORDER.update(order="natural", seed=0)
    return t["o"].numpy().reshape(N * HV, V), t["state"].numpy().reshape(N * HV, K, V)


WARP_OPS = '''
    float x;
    x = __shfl_sync(0xffffffff, (float)lane, 5);                    s[0 * V + t] = x;
    x = __shfl_up_sync(0xffffffff, (float)lane, 3, 8);              s[1 * V + t] = x;
    x = __shfl_down_sync(0xffffffff, (float)lane, 2, 16);           s[2 * V + t] = x;
    x = __shfl_xor_sync(0xffffffff, (float)t, 1);                   s[3 * V + t] = x;
    unsigned bal = __ballot_sync(0xffffffff, lane % 3 == 0);        s[4 * V + t] = (float)(bal & 0xffffu);
    s[5 * V + t] = (float)(__reduce_add_sync(0xffffffff, (unsigned)lane) + 1000 * __any_sync(0xffffffff, t == 40)
                          + 10000 * __all_sync(0xffffffff, t < 64));
    float w = (float)t;
    for (int off = 16; off > 0; off >>= 1) w += __shfl_xor_sync(0xffffffff, w, off);
    s[6 * V + t] = w;
    float y = -1.0f, z = 0.0f;
    if (lane < 16) {
        y = __shfl_xor_sync(0x0000ffffu, (float)lane, 8);           // a half-warp mask
        z = __shfl_sync(0x0000ffffu, 1.0f, 20);                      // a source outside it: undefined
        __syncwarp(0x0000ffffu);
    }
    s[8 * V + t] = y;
    s[9 * V + t] = z;
    o_n[t] = 0.0f;
    __syncthreads();
    atomicAdd(&o_n[0], 1.0f);
    if (t == 0) counter = 0;
    __syncthreads();
    atomicAdd(&counter, 1);
    int c = __syncthreads_count(t < 10);
    s[7 * V + t] = (float)(counter * 100 + c);
    s[10 * V + t] = (float)__CUDA_ARCH__;
'''


@cpu_only
@pytest.mark.parametrize("order", ["natural", "reversed", "shuffle"])
def test_shuffles_votes_reductions_and_atomics_as_the_gpu_defines_them(tmp_path, order):
    o, s = _run(tmp_path, WARP_OPS, {"N": 1, "H": 1, "HV": 1, "K": 11, "V": 64}, order=order, seed=7,
                shared="    __shared__ int counter;\n")
    s = s[0]
    t = np.arange(64)
    lane = t % 32
    assert (s[0] == 5).all()
    assert (s[1] == np.where(lane % 8 < 3, lane, lane - 3)).all()        # up within segments of 8
    assert (s[2] == np.where(lane % 16 + 2 >= 16, lane, lane + 2)).all()  # down within segments of 16
    assert (s[3] == t ^ 1).all()
    assert (s[4] == sum(1 << l for l in range(16) if l % 3 == 0)).all()
    assert (s[5] == 496 + np.where(t >= 32, 1000, 0) + 10000).all()
    assert (s[6] == np.where(t < 32, 496, 32 * 32 + 496)).all()
    assert (s[8] == np.where(lane < 16, lane ^ 8, -1)).all()
    assert np.isnan(s[9][lane < 16]).all() and (s[9][lane >= 16] == 0).all()
    assert (s[7] == 64 * 100 + 10).all()
    assert o[0, 0] == 64 and (o[0, 1:] == 0).all()                     # a global atomicAdd by every thread
    assert (s[10] == 900).all()                                          # the device path


# round four, class 6: the device's arithmetic on the CPU ----------------------------------------------

DEVICE_MATH = '''
    if (t == 0) {
        s[0] = __sinf(2.0e6f);          s[1] = sinf(2.0e6f);
        s[2] = __expf(80.0f);           s[3] = expf(80.0f);
        s[4] = __fdividef(1.0f, 1.0e38f); s[5] = 1.0f / 1.0e38f;
        s[6] = __logf(3.0f);            s[7] = __powf(2.0f, 10.0f);
        s[8] = (float)__float2int_rz(3.0e10f);   s[9] = (float)__float2int_rn(-3.0e10f);
        s[10] = (float)__float2int_rn(__int_as_float(0x7fc00000));  s[11] = (float)__float2uint_rz(-5.0f);
        s[12] = (float)__float2int_rn(2.5f);     s[13] = (float)__float2int_rd(-2.5f);
        s[14] = __cosf(0.5f);           s[15] = __sinf(0.5f);
    }
    o_n[t] = 0.0f;
'''


@cpu_only
def test_fast_intrinsics_and_conversions_compute_as_the_device_does(tmp_path):
    _, s = _run(tmp_path, DEVICE_MATH, {"N": 1, "H": 1, "HV": 1, "K": 4, "V": 32})
    s = s[0].reshape(-1)
    # __sinf reads x / 2 pi rounded toward zero in float: at 2e6 it is far from sin(2e6)
    assert abs(s[0] - np.sin(np.float64(2.0e6))) > 0.1 and abs(s[1] - np.sin(np.float64(2.0e6))) < 1e-6
    assert abs(s[0] - -0.8314696) < 1e-5
    # __expf scales by log2 e in float first: near, not equal, at 80
    assert s[2] != s[3] and abs(s[2] / s[3] - 1) < 1e-5
    # __fdividef flushes past 2^126; the division does not
    assert s[4] == 0.0 and s[5] > 0
    assert abs(s[6] - np.log(3.0)) < 1e-6 and abs(s[7] - 1024.0) < 1e-2
    # conversions saturate, NaN to 0, rounded as the suffix says
    assert (s[8], s[9], s[10], s[11]) == (2147483647.0, -2147483648.0, 0.0, 0.0)
    assert (s[12], s[13]) == (2.0, -3.0)
    assert abs(s[14] - np.cos(0.5)) < 1e-6 and abs(s[15] - np.sin(0.5)) < 1e-6


@cpu_only
def test_a_conversion_out_of_range_stops_the_launch_naming_the_line(tmp_path):
    body = '''    float big = 1.0e30f + (float)t;
    int i = (int)big;             // the GPU saturates: 2147483647; x86 gives 0x80000000
    o_n[t] = i < 0 ? 1.0f : 0.5f;
'''
    with pytest.raises(launch.EmulationError) as e:
        _run(tmp_path, body, {"N": 1, "H": 1, "HV": 1, "K": 4, "V": 32})
    line = (SIGNATURE + "    int t = threadIdx.x, lane = t & 31, warp = t >> 5;\n    float* s = state + blockIdx.x * K * V;\n"
            "    float* o_n = o + blockIdx.x * V;\n" + body).splitlines().index("    int i = (int)big;             "
                                                                          "// the GPU saturates: 2147483647; x86 gives 0x80000000") + 1
    msg = str(e.value)
    assert "device arithmetic the CPU cannot reproduce" in msg and f"line {line} of kernel.cu" in msg, msg
    assert "1e+30 ('float') to 'int'" in msg, msg


RUNTIME_INCLUDES = "#include <cuda_runtime.h>\n#include <cuda.h>\n#include <device_launch_parameters.h>\n\n"


@cpu_only
def test_a_source_that_includes_the_cuda_runtime_headers_builds_as_under_nvcc(tmp_path):
    # nvcc puts the toolkit on the include path; neither the emulation nor NVRTC has its files
    o, _ = _run(tmp_path, "    o_n[t] = (float)(blockIdx.x * 100 + t);", {"N": 2, "H": 1, "HV": 1, "K": 4, "V": 32},
                prelude=RUNTIME_INCLUDES)
    assert o.tolist() == [[float(b * 100 + t) for t in range(32)] for b in range(2)]
    from kernels.harness.triton import cudatools
    try:
        cudatools._nvrtc_lib()
    except FileNotFoundError:
        return   # no NVRTC here: the emulation's half is what this machine checks
    ptx, _ = cudatools.nvrtc_compile(RUNTIME_INCLUDES + SIGNATURE + "    o[0] = scale;\n}\n")
    assert ".entry kda_decode_kernel" in ptx


@cpu_only
def test_threads_run_in_the_order_asked_at_every_barrier(tmp_path):
    body = '''
    if (t == 0) ticket = 0;
    __syncthreads();
    int a = atomicAdd(&ticket, 1);
    __syncthreads();
    int b = atomicAdd(&ticket, 1) - blockDim.x;
    s[t] = (float)a;
    s[V + t] = (float)b;
'''
    shape = {"N": 1, "H": 1, "HV": 1, "K": 2, "V": 64}
    got = {o: _run(tmp_path, body, shape, order=o, seed=3, shared="    __shared__ int ticket;\n")[1][0]
           for o in ("natural", "reversed", "shuffle")}
    t = np.arange(64)
    assert (got["natural"][0] == t).all() and (got["natural"][1] == t).all()
    assert (got["reversed"][0] == 63 - t).all() and (got["reversed"][1] == 63 - t).all()
    a, b = got["shuffle"]
    assert sorted(a) == list(t) and sorted(b) == list(t)
    assert not (a == t).all() and not (a == 63 - t).all()
    assert not (a == b).all(), "a shuffled order is drawn again after every barrier"


@cpu_only
def test_shared_memory_is_nan_before_every_block_and_exited_threads_count_at_a_barrier(tmp_path):
    body = '''
    if (t >= 40) return;            // these threads exit before the barrier: it opens without them
    if (t == 0) s[0] = buf[0];       // never written in this block yet: NaN
    __syncthreads();
    buf[0] = 1.0f;
    s[V + t] = 2.0f;
'''
    o, s = _run(tmp_path, body, {"N": 1, "H": 1, "HV": 2, "K": 2, "V": 64}, shared="    __shared__ float buf[4];\n")
    assert np.isnan(s[:, 0, 0]).all()          # both blocks: NaN, though block 0 wrote buf[0] = 1
    assert (s[:, 1, :40] == 2).all() and (s[:, 1, 40:] == 0).all()


@cpu_only
@pytest.mark.parametrize("body,why", [
    # half a warp at a barrier, the other half at a shuffle whose mask names the first half
    ('''    float x = (float)t;
    if (lane < 16) __syncthreads();
    else x = __shfl_xor_sync(0xffffffff, x, 1);
    s[t] = x;''', "barrier divergence (deadlock): block 0: threads 0-15, 32-47 (32 threads) wait at __syncthreads()"),
    # lanes of one mask at different collectives
    ('''    float x = (float)t;
    if (lane < 16) x = __shfl_xor_sync(0xffffffff, x, 1);
    else __syncwarp();
    s[t] = x;''', "warp divergence: block 0 warp 0: lane 16 waits at __syncwarp on line 11 (mask 0xffffffff) while "
                  "lane 0, named in its mask, waits at __shfl_xor_sync on line 10"),
])
def test_a_wait_no_thread_can_end_is_a_failure_at_once(tmp_path, body, why):
    t0 = time.monotonic()
    with pytest.raises(launch.EmulationError) as e:
        _run(tmp_path, body, {"N": 1, "H": 1, "HV": 1, "K": 2, "V": 64})
    assert why in str(e.value), str(e.value)
    assert time.monotonic() - t0 < 30


@cpu_only
def test_a_runaway_block_is_stopped(tmp_path, monkeypatch):
    # a spin-wait for a flag no thread sets (cooperative threads are never preempted)
    body = '''
    volatile int* f = &flag;
    while (*f != 7) {}
    s[t] = 1.0f;'''
    monkeypatch.setattr(launch, "BLOCK_LIMIT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(launch.EmulationError) as e:
        _run(tmp_path, body, {"N": 1, "H": 1, "HV": 1, "K": 2, "V": 64}, shared="    __shared__ int flag;\n")
    assert "runaway: block 0 did not finish within 0.5 s" in str(e.value), str(e.value)
    assert time.monotonic() - t0 < 20
    # the library still works afterwards
    o, s = _run(tmp_path, "    s[t] = 3.0f;", {"N": 1, "H": 1, "HV": 1, "K": 2, "V": 64}, name="after.cu")
    assert (s[0, 0] == 3).all()


# (d) profile ------------------------------------------------------------------------------------------

def _expected_decode(shape):
    """decode.cu's counts per statement from its source, at `shape` (V <= 128: one column per
    thread). Lanes of a warp loading the same address in one instruction count once: the
    broadcasts of g, k, q, beta and the slot are per warp, the state's columns per lane. Redundant
    calls (issue #24): every thread evaluates expf(g_n[i]) for the same K values in both loops, so
    the second loop's are all repeats of the first's, and in both loops every thread but the
    block's first evaluates what that one did (uniform: (threads - 1) / threads of them)."""
    N, HV, K, V = (shape[x] for x in ("N", "HV", "K", "V"))
    lc = DECODE_CONTRACT.launch(dict(shape, H=shape.get("H", 1), S=N))
    blocks, block = lc["grid"][0], lc["block"][0]
    assert block == V
    W = -(-block // 32)
    state = K * V * 4
    per_block = {
        "float b = beta": {"load_bytes": 4 * W},
        "float* s = state": {"load_bytes": 8 * W},
        "p += expf(g_n[i])": {"load_bytes": state + 2 * W * K * 4, "special_calls": K * V, "flops": 3 * K * V,
                              "repeat_calls": 0, "uniform_calls": K * (V - 1)},
        "float d = b * (v_n[j] - p);": {"load_bytes": V * 4, "flops": 2 * V},
        "float s_ij = expf(g_n[i])": {"load_bytes": state + 2 * W * K * 4, "reread_bytes": state + 2 * W * K * 4,
                                      "special_calls": K * V, "flops": 3 * K * V,
                                      "repeat_calls": K * V, "uniform_calls": K * (V - 1)},
        "s[i * V + j] = s_ij;": {"store_bytes": state},
        "acc += s_ij * q_n[i];": {"load_bytes": W * K * 4, "flops": 2 * K * V},
        "o_n[j] = scale * acc;": {"store_bytes": V * 4, "flops": V},
    }
    return blocks, {k: {f: v.get(f, 0) * blocks for f in FIELDS} for k, v in per_block.items()}


@cpu_only
def test_profile_of_the_cuda_decode_agrees_with_its_source():
    rc, p = harness("profile", "--kernel", "kda_cuda.decode", "--json", "--timeout", "300")
    assert rc == 0 and p["status"] == "ok", p
    assert (p["wire"], p["version"], p["command"]) == ("kidiom-harness", 1, "profile")
    assert p["mode"] == "emulation" and "CUDA emulation" in p["device"]
    s = CUDA.shapes["bench"]
    N, HV, K, V = (s[x] for x in ("N", "HV", "K", "V"))
    assert p["shape"] == s
    blocks, expected = _expected_decode(s)
    c = p["counted"]
    assert c["programs_total"] == blocks == N * HV and c["programs"] == HV // s["H"] and not c["exact"]
    assert c["scale"] == blocks / c["programs"] and c["shape"]["K"] == K and c["shape"]["V"] == V
    assert "per warp instruction" in c["note"] and "flops not counted" not in c["note"]
    text = DECODE_CU.read_text()
    for stmt, want in expected.items():
        got = _line(p, text, stmt)
        assert {f: got[f] for f in FIELDS} == want, (stmt, got, want)
    assert {e["line"] for e in p["lines"]} == {_line_no(text, st) for st in expected}
    t = p["totals"]
    for f in FIELDS:
        assert t[f] == sum(w[f] for w in expected.values()) == sum(e[f] for e in p["lines"]), f
    # the state is read in both loops: the two loop lines lead, the second all re-read
    top = sorted(p["lines"], key=lambda e: -e["load_bytes"])[:2]
    loops = {_line_no(text, "p += expf(g_n[i])"), _line_no(text, "float s_ij = expf(g_n[i])")}
    assert {e["line"] for e in top} == loops
    assert t["special_calls"] == 2 * N * HV * K * V and p["special"] == {"exp": 2 * N * HV * K * V}
    # redundant exp: the second loop's line repeats all of its calls; both lines (V-1)/V uniform
    second = _line(p, text, "float s_ij = expf(g_n[i])")
    assert second["repeat_calls"] == second["special_calls"] == N * HV * K * V
    assert _line(p, text, "p += expf(g_n[i])")["repeat_calls"] == 0
    assert t["uniform_calls"] == 2 * N * HV * K * (V - 1)
    assert p["floor"] == {"bytes": CUDA.floor_bytes(s), "flops": CUDA.floor_flops(s)}
    assert p["traffic_ratio"] == pytest.approx((t["load_bytes"] + t["store_bytes"]) / p["floor"]["bytes"])
    assert 1.45 < p["traffic_ratio"] < 1.6, p["traffic_ratio"]
    assert p["launches"] == 1
    assert all(e["text"] == text.splitlines()[e["line"] - 1].strip() for e in p["lines"])
    json.dumps(p)


@cpu_only
def test_scaled_cuda_counts_equal_a_whole_count():
    bench = {"N": 3, "H": 2, "HV": 4, "K": 24, "V": 40, "S": 5}   # 12 blocks of 40 threads: a partial warp each
    whole = profile_kernel(CUDA, bench=bench, exact=True, deadline=_deadline())
    scaled = profile_kernel(CUDA, bench=bench, deadline=_deadline())
    assert whole["counted"]["exact"] and whole["counted"]["programs"] == 12
    assert not scaled["counted"]["exact"] and scaled["counted"]["programs"] == 2
    assert scaled["counted"]["programs_total"] == whole["counted"]["programs_total"] == 12
    for f in FIELDS:
        assert abs(scaled["totals"][f] - whole["totals"][f]) <= 0.01 * max(whole["totals"][f], 1), f
    assert scaled["special"] == whole["special"]
    assert [(e["line"], *(e[f] for f in FIELDS)) for e in scaled["lines"]] == \
        [(e["line"], *(e[f] for f in FIELDS)) for e in whole["lines"]]
    _, expected = _expected_decode(bench)
    assert whole["totals"]["load_bytes"] == sum(w["load_bytes"] for w in expected.values())


@cpu_only
def test_profile_follows_a_variant_and_says_what_it_could_not_count(tmp_path):
    small = {"N": 2, "H": 1, "HV": 2, "K": 32, "V": 32, "S": 3}
    # staging exp(g) once per block: K exp per block instead of 2 K V
    p = profile_kernel(CUDA, _write(tmp_path, "shared.cu", SHARED), bench=small, exact=True, deadline=_deadline())
    blocks = small["N"] * small["HV"]
    assert p["special"] == {"exp": blocks * small["K"]}
    staged = _line(p, SHARED, "s_decay[i] = expf(g_n[i]);")
    assert staged["load_bytes"] == blocks * small["K"] * 4
    # each exp once per block, by one thread: no repeat, no uniform call left
    assert (staged["repeat_calls"], staged["uniform_calls"]) == (0, 0)
    assert (p["totals"]["repeat_calls"], p["totals"]["uniform_calls"]) == (0, 0)
    assert p["totals"]["flops"] > 0
    # a source the counting float cannot build (an implicit float -> double): counted without flops
    plain = DECODE_CU.read_text().replace("        float d = b * (v_n[j] - p);\n",
                                          "        double pd = p;\n        float d = b * (v_n[j] - (float)pd);\n")
    q = profile_kernel(CUDA, _write(tmp_path, "double.cu", plain), bench=small, exact=True, deadline=_deadline())
    assert q["totals"]["flops"] == 0 and "flops and float divisions not counted" in q["counted"]["note"]
    assert q["special"] == {"exp": 2 * blocks * small["K"] * small["V"]}


@cpu_only
def test_redundant_divisions_are_keyed_by_both_operands_per_thread(tmp_path):
    # issue #24: a division again on the same operands by the same thread is a repeat; one whose
    # value every thread of the block computes alike (1 / beta) is uniform
    text = DECODE_CU.read_text().replace("        float d = b * (v_n[j] - p);\n", """\
        float x = b * (v_n[j] - p);
        float h = x / 2.0f;
        float w = x / 4.0f;
        float h2 = x / 2.0f;
        float rb = 1.0f / b;
        float d = h + h2 - w * rb * b + w;
""")
    small = {"N": 2, "H": 1, "HV": 2, "K": 32, "V": 32, "S": 3}
    p = profile_kernel(CUDA, _write(tmp_path, "divide.cu", text), bench=small, exact=True, deadline=_deadline())
    blocks, V = small["N"] * small["HV"], small["V"]
    threads = blocks * V
    got = {st: _line(p, text, st) for st in ("float h = x", "float w = x", "float h2 = x", "float rb = 1.0f")}
    assert all(e["special_calls"] == threads for e in got.values()), got
    assert [got[st]["repeat_calls"] for st in got] == [0, 0, threads, 0]
    # x differs from thread to thread; 1 / beta is the block's own
    assert [got[st]["uniform_calls"] for st in got] == [0, 0, 0, blocks * (V - 1)]
    assert p["special"]["div"] == 4 * threads
