"""Host side of the CUDA C++ decode kernel (decode.cu): compile and launch it.

On a GPU (torch CUDA tensors): NVRTC -> PTX for compute_`ARCH`, loaded and launched through the
CUDA driver API (ctypes), on torch's current stream. On a CPU (kernels.harness.arrays.NpTensor):
the same source is compiled by the host C++ compiler with a small shim (`__global__`,
`threadIdx`, ...) and run with every thread of every block in turn. It is compiled for the device
path, as NVRTC compiles it: `__CUDA_ARCH__` is `ARCH * 10`, `__CUDACC__` and `__CUDACC_RTC__` are
defined (after the system headers, which change with them), so code under `#ifdef __CUDA_ARCH__`
runs here as it would on the GPU; `emulation_info` says whether the source reads differently on
the host path. Blocks, and the threads of each block, run in `ORDER` (natural, reversed, or a
seeded shuffle): threads that communicate through memory give results that depend on it.
That emulation is exact for kernels whose threads do not communicate (this first version); a
variant that uses barriers, warp shuffles or shared memory, or device-only code the host
compiler cannot build, fails to build there and is reported as needing a GPU (`NeedsGpu`).

The float64 reference is kernels.kda.reference.naive_decode_kda (the manifest's `reference`).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["kda_decode_cuda", "prepare", "emulation_info", "NeedsGpu", "LAUNCHES", "LAUNCHED", "ORDER", "ARCH"]

DEFAULT_SOURCE = Path(__file__).with_name("decode.cu")
ARCH = 90   # compute capability the GPU path compiles for (the manifests' sm_90); the emulation's __CUDA_ARCH__ / 10


class NeedsGpu(RuntimeError):
    """The kernel cannot be run on this machine without a GPU."""


_SHIM = r"""
#include <cmath>
#include <cstdint>
#include <vector>
struct kidiom_dim3 { unsigned x, y, z; };
static kidiom_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __ldg(p) (*(p))
#define __expf expf
#define __logf logf
static inline float __fdividef(float a, float b) { return a / b; }
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
#define __syncthreads() KIDIOM_EMULATION_CANNOT_RUN_BARRIERS
#define __shfl_xor_sync(...) KIDIOM_EMULATION_CANNOT_RUN_SHUFFLES
#define __shfl_down_sync(...) KIDIOM_EMULATION_CANNOT_RUN_SHUFFLES
#define __shfl_sync(...) KIDIOM_EMULATION_CANNOT_RUN_SHUFFLES
#define __shared__ KIDIOM_EMULATION_CANNOT_RUN_SHARED_MEMORY
"""

# What NVRTC defines when it compiles the source for the GPU (after the shim's system headers).
_DEVICE_PATH = f"""
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1
#define __CUDA_ARCH__ {ARCH * 10}
"""

# order: 0 natural, 1 reversed, 2 shuffled (xorshift64 Fisher-Yates from `seed`; each block's
# threads with a seed of their own, so warps interleave differently in every block)
_DRIVER = r"""
static void kidiom_order(std::vector<unsigned>& ids, int order, unsigned long long seed) {
    for (unsigned i = 0; i < ids.size(); i++) ids[i] = i;
    if (order == 1) {
        for (unsigned i = 0, j = ids.size(); i + 1 < j; i++, j--) { unsigned t = ids[i]; ids[i] = ids[j - 1]; ids[j - 1] = t; }
    } else if (order == 2) {
        unsigned long long x = seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
        for (unsigned i = ids.size(); i > 1; i--) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            unsigned j = (unsigned)(x % i);
            unsigned t = ids[i - 1]; ids[i - 1] = ids[j]; ids[j] = t;
        }
    }
}

extern "C" void kidiom_launch(unsigned grid, unsigned block, int order, unsigned long long seed,
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    float* state, const long long* slots, float* o, int N, int H, int HV, int K, int V, float scale)
{
    gridDim = kidiom_dim3{grid, 1, 1};
    blockDim = kidiom_dim3{block, 1, 1};
    std::vector<unsigned> blocks(grid), threads(block);
    kidiom_order(blocks, order, seed);
    for (unsigned bi = 0; bi < grid; bi++) {
        unsigned b = blocks[bi];
        kidiom_order(threads, order, seed + 1 + b);
        for (unsigned ti = 0; ti < block; ti++) {
            blockIdx = kidiom_dim3{b, 0, 0};
            threadIdx = kidiom_dim3{threads[ti], 0, 0};
            ENTRY(q, k, v, g, beta, state, slots, o, N, H, HV, K, V, scale);
        }
    }
}
"""
_ORDERS = {"natural": 0, "reversed": 1, "shuffle": 2}

_cpu_libs = {}
_gpu_modules = {}
_emulations = {}
LAUNCHES = {}   # entry -> launches made through kda_decode_cuda (the check counts them per call)
LAUNCHED = []   # the emulation's launches since the caller last cleared it: {kernel, grid, block, order}
ORDER = {"order": "natural", "seed": 0}   # the emulation's block and thread order (the check's worker sets it)


def _cudatools():
    try:
        from kernels.harness import cudatools
    except ImportError:   # in the check's sandboxed worker the runtime is a copy: kidiom_rt
        from kidiom_rt import cudatools
    return cudatools


def _cxx():
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise NeedsGpu("no host C++ compiler to emulate the CUDA kernel on the CPU")
    return cxx


def _emulation_source(source_text, entry, device_path=True):
    return (_SHIM + (_DEVICE_PATH if device_path else "") + "#line 1 \"kernel.cu\"\n" + source_text +
            f"\n#define ENTRY {entry}\n" + _DRIVER)


def _cpu_library(source_text, entry):
    key = hashlib.sha256((source_text + entry + _DEVICE_PATH + _DRIVER).encode()).hexdigest()[:16]
    if key in _cpu_libs:
        return _cpu_libs[key]
    cxx = _cxx()
    d = Path(tempfile.gettempdir()) / "kidiom-cuda-emu"
    d.mkdir(exist_ok=True)
    src, lib = d / f"{key}.cpp", d / f"{key}.so"
    if not lib.exists():
        src.write_text(_emulation_source(source_text, entry))
        r = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                            "-o", str(lib) + ".tmp", str(src)], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise NeedsGpu(f"the CUDA kernel's device path (__CUDA_ARCH__ {ARCH * 10}) cannot be emulated on the "
                           "CPU (it needs barriers, shuffles, shared memory or CUDA-only code): "
                           + r.stderr.strip()[-1500:])
        os.replace(str(lib) + ".tmp", lib)
    so = ctypes.CDLL(str(lib))
    fn = so.kidiom_launch
    fn.restype = None
    fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_int, ctypes.c_ulonglong] + [ctypes.c_void_p] * 8 + \
        [ctypes.c_int] * 5 + [ctypes.c_float]
    _cpu_libs[key] = fn
    return fn


def emulation_info(source_path=None, entry="kda_decode_kernel"):
    """How the CPU emulation compiles the source: the device path (`__CUDA_ARCH__`), and whether
    the host path would have read differently (the preprocessed texts differ)."""
    path = Path(source_path) if source_path else DEFAULT_SOURCE
    text = path.read_text()
    key = hashlib.sha256((text + entry).encode()).hexdigest()
    if key not in _emulations:
        info = {"path": "device", "cuda_arch": ARCH * 10, "differs_from_host": None}
        try:
            outs = []
            for device in (True, False):
                r = subprocess.run([_cxx(), "-std=c++17", "-E", "-P", "-x", "c++", "-"],
                                   input=_emulation_source(text, entry, device), capture_output=True, text=True,
                                   timeout=60)
                outs.append(r.stdout if r.returncode == 0 else None)
            # the device-path text carries its own three defines: compare without them
            if None not in outs:
                info["differs_from_host"] = outs[0] != outs[1]
        except (OSError, subprocess.SubprocessError, NeedsGpu) as e:
            info["error"] = f"{type(e).__name__}: {e}"[:300]
        _emulations[key] = info
    return dict(_emulations[key])


def _gpu_module(source_text, name):
    cudatools = _cudatools()
    key = hashlib.sha256(source_text.encode()).hexdigest()
    if key not in _gpu_modules:
        ptx, _ = cudatools.nvrtc_compile(source_text, name=name, arch=ARCH)
        _gpu_modules[key] = cudatools.CudaModule(ptx)
    return _gpu_modules[key]


def prepare(source_path=None, entry="kda_decode_kernel", on_gpu=False):
    """Build the kernel now (NVRTC on a GPU, the emulation library on a CPU), so that a source
    that cannot run here is known before any call (raises NeedsGpu on a CPU)."""
    path = Path(source_path) if source_path else DEFAULT_SOURCE
    text = path.read_text()
    if on_gpu:
        _gpu_module(text, path.name)
    else:
        _cpu_library(text, entry)


def kda_decode_cuda(q, k, v, g, beta, state, slots, o, scale=None, source_path=None,
                    entry="kda_decode_kernel", block_threads=128):
    """One KDA decode step per sequence with the CUDA C++ kernel (same contract as
    kernels.kda.decode.kda_decode).

    Args:
        q, k:  `[N, H, K]` float32;  v: `[N, HV, V]`;  g: `[N, HV, K]`;  beta: `[N, HV]`.
        state: `[num_slots, HV, K, V]` float32 pool, updated in place at rows `slots`.
        slots: `[N]` int64, distinct.
        o:     `[N, HV, V]` float32, preallocated.
        scale: `K ** -0.5` by default.
        source_path, entry: the .cu file and its `extern "C" __global__` entry (a rewritten
        variant may be passed); block_threads: threads per block (at most V are used).
    Launch: grid `N * HV`, block `min(V, block_threads)`. Returns `o`.
    """
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    assert HV % H == 0 and tuple(o.shape) == (N, HV, V) and tuple(state.shape[1:]) == (HV, K, V)
    assert str(slots.dtype).endswith("int64"), "slots must be int64"
    scale = K ** -0.5 if scale is None else scale
    path = Path(source_path) if source_path else DEFAULT_SOURCE
    text = path.read_text()
    grid, block = N * HV, min(V, block_threads)
    ptrs = [t.data_ptr() for t in (q, k, v, g, beta, state, slots, o)]
    if getattr(q, "is_cuda", False):
        import torch
        mod = _gpu_module(text, path.name)
        args = [ctypes.c_void_p(p) for p in ptrs] + [ctypes.c_int(x) for x in (N, H, HV, K, V)] + \
            [ctypes.c_float(scale)]
        LAUNCHES[entry] = LAUNCHES.get(entry, 0) + 1
        mod.launch(entry, (grid,), (block,), args, stream=torch.cuda.current_stream().cuda_stream)
    else:
        fn = _cpu_library(text, entry)
        LAUNCHES[entry] = LAUNCHES.get(entry, 0) + 1
        order = ORDER.get("order", "natural")
        if len(LAUNCHED) < 64:
            LAUNCHED.append({"kernel": entry, "grid": [grid], "block": [block], "order": order})
        fn(grid, block, _ORDERS[order], int(ORDER.get("seed", 0)) & (2 ** 64 - 1), *ptrs, N, H, HV, K, V, scale)
    return o
