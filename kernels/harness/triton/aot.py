"""`compile`: ahead-of-time compilation for an sm_90 GPU on a machine without one.

Triton kernels: the kernel's own launcher is called on shape-only fake tensors (the manifest's
bench shape) with the module's kernel swapped for a recorder, so the constexprs (block sizes,
flags) are exactly those the launcher would pass; the recorded call is then specialised as
Triton's JIT would (pointer alignment, integer divisibility) and compiled with `triton.compile`
for `GPUTarget("cuda", 90, 32)`. CUDA C++ kernels: NVRTC to PTX, then ptxas.
Both: `cuobjdump -sass` for the instruction mix, `-res-usage` and `ptxas -v` for registers,
spills, shared and local memory.

The candidate is untrusted code, and importing it runs code (decorator arguments, parameter
defaults, module-level statements; NVRTC reads what a CUDA source #includes). So everything that
touches the source (import, launcher call, Triton's compile; NVRTC) runs in a sandboxed worker
(aotworker.py, started by `compile_kernel` through sandbox.run_job, confined like the check's
workers, with a hard deadline on its process group); its PTX, cubin and launch facts come back
as files. The harness then runs ptxas -v and cuobjdump on those artifacts itself. The figures
are what the sandboxed compile produced: a candidate that deliberately forges its own PTX or
cubin forges its static figures (the GPU gate measures the real thing).
"""
import contextlib
import inspect
import io
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from . import branches, cudatools
from .arrays import ShapeOnly, launcher_of, meta_tensor, torch_of
from .autotune import describe_config
try:
    from ..loader import import_file   # in the repository: kernels.harness.loader
except ImportError:   # in the sandboxed compile: a copy in the flat kidiom_rt package
    from .loader import import_file

__all__ = ["compile_kernel", "CompileError", "run_worker", "launch_facts_triton", "cuda_params", "fake_call"]

HERE = Path(__file__).resolve().parent
# the worker's runtime (package kidiom_rt in its scratch directory): {name there: source}
RUNTIME = {"aot.py": HERE / "aot.py", "aotworker.py": HERE / "aotworker.py", "arrays.py": HERE / "arrays.py",
           "branches.py": HERE / "branches.py", "autotune.py": HERE / "autotune.py",
           "loader.py": HERE.parent / "loader.py", "cudatools.py": HERE / "cudatools.py"}
AS_LIMIT = 16 << 30      # address space of the compile (LLVM and ptxas run in it)


class CompileError(RuntimeError):
    """The candidate's source failed to import, launch or compile (its message, from the worker)."""


def FakeTensor(shape, dtype=np.float32):
    """Shape and dtype only, on "cuda": what a launcher sees at compile time."""
    return ShapeOnly(shape, dtype, device="cuda")


def shape_key(shape):
    return json.dumps({k: int(v) for k, v in shape.items()}, sort_keys=True)


def call_arglists(manifest, shapes):
    """{shape_key: arglist} of the public function's arguments at each shape, from the contract
    (harness side): what the sandboxed compile calls the launcher with."""
    from ..contract import load_contract
    op = load_contract(manifest)
    out = {}
    for shape in shapes:
        t = op.tensors(shape)
        out[shape_key(shape)] = [{"shape": list(t[n][0]), "dtype": t[n][1]} if isinstance(t[n], tuple)
                                 else {"value": t[n]} for n in op.args]
    return out


def case_arglists(manifest, shapes):
    """[arglist] of the public function's arguments in each of the check's cases at `shapes` (the
    CPU's, in order), as check.py's `_Case` varies them: the mode flags (bool scalar INPUTS, less
    FIXED) True and the OPTIONAL inputs present in even cases, the flags False and those inputs None
    in odd ones. The compile records each case's launch so, and the branches it reports are those
    the check's cases take."""
    from ..contract import load_contract
    op = load_contract(manifest)
    return [_variant_arglist(op, shape, i % 2 == 0) for i, shape in enumerate(shapes)]


def variant_arglists(manifest, shapes):
    """[[arglist]] per shape: each distinct setting of the mode flags and OPTIONAL inputs the
    cases use (both parities; one where the contract has neither), for the branches a GPU may take
    at that shape whatever flags its caller passes."""
    from ..contract import load_contract
    op = load_contract(manifest)
    out = []
    for shape in shapes:
        both = [_variant_arglist(op, shape, even) for even in (True, False)]
        out.append(both[:1] if both[0] == both[1] else both)
    return out


def _variant_arglist(op, shape, even):
    t = op.tensors(shape)
    args = []
    for n in op.args:
        v = t[n]
        if n in op.optional and not even:
            args.append({"value": None})
        elif isinstance(v, tuple):
            args.append({"shape": list(v[0]), "dtype": v[1]})
        elif isinstance(v, bool) and n in op.inputs and n not in op.fixed:
            args.append({"value": even})
        else:
            args.append({"value": v})
    return args


def fake_call(manifest, shape, torch=None, arglist=None):
    """Positional arguments of the public function at `shape` (shape-only tensors: a torch
    launcher's on torch's "meta" device; scalars), from the argument lists the harness sent
    (`manifest.calls`, see call_arglists), or `arglist`."""
    if arglist is None:
        arglist = manifest.calls.get(shape_key(shape))
    if arglist is None:
        raise ValueError(f"no argument list for the shape {shape}")
    if torch is not None:
        return [meta_tensor(torch, a["shape"], a["dtype"]) if "shape" in a else a.get("value") for a in arglist]
    return [FakeTensor(a["shape"], np.dtype(a["dtype"])) if "shape" in a else a.get("value") for a in arglist]


class _Recorder:
    def __init__(self, kernel):
        self.kernel = kernel
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def _unwrap(kernel):
    """(JITFunction, extra constexprs from heuristics/autotune, launch options, what was chosen of
    an autotuner: {configs, compiled, why} or None)."""
    extra_fns, options, tuned = [], {}, None
    k = kernel
    while not hasattr(k, "arg_names") or not hasattr(k, "params"):
        if hasattr(k, "values") and hasattr(k, "fn"):          # triton.heuristics
            extra_fns.append(k.values)
        elif hasattr(k, "configs") and hasattr(k, "fn"):       # triton.autotune: its first config
            cfg = k.configs[0]
            extra_fns.append({n: (lambda args, v=v: v) for n, v in cfg.kwargs.items()})
            options.update(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            tuned = {"configs": len(k.configs), "compiled": f"config 0 ({describe_config(cfg)})",
                     "why": "the GPU picks a config at run time by timing them all; these figures are the "
                            "first config's, and the check runs every config"}
        k = k.fn
    return k, extra_fns, options, tuned


def _specialise(jit_fn, bound):
    """Triton's JIT specialisation of bound arguments -> (signature, constexprs, attrs)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend
    signature, constexprs, attrs = {}, {}, {}
    for i, p in enumerate(jit_fn.params):
        val = bound[p.name]
        if p.is_constexpr or val is None:
            signature[p.name] = "constexpr"
            constexprs[(i,)] = val
            continue
        spec = native_specialize_impl(CUDABackend, val, False, not p.do_not_specialize,
                                      not p.do_not_specialize_on_alignment)
        ty, key = spec[0], spec[1]
        if isinstance(val, float):
            ty, key = "fp32", None
        if ty == "constexpr":
            signature[p.name] = "constexpr"
            constexprs[(i,)] = val
            continue
        signature[p.name] = ty
        if isinstance(key, str):
            attrs[(i,)] = CUDABackend.parse_attr(key)
    return signature, constexprs, attrs


_MODULES = {}


def _imported(source, package=None):
    """The source's module, imported once per process: each shape's launch is recorded on it.
    `package`: what its relative imports are relative to."""
    if source not in _MODULES:
        _MODULES[source] = import_file(source, package)
    return _MODULES[source]


@contextlib.contextmanager
def _other_launches_recorded(names):
    """Every other Triton kernel the launcher launches (FLA's launchers run several, some
    autotuned, some from other modules) is recorded by name and not run: on shape-only tensors
    there is nothing to compute, and an autotuner would ask for a GPU ("0 active drivers")."""
    from triton.runtime import autotuner, jit
    classes = [c for c in (jit.JITFunction, getattr(autotuner, "Autotuner", None),
                           getattr(autotuner, "Heuristics", None)) if c is not None]
    saved = {c: c.__dict__.get("run") for c in classes}

    def run(self, *args, **kwargs):
        fn = self
        while getattr(fn, "fn", None) is not None and not hasattr(fn, "arg_names"):
            fn = fn.fn
        names.append(getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "a kernel"))

    for c in classes:
        c.run = run
    try:
        yield
    finally:
        for c, orig in saved.items():
            if orig is None:
                del c.run
            else:
                c.run = orig


RECORD_BUDGET = 1 << 30   # bytes of real CPU tensors a launch may be recorded on


def _real_call(torch, call, error):
    """`call` on zero-filled CPU tensors, for a launcher that computes on its tensors' values
    (FLA's `repeat_interleave` without `output_size`, `.item()`), which shape-only tensors cannot
    do: re-raises `error` where it is no such failure, or where they would exceed RECORD_BUDGET."""
    if torch is None or "meta" not in str(error).lower():
        raise error
    tensors = [a for a in call if isinstance(a, torch.Tensor)]
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > RECORD_BUDGET:
        raise RuntimeError(f"{error} (the launcher computes on its tensors' values, which the shape-only tensors "
                           f"kidiom records a launch on do not have; real ones at these sizes would take {size:,} "
                           f"bytes, over the {RECORD_BUDGET:,} kidiom allows: smaller sizes in the manifest)") from error
    return [torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a for a in call]


def _record(manifest, source, shape, arglist=None):
    """The launcher's one launch of the entry kernel at `shape` (on shape-only tensors, or on zeros
    where the launcher needs values; `arglist`: a case's own arguments, else the shape's),
    specialised as Triton's JIT would: a namespace of the JIT function, the bound arguments, the
    fake call's arguments, the grid, the launch options and the specialisation."""
    from types import SimpleNamespace
    mod = _imported(source, getattr(manifest, "python_package", None))
    kernel = getattr(mod, manifest.entry)
    rec = _Recorder(kernel)
    setattr(mod, manifest.entry, rec)
    torch = torch_of(mod)
    call = fake_call(manifest, shape, torch, arglist)
    others = []
    try:
        launcher = launcher_of(mod, manifest.launcher)
        if launcher is None:
            raise AttributeError(f"the source defines no {manifest.launcher}()")
        with _other_launches_recorded(others):
            try:
                launcher(*call)
            except Exception as e:   # noqa: BLE001 - a launcher that computes on its tensors' values
                real = _real_call(torch, call, e)
                rec.calls.clear()
                others.clear()
                call = real
                launcher(*call)
    finally:
        setattr(mod, manifest.entry, kernel)
    if len(rec.calls) != 1:
        also = f" (it launched {', '.join(sorted(set(others)))} instead: at these sizes the launcher chooses " \
               "another kernel; the manifest's sizes must be ones where it launches the entry)" if others else ""
        raise RuntimeError(f"launcher made {len(rec.calls)} launches of {manifest.entry} at {dict(shape)}, "
                           f"expected 1{also}")
    grid, args, kwargs = rec.calls[0]
    jit_fn, extra_fns, options, tuned = _unwrap(kernel)
    bound = dict(zip(jit_fn.arg_names, args))
    bound.update({k: v for k, v in kwargs.items() if k in jit_fn.arg_names})
    for fns in extra_fns:
        for name, fn in fns.items():
            bound.setdefault(name, fn(bound))
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        if name in kwargs:
            options[name] = kwargs[name]
    for p in jit_fn.params:
        default = getattr(p, "default", inspect.Parameter.empty)
        if p.name not in bound and default is not inspect.Parameter.empty:
            bound[p.name] = default
    missing = [p.name for p in jit_fn.params if p.name not in bound]
    if missing:
        raise RuntimeError(f"launch of {manifest.entry} does not bind {', '.join(missing)}")
    signature, constexprs, attrs = _specialise(jit_fn, bound)
    return SimpleNamespace(jit_fn=jit_fn, bound=bound, call=call, grid=grid, options=options,
                           signature=signature, constexprs=constexprs, attrs=attrs, autotune=tuned)


def _record_and_compile(manifest, source, arch, shape):
    """`_record` at `shape`, compiled for `arch`: the same namespace with the compiled kernel, the
    grid as 3 ints, the compile's seconds and the ptxas log."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    r = _record(manifest, source, shape)
    t0 = time.perf_counter()
    with _ptxas_log() as log:
        r.compiled = triton.compile(ASTSource(fn=r.jit_fn, signature=r.signature, constexprs=r.constexprs,
                                              attrs=r.attrs), target=GPUTarget("cuda", arch, 32),
                                    options=r.options or None)
    r.seconds = time.perf_counter() - t0
    grid_v = r.grid(r.bound) if callable(r.grid) else r.grid
    r.grid = [int(x) for x in (tuple(grid_v) + (1, 1, 1))[:3]]
    r.log = log.getvalue()
    return r


def _specialization_key(r):
    """What makes two launches one compiled kernel: constexprs, signature, attributes, options."""
    return repr((sorted((k, repr(v)) for k, v in r.constexprs.items()), sorted(r.signature.items()),
                 sorted((k, repr(v)) for k, v in r.attrs.items()), sorted(r.options.items())))


def _frontend(r, arch):
    """Triton's frontend on one specialisation (the AST to Triton IR, where Python that is not
    Triton is refused), without the backend's passes: a tenth of a compile's time."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    src = ASTSource(fn=r.jit_fn, signature=r.signature, constexprs=r.constexprs, attrs=r.attrs)
    options = backend.parse_options(dict(r.options or {}, **src.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)


class NotTritonOnCpuPath(RuntimeError):
    """A specialisation the CPU's correctness runs does not pass Triton's frontend."""


def cpu_paths_triton(manifest, source, arch, shapes, compiled_key, calls=()):
    """Every specialisation the CPU's cases launch (`shapes`: manifest.shapes["cpu"]) through
    Triton's frontend for `arch`, each distinct one once (`compiled_key`: the bench shape's,
    already compiled whole). Under the interpreter a branch that only the CPU's constexprs take
    runs as Python, so a path the GPU compile never sees could hold code no GPU would run; here it
    must be Triton too. `calls`: each case's arguments (case_arglists: its flags and OPTIONAL
    inputs), else the shape's. Returns [{"shape", "constexprs", "checked"}]; raises
    NotTritonOnCpuPath with the construct and its line."""
    seen, out = {compiled_key}, []
    for i, shape in enumerate(shapes):
        r = _record(manifest, source, shape, calls[i] if i < len(calls) else None)
        key = _specialization_key(r)
        new = key not in seen
        if new:
            seen.add(key)
            try:
                _frontend(r, arch)
            except Exception as e:  # noqa: BLE001 - the frontend's refusal, with its location
                raise NotTritonOnCpuPath(f"not Triton on the path the CPU runs: {_frontend_error(e, r.jit_fn)} "
                                         f"(CPU case {shape_key(shape)})") from None
        out.append({"shape": shape, "checked": new, "constexprs": _named_constexprs(r)})
    return out


def _named_constexprs(r):
    """A recorded launch's constexpr values by parameter name (the plain ones)."""
    return {r.jit_fn.arg_names[k[0]]: v for k, v in r.constexprs.items()
            if isinstance(v, (int, float, bool, str)) or v is None}


def _frontend_error(e, jit_fn):
    """A frontend error as one line: its last line (the construct) and the line of the file it is
    on (Triton's "at 34:8:" counts from the kernel's `def`)."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    what = lines[-1][:200] if lines else type(e).__name__
    node = getattr(e, "node", None)
    first = _def_line(jit_fn)
    if getattr(node, "lineno", None) and first:
        return f"{what}, line {first + node.lineno - 1}"
    return what


def _def_line(jit_fn):
    """The file's line of the kernel's `def` (Triton 3.9 keeps it; 3.6 has its decorators' start)."""
    n = getattr(jit_fn, "def_file_line_number", None)
    if isinstance(n, int):
        return n
    raw, start = getattr(jit_fn, "raw_src", None), getattr(jit_fn, "starting_line_number", None)
    if raw and isinstance(start, int):
        for i, line in enumerate(raw):
            if line.lstrip().startswith("def "):
                return start + i
    return None


def compile_triton(manifest, source, arch, shape=None):
    r = _record_and_compile(manifest, source, arch, manifest.shapes["bench"] if shape is None else shape)
    md = r.compiled.metadata
    info = {
        "constexprs": {r.jit_fn.arg_names[k[0]]: v for k, v in r.constexprs.items()
                       if isinstance(v, (int, float, bool, str)) or v is None},
        "signature": {k: v for k, v in r.signature.items() if v != "constexpr"},
        "grid": r.grid,
        "num_warps": md.num_warps,
        "num_stages": getattr(md, "num_stages", None),
        "shared_bytes": md.shared,
        "compile_seconds": round(r.seconds, 3),
    }
    if _PTXAS_INFO.search(r.log):
        info["ptxas_log"] = r.log[-4000:]
    if r.autotune is not None:
        info["autotune"] = r.autotune
    if manifest.shapes.get("cpu"):
        info["cpu_paths"] = cpu_paths_triton(manifest, source, arch, manifest.shapes["cpu"], _specialization_key(r),
                                             getattr(manifest, "case_calls", None) or ())
        # a GPU shape reaches what its launch reaches under any setting of the flags the cases vary
        gpu, owner = [], []
        variants = getattr(manifest, "gpu_calls", None) or []
        for j, shape in enumerate(manifest.shapes.get("gpu", [])):
            for arglist in [None, *(variants[j] if j < len(variants) else ())]:
                try:
                    gpu.append(_named_constexprs(_record(manifest, source, shape, arglist)))
                except Exception:  # noqa: BLE001 - a setting the launcher refuses at this shape reaches nothing
                    if arglist is None:
                        raise
                    continue
                owner.append(j)
        arms = branches.coverage(r.jit_fn, [p["constexprs"] for p in info["cpu_paths"]], gpu)
        for arm in arms:
            arm["gpu"] = sorted({owner[i] for i in arm["gpu"]})
        info["branches"] = arms
    return r.compiled.asm["ptx"], r.compiled.asm["cubin"], info


def _divisible_16(attrs, i):
    """Whether the specialisation marked argument i as divisible by 16 (Triton's 'D')."""
    for pair in attrs.get((i,), ()):
        if len(pair) == 2 and pair[0] == "tt.divisibility" and pair[1] == 16:
            return True
    return False


def launch_facts_triton(manifest, source, arch, shape):
    """`spec`'s facts of one shape (triton/spec.py makes the launch spec of them): the launch the
    launcher records and the compiled metadata, the kernel's non-constexpr parameters in order,
    each tensor named by its position in the op's call (`arg`: the call's own tensors, found by
    identity; never the kernel's parameter names), then Triton's two scratch pointers.
    Returns (cubin bytes, facts)."""
    r = _record_and_compile(manifest, source, arch, shape)
    md = r.compiled.metadata
    params = []
    for i, p in enumerate(r.jit_fn.params):
        ty = r.signature.get(p.name, "constexpr")
        if ty == "constexpr":
            continue
        val = r.bound[p.name]
        if ty.startswith("*"):
            arg = next((j for j, t in enumerate(r.call) if t is val), None)
            if arg is None:
                raise RuntimeError(f"pointer argument {p.name} of {manifest.entry} is not one of the call's tensors "
                                   "(the device gate passes the contract's buffers only)")
            params.append({"kind": "tensor", "param": p.name, "arg": arg, "dtype": ty[1:],
                           "align": 16 if _divisible_16(r.attrs, i) else int(val.element_size())})
        elif ty in ("i32", "i64"):
            params.append({"kind": "int", "name": p.name, "value": int(val), "bits": int(ty[1:]),
                           "divisible_by_16": _divisible_16(r.attrs, i)})
        elif ty == "fp32":
            params.append({"kind": "float", "name": p.name, "value": float(val)})
        else:
            raise RuntimeError(f"argument {p.name} of {manifest.entry} has type {ty}, which a launch spec cannot pass")
    params += [{"kind": "scratch", "which": "global"}, {"kind": "scratch", "which": "profile"}]
    desc = getattr(md, "tensordesc_meta", None) or []
    facts = {
        "kernel": md.name, "grid": r.grid, "num_warps": int(md.num_warps), "num_ctas": int(getattr(md, "num_ctas", 1)),
        "shared_bytes": int(md.shared),
        "cooperative": bool(getattr(md, "launch_cooperative_grid", False)),
        "pdl": bool(getattr(md, "launch_pdl", False)), "tensor_descriptors": len(desc),
        "global_scratch_bytes": int(getattr(md, "global_scratch_size", 0) or 0),
        "global_scratch_align": int(getattr(md, "global_scratch_align", 1) or 1),
        "profile_scratch_bytes": int(getattr(md, "profile_scratch_size", 0) or 0),
        "params": params, "compile_seconds": round(r.seconds, 3),
    }
    return r.compiled.asm["cubin"], facts


# `extern "C" __global__ void NAME(...)`: the parameter list of a CUDA entry
_CUDA_SCALARS = {"int": ("int", 32), "int32_t": ("int", 32), "unsigned": ("int", 32), "unsigned int": ("int", 32),
                 "long long": ("int", 64), "int64_t": ("int", 64), "long": ("int", 64), "float": ("float", 32)}
_CUDA_POINTEES = {"float": "fp32", "double": "fp64", "int": "i32", "int32_t": "i32", "long long": "i64",
                  "int64_t": "i64", "__half": "fp16", "__nv_bfloat16": "bf16", "unsigned char": "u8"}


def cuda_params(text, entry):
    """The parameters of the `extern "C" __global__` entry `entry` of a CUDA source, in order:
    [{"kind": "tensor", "param", "dtype"} | {"kind": "int", "name", "bits"} | {"kind": "float", "name"}].
    Raises RuntimeError for a type a launch spec cannot pass."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    m = re.search(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
                  r'(?:__launch_bounds__\s*\([^)]*\)\s*)?' + re.escape(entry) + r"\s*\(([^)]*)\)", text)
    if m is None:
        raise RuntimeError(f'no extern "C" __global__ void {entry}(...) in the source')
    out = []
    for raw in (a.strip() for a in m[1].split(",")):
        if not raw:
            continue
        words = re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", " ", raw)
        pm = re.fullmatch(r"\s*(.*?)\s*(\*?)\s*([A-Za-z_]\w*)\s*", words)
        if pm is None:
            raise RuntimeError(f"cannot read parameter {raw!r} of {entry}")
        base, star, name = " ".join(pm[1].split()), pm[2], pm[3]
        if star:
            if base not in _CUDA_POINTEES:
                raise RuntimeError(f"parameter {name} of {entry}: pointer to {base}, which a launch spec cannot name")
            out.append({"kind": "tensor", "param": name, "dtype": _CUDA_POINTEES[base]})
        elif base in _CUDA_SCALARS:
            kind, bits = _CUDA_SCALARS[base]
            out.append({"kind": kind, "name": name, "bits": bits} if kind == "int" else {"kind": kind, "name": name})
        else:
            raise RuntimeError(f"parameter {name} of {entry} has type {base}, which a launch spec cannot pass")
    return out


# ptxas -v's summary line: a log that has it is the whole report the static figures read
_PTXAS_INFO = re.compile(r"Used \d+ registers")


@contextlib.contextmanager
def _ptxas_log():
    """Triton's own ptxas run already has -v; its log is printed when the knob asks for it.
    Captured here so the harness need not run ptxas a second time for the spill report (about a
    third of a compile). A Triton without the knob yields an empty log and the harness runs
    ptxas -v itself."""
    import triton
    buf = io.StringIO()
    nvidia = getattr(getattr(triton, "knobs", None), "nvidia", None)
    if nvidia is None or not hasattr(nvidia, "dump_ptxas_log"):
        yield buf
        return
    before = nvidia.dump_ptxas_log
    nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(buf):
            yield buf
    finally:
        nvidia.dump_ptxas_log = before


def compile_cuda(manifest, source, arch):
    ptx, log = cudatools.nvrtc_compile(Path(source).read_text(), name=Path(source).name, arch=arch)
    if f".entry {manifest.entry}(" not in ptx and f".entry {manifest.entry} (" not in ptx:
        raise RuntimeError(f"entry point {manifest.entry} not found in the PTX (is it extern \"C\" __global__?)")
    return ptx, {"nvrtc_version": cudatools.nvrtc_version(), "nvrtc_log": log.strip()}


def checked_shapes(manifest):
    """The shapes of the CPU's correctness cases, whose specialisations the compile checks too, then
    the GPU's, whose constexprs decide the branches the GPU takes (branches.py)."""
    return [dict(s) for s in manifest.shapes.get("cpu", [])] + [dict(s) for s in manifest.shapes.get("gpu", [])]


def _tail(text, n=1500):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def compile_sandboxed(manifest, source, arch, deadline):
    """The source-touching half of a compile, in a sandboxed worker (aotworker.py):
    (ptx, cubin or None, info, sandbox report). Raises CompileError (the source's failure),
    sandbox.JobTimeout (past `deadline`), RuntimeError (the worker died)."""
    def collect(read, result):
        ptx = read("out/kernel.ptx", False)
        cubin = read("out/kernel.cubin", True) if manifest.language == "triton" else None
        return ptx, cubin, result["info"]
    extra = {"cpu_shapes": [dict(s) for s in manifest.shapes.get("cpu", [])],
             "gpu_shapes": [dict(s) for s in manifest.shapes.get("gpu", [])]} if manifest.language == "triton" else {}
    (ptx, cubin, info), report = run_worker(manifest, source, arch, deadline, extra, collect,
                                            lambda r: isinstance(r.get("info"), dict))
    return ptx, cubin, info, report


def run_worker(manifest, source, arch, deadline, job_extra, collect, complete, what="the ahead-of-time compile"):
    """Runs aotworker.py on a copy of `source` in the sandbox, its job the manifest's facts plus
    `job_extra`; returns (collect(read, result), sandbox report), where `read(rel, binary)` reads
    a file the worker wrote and `result` is its result.json, which `complete(result)` accepts.
    Raises CompileError (the source's failure), sandbox.JobTimeout (past `deadline`),
    RuntimeError (the worker died or left no complete result)."""
    from .. import sandbox
    from ..project import import_hint, install_packages, project_packages
    root = Path(tempfile.mkdtemp(prefix="kidiom-aot-"))
    try:
        scratch = root / "compile"
        scratch.mkdir(mode=0o700)
        sandbox.install_runtime(scratch, RUNTIME)
        (scratch / "rt" / "src").mkdir()
        dst = scratch / "rt" / "src" / f"candidate{Path(source).suffix}"
        shutil.copyfile(source, dst)
        path = [str(scratch / "rt")]
        packages = project_packages(manifest, source) if manifest.language == "triton" else []
        if packages:   # the kernel's own project, without its manifest and contract
            path.append(str(install_packages(scratch / "rt" / "pkgs", packages, manifest)))
        out_dir, _ = sandbox.writable_dirs(scratch)
        job = {"name": manifest.name, "op": manifest.op, "entry": manifest.entry, "launcher": manifest.launcher,
               "language": manifest.language, "shape": manifest.shapes["bench"], "arch": arch, "source": str(dst),
               "out_dir": str(out_dir), "package": getattr(manifest, "python_package", None), **job_extra}
        if manifest.language == "triton":
            job["calls"] = call_arglists(manifest, [manifest.shapes["bench"]] + list(job_extra.get("shapes", []))
                                         + list(job_extra.get("cpu_shapes", [])) + list(job_extra.get("gpu_shapes", [])))
            job["case_calls"] = case_arglists(manifest, job_extra.get("cpu_shapes", []))
            job["gpu_calls"] = variant_arglists(manifest, job_extra.get("gpu_shapes", []))
        (scratch / "job.json").write_text(json.dumps(job))
        cfg = {"module": "kidiom_rt.aotworker", "path": path, "args": [str(scratch / "job.json")]}
        env = {"TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")}
        run = sandbox.run_job(scratch, cfg, deadline, what, env_extra=env,
                              address_space=AS_LIMIT,
                              python_note="isolated mode (-I); importable: the source and the compile's runtime "
                                          "(kidiom_rt), never the reference or the checker")
        try:
            result = json.loads(sandbox.read_file(scratch, "out/result.json", limit=16 << 20))
        except (OSError, ValueError):
            result = None
        if not isinstance(result, dict) or not ("error" in result or complete(result)):
            death = sandbox.death_text(run["rc"], run["exit"]) or "exited without a result"
            raise RuntimeError(f"{what}'s worker {death}: {_tail(run['stderr'])}")
        if "error" in result:
            raise CompileError(f"{import_hint(result['error'])}\n{_tail(str(result.get('traceback')), 1200)}")
        return collect(lambda rel, binary: sandbox.read_file(scratch, rel, binary=binary), result), run["sandbox"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


# The sandboxed half's results, cached by what it reads. Each compile runs with a fresh Triton
# cache (HOME is the worker's work/): a cache shared between candidates would be one a candidate
# can write for the next. This cache is written by the harness only, from what the compile of
# exactly these bytes produced, so an entry is only ever that source's own result.
# 3: the CPU cases' specialisations through the frontend too (cpu_paths); 4: NVRTC's version in the key;
# 5: each CPU case's own flags and OPTIONAL inputs (case_arglists), a GPU shape's under both;
# 6: a launch recorded on zero-filled tensors where shape-only ones fail, relative imports resolved
AOT_CACHE_VERSION = 6


def cache_root():
    from ..cachedir import content_cache
    return content_cache("aot")


def _cache_key(manifest, source, arch):
    import hashlib
    h = hashlib.sha256(f"aot {AOT_CACHE_VERSION} {manifest.name} {arch}".encode())
    try:
        import triton
        h.update(triton.__version__.encode())
    except Exception:  # noqa: BLE001 - no Triton: the compile will say so
        h.update(b"no triton")
    for f in [Path(manifest.path)] + list(RUNTIME.values()):
        h.update(b"\0" + f.name.encode() + b"\0" + f.read_bytes())
    h.update(b"\0source\0" + Path(source).read_bytes())
    from ..project import project_digest
    h.update(b"\0project\0" + project_digest(manifest, source).encode())
    if manifest.language == "triton":   # the call the launcher gets comes from the contract
        h.update(b"\0calls\0" + json.dumps(call_arglists(manifest, [manifest.shapes["bench"]] + checked_shapes(manifest)))
                 .encode())
        h.update(b"\0cases\0" + json.dumps([case_arglists(manifest, manifest.shapes.get("cpu", [])),
                                             variant_arglists(manifest, manifest.shapes.get("gpu", []))]).encode())
    else:   # CUDA's PTX is NVRTC's, a wheel of its own beside Triton's
        try:
            h.update(b"\0nvrtc\0" + cudatools.nvrtc_version().encode())
        except Exception:  # noqa: BLE001 - no NVRTC: the compile will say so
            h.update(b"\0no nvrtc")
    return h.hexdigest()


def _cached(key, language):
    d = cache_root() / key
    try:
        info = json.loads((d / "info.json").read_text())
        ptx = (d / "kernel.ptx").read_text()
        cubin = (d / "kernel.cubin").read_bytes() if (d / "kernel.cubin").exists() else None
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("info"), dict) or not ptx or \
            (language == "triton" and not cubin):
        return None   # absent, or damaged: compiled again
    return ptx, cubin, info["info"], "cached (compiled in the sandbox)"


def _store(key, ptx, cubin, info, sandbox_report):
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".aot-", dir=root))
    except OSError:
        return   # a read-only cache only costs time
    try:
        (tmp / "kernel.ptx").write_text(ptx)
        if cubin is not None:
            (tmp / "kernel.cubin").write_bytes(cubin)
        (tmp / "info.json").write_text(json.dumps({"info": info, "sandbox": sandbox_report}, default=str))
        os.rename(tmp, root / key)     # atomic; another compile of the same bytes may have won
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _figures(manifest, ptx, cubin, log, target):
    """What the harness itself reads from a compile's artifacts, with CUDA's tools of the Triton
    wheel: {"cubin", "sass", "resources", "log"}. Triton's cubin is the compile's; a CUDA kernel's
    is assembled here from its PTX. The spill report is Triton's own ptxas -v log when the compile
    captured it (`log`), else ptxas -v on the PTX here (Triton's cubin comes from the same ptxas)."""
    if manifest.language == "triton":
        if log is None or not _PTXAS_INFO.search(log):
            _, log = cudatools.ptxas(ptx, arch=target)
    else:
        cubin, log = cudatools.ptxas(ptx, arch=target)
    return {"cubin": cubin, "sass": cudatools.cuobjdump_sass(cubin),
            "resources": cudatools.resource_usage(cubin, log), "log": log, "tools": _tools(target)}


def _tools(target):
    """Which assembler and disassembler read the artifacts (TRITON_PTXAS_PATH can move ptxas);
    None for one that is not there (a Triton compile whose own ptxas log was captured needs none)."""
    num = int("".join(c for c in target if c.isdigit()))
    found = []
    for name, arch in (("ptxas", num), ("cuobjdump", num)):
        try:
            found.append(cudatools.tool(name, arch))
        except FileNotFoundError:
            found.append(None)
    return found


# An entry's figures (SASS, resource usage, the ptxas log) beside its artifacts: a function of the
# entry's bytes and of the tools that read them, whose paths the figures keep. Disassembling a
# cubin costs more than the rest of a cached compile (nvdisasm: 30 of the suite's CPU seconds).
_FIGURES = ("figures.cubin", "figures.sass", "figures.json")


def _cached_figures(key, target):
    d = cache_root() / key
    try:
        meta = json.loads((d / "figures.json").read_text())
        figures = {"cubin": (d / "figures.cubin").read_bytes(), "sass": (d / "figures.sass").read_text()}
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("resources"), dict) or \
            not isinstance(meta.get("log"), str) or not figures["cubin"] or not figures["sass"]:
        return None   # absent or damaged: read from the artifacts again
    if meta.get("tools") != _tools(target):
        return None   # other tools: their own figures
    return {**figures, "resources": meta["resources"], "log": meta["log"]}


def _store_figures(key, figures):
    """Each file by an atomic rename, the JSON last: a reader that finds it finds the others."""
    d = cache_root() / key
    if not d.is_dir():
        return   # the entry itself was not stored (a read-only cache)
    payloads = {"figures.cubin": figures["cubin"], "figures.sass": figures["sass"].encode(),
                "figures.json": json.dumps({k: figures[k] for k in ("resources", "log", "tools")}).encode()}
    for name in _FIGURES:
        try:
            fd, tmp = tempfile.mkstemp(prefix=".fig-", dir=d)
            with os.fdopen(fd, "wb") as f:
                f.write(payloads[name])
            os.replace(tmp, d / name)
        except OSError:
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
            return


def compile_kernel(manifest, source=None, arch=90, keep=None, deadline=None):
    """`compile`'s result object (see the module doc). `deadline`: time.monotonic() by which the
    sandboxed half must end (default: 30 minutes)."""
    source = str(Path(source) if source else manifest.source_path)
    if not Path(source).exists():
        raise FileNotFoundError(f"source file {source} does not exist")
    target = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
    out = {"arch": target, "shape": manifest.shapes["bench"], "language": manifest.language}
    key = _cache_key(manifest, source, arch)
    hit = _cached(key, manifest.language)
    if hit is not None:
        ptx, cubin, info, sandbox_report = hit
    else:
        ptx, cubin, info, sandbox_report = compile_sandboxed(manifest, source, arch,
                                                             deadline or time.monotonic() + 1800)
        _store(key, ptx, cubin, info, sandbox_report)
    log = info.pop("ptxas_log", None) if isinstance(info.get("ptxas_log"), str) else None
    figures = _cached_figures(key, target) if hit is not None else None
    if figures is None:
        figures = _figures(manifest, ptx, cubin, log, target)
        _store_figures(key, figures)
    cubin, sass = figures["cubin"], figures["sass"]
    out["triton" if manifest.language == "triton" else "cuda"] = info
    out["resources"] = dict(figures["resources"])
    if "shared_bytes" in out.get("triton", {}):
        out["resources"]["shared_dynamic_bytes"] = out["triton"]["shared_bytes"]
    out["instructions"] = cudatools.instruction_mix(sass)
    out["ptxas_log"] = figures["log"].strip()[-2000:]
    out["ptx_lines"] = ptx.count("\n")
    out["sandbox"] = sandbox_report
    if keep:
        os.makedirs(keep, exist_ok=True)
        stem = manifest.name.replace(".", "_")
        Path(keep, stem + ".ptx").write_text(ptx)
        Path(keep, stem + ".cubin").write_bytes(cubin)
        Path(keep, stem + ".sass").write_text(sass)
        out["kept"] = keep
    return out
