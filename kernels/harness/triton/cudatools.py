"""NVIDIA tools without a GPU: NVRTC (through ctypes), and the ptxas / cuobjdump that Triton's
wheel bundles; SASS instruction-mix and resource-usage parsing; and, on a GPU, loading and
launching a CUDA C++ kernel through the driver API (libcuda, ctypes) on torch tensors."""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

__all__ = ["tool", "nvrtc_compile", "ptxas", "cuobjdump_sass", "resource_usage", "instruction_mix",
           "CudaModule"]


def tool(name, arch=90):
    """Path of a CUDA tool: Triton's bundled copy first (for ptxas, the one Triton itself uses
    for this architecture: its PTX may need the newer assembler), then $PATH."""
    if name == "ptxas":
        try:
            from triton.backends.nvidia.compiler import get_ptxas
            return get_ptxas(arch).path
        except Exception:
            pass
    try:
        import triton
        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if p.exists():
            return str(p)
    except Exception:
        pass
    p = shutil.which(name)
    if p:
        return p
    raise FileNotFoundError(f"{name} not found (neither in triton's wheel nor on PATH)")


def _run(cmd, timeout=120):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout + r.stderr


# NVRTC -----------------------------------------------------------------------------------------

def _nvrtc_lib():
    cands = []
    for base in sys.path:
        for sub in ("nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            cands += sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")))
    cands += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    cands += ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    errors = []
    for c in cands:
        if "builtins" in c or ".alt." in c:
            continue
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(str(e))
    raise FileNotFoundError("libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")


# The CUDA runtime's headers a kernel's source commonly includes (nvcc puts the toolkit on the
# include path). What device code takes from them (threadIdx, __syncthreads, ...) is built into
# NVRTC and into the CPU emulation's runtime, and neither has the toolkit's files: both resolve
# these names to an empty header, so the source compiles as it does under nvcc.
RUNTIME_HEADERS = ("cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "device_launch_parameters.h")
_EMPTY_HEADER = "// kidiom: provided by NVRTC's built-ins\n"


def runtime_header_dir(base):
    """A directory under `base` holding RUNTIME_HEADERS (empty), for a host compiler's -I."""
    d = os.path.join(base, "cuda-runtime-headers")
    os.makedirs(d, exist_ok=True)
    for h in RUNTIME_HEADERS:
        f = os.path.join(d, h)
        if not os.path.exists(f):
            with open(f, "w") as out:
                out.write("// kidiom: provided by the CUDA emulation's runtime\n")
    return d


def nvrtc_compile(source, name="kernel.cu", arch=90, options=()):
    """CUDA C++ source -> PTX for compute_<arch>. Returns (ptx, log)."""
    lib = _nvrtc_lib()
    prog = ctypes.c_void_p()
    check = _nvrtc_check(lib)
    n = len(RUNTIME_HEADERS)
    texts = (ctypes.c_char_p * n)(*[_EMPTY_HEADER.encode()] * n)
    names = (ctypes.c_char_p * n)(*[h.encode() for h in RUNTIME_HEADERS])
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), n, texts, names), "create")
    opts = [f"--gpu-architecture=compute_{arch}", "--std=c++17", *options]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    res = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if res != 0:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        raise RuntimeError(f"nvrtc compilation failed: {log.strip()[-3000:]}")
    check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "ptx size")
    buf = ctypes.create_string_buffer(size.value)
    check(lib.nvrtcGetPTX(prog, buf), "ptx")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.value.decode(), log


def _nvrtc_check(lib):
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(res, what):
        if res != 0:
            raise RuntimeError(f"nvrtc {what}: {lib.nvrtcGetErrorString(res).decode()}")
    return check


def nvrtc_version():
    lib = _nvrtc_lib()
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
    return f"{a.value}.{b.value}"


# ptxas / cuobjdump ---------------------------------------------------------------------------

def _other_ptxas(first):
    """The other assemblers Triton's wheel bundles (ptxas, ptxas-blackwell), after `first`."""
    folder = Path(first).parent
    return [str(p) for p in (folder / "ptxas-blackwell", folder / "ptxas") if p.exists() and str(p) != str(first)]


def ptxas(ptx, arch="sm_90a", workdir=None):
    """PTX -> cubin with `ptxas -v`. Returns (cubin bytes, verbose log); `assemble` also says
    which assembler it was."""
    cubin, log, _ = assemble(ptx, arch, workdir)
    return cubin, log


def assemble(ptx, arch="sm_90a", workdir=None):
    """PTX -> (cubin bytes, `ptxas -v` log, the assembler's path).

    The assembler is the one Triton uses for the architecture; when that one is older than the
    PTX's ISA (Triton 3.6's ptxas 12.8 reads PTX up to 8.7, NVRTC 12.9 writes 8.8), the wheel's
    other assembler is tried before giving up."""
    with tempfile.TemporaryDirectory() as d:
        d = workdir or d
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_text(ptx)
        num = int("".join(c for c in arch if c.isdigit()))
        first = tool("ptxas", num)
        tries = [first] + _other_ptxas(first)
        for i, exe in enumerate(tries):
            try:
                log = _run([exe, f"-arch={arch}", "-v", src, "-o", out])
                break
            except RuntimeError as e:
                if "Unsupported .version" not in str(e) or i == len(tries) - 1:
                    raise
        return Path(out).read_bytes(), log, exe


def tool_version(exe):
    """`V12.8.93` of a CUDA tool's `--version`, without the V; None when it says nothing."""
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release [\d.]+, V([\d.]+)", text)
    return m[1] if m else None


def _with_cubin(cubin, fn):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.cubin")
        Path(p).write_bytes(cubin)
        return fn(p)


def cuobjdump_sass(cubin):
    return _with_cubin(cubin, lambda p: _run([tool("cuobjdump"), "-sass", p]))


def resource_usage(cubin, ptxas_log=""):
    """Registers, shared/local memory, stack and spills: cuobjdump -res-usage and ptxas -v."""
    text = _with_cubin(cubin, lambda p: _run([tool("cuobjdump"), "-res-usage", p]))
    res = {}
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", text)
    if m:
        res.update(registers=int(m[1]), stack_bytes=int(m[2]), shared_static_bytes=int(m[3]),
                   local_bytes=int(m[4]))
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    if m:
        res.update(spill_store_bytes=int(m[1]), spill_load_bytes=int(m[2]))
    m = re.search(r"Used (\d+) registers", ptxas_log)
    if m and "registers" not in res:
        res["registers"] = int(m[1])
    return res


# instruction classes (base opcode -> class)
_CLASSES = {
    "fp32": {"FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FSET", "FCHK", "FRND", "FSWZADD"},
    "fp64": {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX"},
    "fp16": {"HADD2", "HMUL2", "HFMA2", "HSETP2", "HMNMX2"},
    "tensor": {"HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA", "BMMA", "QGMMA", "UTCHMMA", "UTCQMMA"},
    "sfu": {"MUFU"},
    "int": {"IMAD", "IADD3", "IADD", "LOP3", "SHF", "LEA", "ISETP", "IMNMX", "IABS", "POPC", "FLO",
            "BREV", "IMUL", "SGXT", "PRMT", "BMSK", "VIADD", "VIMNMX", "IDP", "I2F", "F2I", "F2F",
            "I2FP", "F2FP", "FRND"},
    "global_load": {"LDG"},
    "global_store": {"STG"},
    "shared_load": {"LDS", "LDSM"},
    "shared_store": {"STS"},
    "local": {"LDL", "STL"},
    "async_copy": {"LDGSTS", "LDGDEPBAR", "UBLKCP", "UTMALDG", "UTMASTG", "UTMAPF", "SYNCS"},
    "atomic": {"ATOM", "ATOMG", "ATOMS", "RED", "REDG"},
    "shuffle": {"SHFL"},
    "constant": {"LDC", "ULDC"},
    "uniform": {"UIADD3", "UMOV", "ULOP3", "USHF", "UIMAD", "ULEA", "UISETP", "USEL", "UPRMT", "S2UR",
                "R2UR", "UFLO", "UPOPC", "USGXT", "UBMSK", "UIADD3", "UVIADD"},
    "move": {"MOV", "SEL", "S2R", "CS2R", "P2R", "R2P", "PLOP3", "VOTE", "VOTEU"},
    "barrier": {"BAR", "MEMBAR", "DEPBAR", "WARPSYNC", "BSSY", "BSYNC", "ERRBAR", "FENCE", "CCTL"},
    "control": {"BRA", "EXIT", "RET", "CALL", "JMP", "BRX", "NOP", "YIELD", "BPT", "WARPGROUP",
                "WARPGROUPSET", "ACQBULK", "ELECT", "NANOSLEEP", "ENDCOLLECTIVE"},
}
_CLASS_OF = {op: cls for cls, ops in _CLASSES.items() for op in ops}
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?")


def instruction_mix(sass):
    """Counts of SASS instructions by base opcode and by class (static, not executed counts)."""
    ops = Counter()
    for line in sass.splitlines():
        m = _SASS_LINE.search(line)
        if m:
            ops[m[1]] += 1
    classes = Counter()
    for op, n in ops.items():
        classes[_CLASS_OF.get(op, "other")] += n
    return {"total": sum(ops.values()), "by_class": dict(sorted(classes.items())),
            "by_opcode": dict(sorted(ops.items()))}


# driver API (GPU only) -----------------------------------------------------------------------

class CudaModule:
    """A PTX module loaded into the current CUDA context (torch's primary context)."""

    def __init__(self, ptx):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.module = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(ptx.encode())),
                    "cuModuleLoadData")
        self.functions = {}

    def _check(self, res, what):
        if res != 0:
            s = ctypes.c_char_p()
            self.cuda.cuGetErrorString(res, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {res} {s.value.decode() if s.value else ''}")

    def function(self, name):
        if name not in self.functions:
            f = ctypes.c_void_p()
            self._check(self.cuda.cuModuleGetFunction(ctypes.byref(f), self.module, name.encode()),
                        f"cuModuleGetFunction({name})")
            self.functions[name] = f
        return self.functions[name]

    def launch(self, name, grid, block, args, stream=0, shared=0):
        """args: ctypes values (c_void_p for pointers, c_int, c_float...)."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        self._check(self.cuda.cuLaunchKernel(self.function(name), g[0], g[1], g[2], b[0], b[1], b[2], shared,
                                             ctypes.c_void_p(stream), params, None), f"cuLaunchKernel({name})")
