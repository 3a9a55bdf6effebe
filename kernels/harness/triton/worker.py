"""Worker of the Triton / CUDA `check` (worker_client.py starts it in the sandbox of ../sandbox/): the
only process that imports or runs a candidate's code.

It runs from a copy in its scratch directory, as the package `kidiom_rt` (this file as
`worker.py`, arrays.py, backend.py, interp.py, and for a CUDA kernel kernels/harness/cuda/emulation.py
as `cuda_launch.py` and cudatools.py); the importable tree holds nothing else of the harness: no
reference, no checking code, no manifest, no tolerance. Kernel sources are copies under `src/`.
Imports: the standard library, numpy, triton (torch on a GPU) and `kidiom_rt`.

Protocol. `worker.json` (its path is the argument; written by the harness before the start)
names the two pipe fds, the device, the TF32 emulation flag, the kernels to host and the input
(`in_dir`, read-only) and result (`out_dir`) directories. Requests are JSON lines on `req_fd`;
every message to the harness is one JSON line on `resp_fd` (never stdout or stderr, which the
candidate may print to): `{"ready": {...}}`, or `{"load_error": {...}}` / `{"needs_gpu": {...}}`
and exit; then per request `{"start": id}` and `{"done": id, "sets": [...]}`. Arrays travel as
.npy files: inputs `<in_dir>/<id>/s<j>_<name>.npy` (written by the harness), results
`<out_dir>/<id>/r<j>_<name>.npy` (the whole buffer: the elements, then the sentinel tail) and, on a CPU,
`r<j>_<name>.prov.npy` (packed bits: no host code wrote the element during the call). A request
with `stacked` (a list of names) reads those inputs of every set from one file
`<in_dir>/<id>/stack_<name>.npy` ([sets, ...]: row j is set j's), and writes every result of every
set to one file `<out_dir>/<id>/r_<name>.npy` ([sets, buffer]; `r_<name>.prov.npy` likewise), when
the request ends: for thousands of small calls (the precision gate's drift).

A `call` request runs one hosted kernel's public function on `sets` input sets in turn, on the
SAME tensors: set j's inputs are copied into the tensors of set 0 (an in/out tensor without a
file in set j keeps its contents: a sequence of decode steps), outputs are poisoned again (NaN on
set 0; after it NaN, a large finite value or the last set's results, drawn per set: `output_fill`)
and every sentinel tail restored. Per set it reports the launches (of the entry kernel, and of
every kernel), the exception if any, digests of every read-only input after the call (elements
and tail separately), and on a CPU the out-of-bounds accesses; it never judges anything.

Optional keys of a `call` request (the harness passes them in the request's layout):
`programs` `{order: natural|reversed|shuffle, seed, sample}`: run every launch's programs in that
order, and with `sample` only that many of each grid (interp.py; for a CUDA kernel the emulation
orders blocks and the threads of each block, and runs every one); a call that ran a sample also
writes `r<j>_<name>.kw.npy` (packed bits: a kernel store wrote the element). `record`: a list of
argument lists (`{shape, dtype}` or null per argument): the public function is called on
shape-only tensors and every launch is recorded instead of run (a GPU shape's constexprs, without
its memory); its sets are `{launched, exception}`. On a CPU a call's set also reports `launched`
(per launch: kernel, constexprs, grid), `atomics` and `programs` `{ran, of}`. `profile` `{files}`
(a Triton kernel on a CPU): the call's work is counted per line of those sources (workprofile.py)
and written to `r<j>_profile.json`.
"""
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import sys
import time
import traceback

import numpy as np

from . import autotune
from .arrays import NpTensor, launcher_of, meta_tensor, torch_of

EXIT_WORKER_BUG = 70    # the worker's own machinery failed
EXIT_LOAD_FAILED = 71   # a kernel source failed to load
EXIT_NEEDS_GPU = 72     # a CUDA kernel that cannot be emulated on a CPU

_RESP = None
COUNTS = {}             # id(kernel object) -> launches
TOTAL = [0]             # launches of every Triton kernel
CHECKPOINT = [lambda: None]   # before and after every launch: see host writes (CPU)
ADOPT = [None]          # at every launch: the launcher's own allocations it passes (CPU)
KERNEL_CLASSES = ()
RECORDING = [None]      # a list while a `record` request runs: launches are recorded, not run
LAUNCHED = []           # this call's launches (kernel, constexprs, grid): interpreted kernels only
FACTS = [False]         # whether launches are described (CPU: the interpreter's kernels)
MAX_LAUNCHED = 64       # launches described per call


# What an output holds before a call. The first set's outputs are NaN (an element the kernel does
# not write stays non-finite, and says so); each later set's are, drawn afresh, NaN, a large
# finite value or the last call's results left in place (what a GPU's reused buffer holds): a
# kernel that writes only where the buffer holds what the harness put there is caught.
LARGE_FILL = np.float32(3.0e38)
_FILLS = __import__("random").SystemRandom()


def output_fill(j):
    return "nan" if j == 0 else _FILLS.choice(("nan", "large", "stale"))


def send(msg):
    os.write(_RESP, (json.dumps(msg, default=_default) + "\n").encode())


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def digest(a):
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def describe_exception(e):
    return {"type": type(e).__name__, "message": str(e)[:1000],
            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=6))[-2000:]}


# launches -----------------------------------------------------------------------------------------

def hook_triton(interpreted):
    """Count every launch of every Triton kernel: `kernel[grid](...)` (and autotuners, which
    call it) goes through the class's `run`."""
    global KERNEL_CLASSES
    from triton.runtime import jit
    classes = [jit.JITFunction]
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    for cls in classes:
        cls.run = _counting(cls.run)
    KERNEL_CLASSES = tuple(classes)


def _counting(orig):
    def run(self, *args, **kwargs):
        if kwargs.get("warmup", False):
            return orig(self, *args, **kwargs)
        if RECORDING[0] is not None:
            RECORDING[0].append(launch_facts(self, args, kwargs))
            return None
        if FACTS[0] and len(LAUNCHED) < MAX_LAUNCHED:
            LAUNCHED.append(launch_facts(self, args, kwargs))
        COUNTS[id(self)] = COUNTS.get(id(self), 0) + 1
        TOTAL[0] += 1
        if ADOPT[0] is not None:
            ADOPT[0](_passed(self, args, kwargs))
        CHECKPOINT[0]()
        try:
            return orig(self, *args, **kwargs)
        finally:
            CHECKPOINT[0]()
    run.__wrapped__ = orig
    return run


def _passed(kernel, args, kwargs):
    """(parameter name, value) of a launch's arguments."""
    code = getattr(getattr(kernel, "fn", kernel), "__code__", None)
    names = code.co_varnames[:code.co_argcount] if code is not None else ()
    out = [(names[i] if i < len(names) else f"argument {i}", a) for i, a in enumerate(args)]
    return out + list(kwargs.items())


def _is_constexpr(annotation):
    try:
        from triton.runtime.jit import _normalize_ty
        return _normalize_ty(annotation) == "constexpr"
    except Exception:  # noqa: BLE001 - another Triton: the annotation's own name
        name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        return name.rsplit(".", 1)[-1] == "constexpr"


def _plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)[:80]


def launch_facts(kernel, args, kwargs):
    """What a launch specialises on: the kernel's name, the values of its constexpr parameters
    (defaults included) and the grid."""
    fn = getattr(kernel, "fn", kernel)
    facts = {"kernel": getattr(fn, "__name__", "?"), "constexprs": {}, "grid": None}
    try:
        sig = inspect.signature(fn)
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters})
        bound.apply_defaults()
        ann = inspect.get_annotations(fn)
        facts["constexprs"] = {n: _plain(v) for n, v in bound.arguments.items()
                               if n in ann and _is_constexpr(ann[n])}
        # the runtime sizes it passes (what a comparison on them reads at this shape: gpu_sides.py)
        facts["scalars"] = {n: v for n, v in bound.arguments.items() if n not in facts["constexprs"]
                            and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if isinstance(kwargs.get("num_warps"), int):
            facts["num_warps"] = kwargs["num_warps"]
        grid = kwargs.get("grid")
        grid = grid(dict(bound.arguments)) if callable(grid) else grid
        facts["grid"] = [int(g) for g in grid]
    except Exception as e:  # noqa: BLE001 - described as far as it goes
        facts["error"] = f"{type(e).__name__}: {e}"[:200]
    return facts


def _fake(a, ShapeOnly, torch=None):
    """One argument of a recorded call: a shape-only tensor (a torch launcher's: on torch's "meta"
    device, which has shapes and no memory), a scalar's value, or None."""
    if a is None:
        return None
    if "shape" not in a:
        return a.get("value")
    if torch is not None:
        return meta_tensor(torch, a["shape"], a["dtype"])
    return ShapeOnly(a["shape"], a["dtype"])


def run_record(kern, req):
    """Call the public function on shape-only tensors per argument list, recording the launches."""
    from .arrays import ShapeOnly
    autotune.choose(req.get("autotune"))
    sets = []
    for arglist in req["record"]:
        RECORDING[0] = []
        exc = None
        try:
            kern.fn(*[_fake(a, ShapeOnly, kern.torch) for a in arglist])
        except BaseException as e:  # noqa: BLE001 - the candidate's, reported
            exc = describe_exception(e)
        finally:
            launched, RECORDING[0] = RECORDING[0], None
        sets.append({"launched": launched[:MAX_LAUNCHED], "exception": exc})
    return sets


def kernel_object(obj):
    """The JIT (or interpreted) function under an autotuner / heuristics wrapper."""
    for _ in range(10):
        if obj is None or isinstance(obj, KERNEL_CLASSES):
            return obj
        obj = getattr(obj, "fn", None)
    return None


class LoadError(Exception):
    pass


def hide_the_interpreter():
    """After the kernels are loaded (their decorators made interpreted functions), the
    environment a kernel or launcher reads at run time is a GPU process's: no TRITON_INTERPRET.
    A candidate that behaves one way under the interpreter and another on a GPU then shows its
    GPU behaviour to the CPU's checks. Triton's own code still asks its knob, which is set here
    rather than read from the variable (the static gate refuses `triton.knobs` in a kernel)."""
    try:
        from triton import knobs
        knobs.runtime.interpret = True
    except (ImportError, AttributeError):   # no knobs (older Triton): it reads the variable
        return
    os.environ.pop("TRITON_INTERPRET", None)


def watched_sides(langs):
    """{line: [true seen, false seen]} of the watched comparisons so far (interp.py for Triton,
    the emulation for CUDA)."""
    out = {}
    if "triton" in langs:
        from .interp import SIDES
        out.update({str(line): list(seen) for line, seen in SIDES.items()})
    if "cuda" in langs:
        from . import cuda_launch
        out.update({str(line): seen for line, seen in cuda_launch.sides().items()})
    return out


def import_file(path, name, lines=(), package=None):
    """The module at `path`; `lines`: the changed lines whose running is recorded (coverage.py):
    its launchers and helpers compiled with markers before them (its @triton.jit functions get
    theirs when the interpreter rewrites them). `package`: what its relative imports are
    relative to."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if package:
        mod.__package__ = package
    sys.modules[name] = mod
    if not lines:
        spec.loader.exec_module(mod)
        return mod
    import ast

    from . import coverage
    marker = "_kidiom_line_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    with open(path, encoding="utf-8") as f:
        tree = coverage.Marker(lines, marker).visit(ast.parse(f.read(), filename=str(path)))
    ast.fix_missing_locations(tree)
    mod.__dict__[marker] = coverage.record
    exec(compile(tree, str(path), "exec"), mod.__dict__)   # noqa: S102 - the kernel's own file, as exec_module runs it
    return mod


class Hosted:
    """One kernel this worker runs: its public function and its launch counters."""

    def __init__(self, key, spec, on_gpu, backend):
        self.entry = spec["entry"]
        # what the backend observes of this kernel's memory accesses: the interpreter sees every
        # load and store of a Triton kernel; a CUDA kernel (native code, emulated or not) none
        self.observes = dict(backend.observes) if spec["language"] == "triton" else \
            {"out_of_bounds": False, "provenance": False}
        if spec["language"] == "triton":
            if spec.get("sides") and not on_gpu:   # the comparisons whose sides the check counts
                from .interp import install_side_watch
                install_side_watch(spec["file"], spec["sides"])
            lines = spec.get("lines") if not on_gpu else None
            if lines:   # the changed lines whose running the check counts (coverage.py)
                from .interp import install_line_watch
                install_line_watch(spec["file"], lines)
            mod = import_file(spec["file"], f"kidiom_kernel_{key}", lines or (), spec.get("package"))
            launcher = launcher_of(mod, spec["launcher"])
            if launcher is None:
                raise LoadError(f"the source defines no {spec['launcher']}()")
            if not hasattr(mod, self.entry):
                raise LoadError(f"the source defines no kernel {self.entry}")
            obj = kernel_object(getattr(mod, self.entry))
            if obj is None:
                raise LoadError(f"{self.entry} is not a @triton.jit kernel")
            self.fn = launcher
            # a torch launcher (FLA's, SGLang's) gets torch tensors on the CPU too: views of the
            # harness's own buffers (the same memory, the same sentinel tails)
            self.torch = torch_of(mod)
            self.launches = lambda: COUNTS.get(id(obj), 0)
            self.total = lambda: TOTAL[0]
            self.launched = LAUNCHED
            self.emulation = None
        else:
            from . import cuda_launch
            cuda_launch.prepare(spec["file"], self.entry, spec.get("signature", ""), on_gpu=on_gpu,
                                sides=spec.get("sides") or None)
            # the launch (grid, block, parameters) comes with each request, from the harness's contract
            self.fn = functools.partial(cuda_launch.launch_kernel, source_path=spec["file"], entry=self.entry)
            self.launches = lambda: cuda_launch.LAUNCHES.get(self.entry, 0)
            self.total = lambda: sum(cuda_launch.LAUNCHES.values())
            self.launched = cuda_launch.LAUNCHED
            self.emulation = None if on_gpu else cuda_launch.emulation_info(spec["file"], self.entry)
            self.torch = None
        self.language = spec["language"]
        self.on_gpu = on_gpu

    def argument(self, v):
        """What the launcher is passed for a harness tensor: itself, or (a torch launcher on a
        CPU) a torch view of its buffer, made once per tensor."""
        if self.torch is None or self.on_gpu or not isinstance(v, NpTensor):
            return v
        view = getattr(v, "_torch", None)
        if view is None:
            view = self.torch.from_numpy(v._storage.buf).as_strided(v.shape, v._strides, v._offset)
            v._torch = view
        return view

    def set_programs(self, programs):
        """Program order (and sample) of the next call's launches; None: natural, every program."""
        p = {"order": "natural", "seed": 0, "sample": None}
        if isinstance(programs, dict):
            p.update(order=str(programs.get("order", "natural")), seed=int(programs.get("seed") or 0),
                     sample=int(programs["sample"]) if programs.get("sample") else None)
        if self.language == "triton":
            from . import interp
            interp.PROGRAMS.update(p)
            interp.STATS.update(ran=0, of=0)
        else:
            from . import cuda_launch
            cuda_launch.ORDER.update(order=p["order"], seed=p["seed"])   # the emulation runs every block
            return False
        return p["sample"] is not None

    def programs_run(self):
        if self.language == "triton":
            from . import interp
            return dict(interp.STATS)
        return None


# calls --------------------------------------------------------------------------------------------

def _returned(value, places):
    """{name: tensor} of what the launcher returned: RETURNS names its first len(places) values
    (None: a place skipped; a lone tensor is a one-value return)."""
    if not any(places):
        return {}
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    got = {n: (values[i] if i < len(values) else None) for i, n in enumerate(places) if n is not None}
    bad = [n for n, v in got.items() if not (hasattr(v, "shape") and hasattr(v, "data_ptr"))]
    if bad:
        raise TypeError(f"the launcher returned {type(value).__name__}"
                        f"{f' of {len(values)}' if isinstance(value, (tuple, list)) else ''}: no tensor for "
                        f"{', '.join(bad)} (RETURNS: {', '.join(str(n) for n in places)}, in the order it returns them)")
    return got


def run_call(backend, kern, req, in_dir, out_dir):
    from .backend import OUT_SENTINEL, host_array
    io = os.path.join(in_dir, str(int(req["id"])))
    res_dir = os.path.join(out_dir, str(int(req["id"])))
    os.makedirs(res_dir, exist_ok=True)
    inputs, inouts, outputs = list(req["inputs"]), list(req["inouts"]), dict(req["outputs"])
    places = [n if n in outputs else None for n in req.get("returns") or []]   # allocated by the launcher
    returns = [n for n in places if n is not None]
    scalars = dict(req.get("scalars") or {})
    pad = int(req.get("pad", 64))
    tensors, results = {}, []
    # `stacked`: one file per name for all sets (stack_<name>.npy [sets, ...] in, r_<name>.npy
    # [sets, buffer] out): a long sequence of small calls (the precision gate's thousands of decode
    # steps) costs a few files instead of several per step
    stacked = isinstance(req.get("stacked"), list)
    stacks, kept = {}, {}
    on_cpu = kern.observes["provenance"] or kern.emulation is not None
    sampled = kern.set_programs(req.get("programs")) if on_cpu else False
    autotune.choose(req.get("autotune"))
    backend.begin()
    for j in range(int(req["sets"])):
        for name in inputs + inouts:
            f = os.path.join(io, f"s{j}_{name}.npy")
            sentinel = np.nan if name in inputs else OUT_SENTINEL
            a = None
            if stacked and name in req["stacked"]:
                if name not in stacks:
                    stacks[name] = np.load(os.path.join(io, f"stack_{name}.npy"), allow_pickle=False)
                a = stacks[name][j]
            elif os.path.exists(f):
                a = np.load(f, allow_pickle=False)
            if a is not None:
                if name in tensors:
                    backend.refill(tensors[name], a, sentinel)
                else:
                    tensors[name] = backend.put(a, pad=pad, sentinel=sentinel, name=name, track=name in inouts)
            elif name not in tensors:
                raise RuntimeError(f"request {req['id']}: no input {name} for set {j}")
        # a sample of the programs leaves the rest unwritten: the judge tells them by their NaN
        fill = "nan" if sampled else output_fill(j)
        for name, shape in outputs.items():
            if name in returns:
                continue
            if name not in tensors:
                tensors[name] = backend.poisoned(tuple(shape), pad=pad, name=name, track=True)
            elif fill != "stale":
                value = np.nan if fill == "nan" else LARGE_FILL
                backend.refill(tensors[name], np.full(shape, value, np.float32), OUT_SENTINEL)
        backend.reset()
        if on_cpu:
            kern.set_programs(req.get("programs"))   # counts from zero per set
        del kern.launched[:]
        del autotune.LAUNCHES[:]
        e0, t0 = kern.launches(), kern.total()
        exc = None
        # `profile` {files}: count the call's work per line of those sources (workprofile.py)
        profile = req.get("profile") if on_cpu and kern.language == "triton" else None
        if profile:
            from . import workprofile
            workprofile.start(profile.get("files"))
        returned = {}
        start = time.perf_counter()
        try:
            if kern.language == "triton":
                value = kern.fn(*[kern.argument(tensors.get(n, scalars.get(n))) if n is not None else None
                                  for n in req["args"]])
                returned = _returned(value, places)
            else:
                kern.fn(req.get("launch"), tensors)
            backend.sync()
        except BaseException as e:   # noqa: BLE001 - SystemExit too: the candidate's, judged by the harness
            exc = describe_exception(e)
        seconds = time.perf_counter() - start
        if profile:
            workprofile.finish(os.path.join(res_dir, f"r{j}_profile.json"))
        rec = {"seconds": seconds, "exception": exc, "autotuned": list(autotune.LAUNCHES),
               "launches": {"entry": kern.launches() - e0, "total": kern.total() - t0},
               "violations": backend.violations() if kern.observes["out_of_bounds"] else None,
               "inputs": {}, "arrays": {}, "provenance": None}
        if on_cpu:
            rec["launched"] = list(kern.launched)
            rec["programs"] = kern.programs_run()
            if kern.observes["out_of_bounds"]:
                rec["atomics"] = int(backend.memory.atomics)
        for name in inputs:
            t = tensors[name]
            flat, n = backend.flat(t), t.numel()
            rec["inputs"][name] = {"data": digest(flat[:n]), "tail": digest(flat[n:])}
        written = inouts + [n for n in outputs if n not in returns]
        for name in written:
            if stacked:
                kept.setdefault(name, []).append(backend.flat(tensors[name]))
                rec["arrays"][name] = os.path.join(res_dir, f"r_{name}.npy")
                continue
            f = os.path.join(res_dir, f"r{j}_{name}.npy")
            np.save(f, backend.flat(tensors[name]))
            rec["arrays"][name] = f
        if kern.observes["provenance"]:
            backend.checkpoint()
        # The launcher's returned outputs travel as the harness's do (float32, a sentinel tail: their
        # bounds are their allocation's, which the bounds check watched from their first launch).
        # What no kernel wrote of one holds whatever its allocation held (a reused block may hold the
        # last call's right answer): not written by a kernel, so it fails provenance; in a call that
        # ran a sample of the programs it reads NaN instead, as an unwritten harness output does.
        writes = {name: backend.returned_writes(t) for name, t in returned.items()} \
            if kern.observes["provenance"] else {}
        for name, t in returned.items():
            f = os.path.join(res_dir, f"r{j}_{name}.npy")
            a = host_array(t).reshape(-1)
            if sampled and name in writes:
                a = np.where(writes[name][0], a, np.float32(np.nan)).astype(np.float32)
            np.save(f, np.concatenate([a, np.full(pad, OUT_SENTINEL, np.float32)]))
            rec["arrays"][name] = f
        if kern.observes["provenance"]:
            rec["provenance"] = {}
            for name, (kernel, host) in writes.items():
                f = os.path.join(res_dir, f"r{j}_{name}.prov.npy")
                np.save(f, np.packbits(~host if sampled else kernel & ~host))
                rec["provenance"][name] = f
                if sampled:
                    np.save(os.path.join(res_dir, f"r{j}_{name}.kw.npy"), np.packbits(kernel))
            for name in written:
                bits = np.packbits(backend.provenance(tensors[name], name))
                if stacked:
                    kept.setdefault(name + ".prov", []).append(bits)
                    rec["provenance"][name] = os.path.join(res_dir, f"r_{name}.prov.npy")
                    continue
                f = os.path.join(res_dir, f"r{j}_{name}.prov.npy")
                np.save(f, bits)
                rec["provenance"][name] = f
            if sampled:
                # a partial grid is judged on what the programs that ran wrote
                rec["written"] = {n: os.path.join(res_dir, f"r{j}_{n}.kw.npy") for n in returned}
                for name in written:
                    f = os.path.join(res_dir, f"r{j}_{name}.kw.npy")
                    t = tensors[name]
                    np.save(f, np.packbits(backend.memory.kernel_written(name, t.element_size())))
                    rec["written"][name] = f
        results.append(rec)
    for name, rows in kept.items():
        np.save(os.path.join(res_dir, f"r_{name}.npy"), np.stack(rows))
    return results


def main():
    global _RESP
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    _RESP = int(cfg["resp_fd"])
    requests = os.fdopen(int(cfg["req_fd"]), "rb")
    on_gpu = cfg["device"] == "cuda"
    try:
        if on_gpu:
            from .backend import TorchBackend
            backend = TorchBackend()
        else:
            from .interp import install_bounds_check, install_fast_device_calls, install_program_order, install_tf32_dot
            from .interp import install_comparisons, install_device_exp, install_faithful_casts
            install_comparisons()      # comparisons give int1 booleans, NaN as fcmp's predicates (interp.py)
            install_faithful_casts()   # fp32 -> bf16 / fp8 rounded as the GPU does (interp.py)
            install_device_exp()       # fp32 exp as ex2.approx(x * log2e), as the GPU does
            install_bounds_check()
            install_program_order()
            install_fast_device_calls()
            if cfg.get("tf32", True):
                install_tf32_dot()
            from .backend import NumpyBackend
            backend = NumpyBackend()
        hook_triton(interpreted=not on_gpu)
        autotune.install(interpreted=not on_gpu)
        FACTS[0] = not on_gpu
        CHECKPOINT[0] = backend.checkpoint
        if not on_gpu:
            ADOPT[0] = backend.adopt
    except Exception:  # noqa: BLE001
        send({"worker_error": traceback.format_exc()[-3000:]})
        os._exit(EXIT_WORKER_BUG)
    kernels = {}
    for key, spec in cfg["kernels"].items():
        try:
            kernels[key] = Hosted(key, spec, on_gpu, backend)
        except BaseException as e:  # noqa: BLE001 - the source's failure, reported
            if type(e).__name__ == "NeedsGpu":
                send({"needs_gpu": {"kernel": key, "reason": str(e)[:3000]}})
                os._exit(EXIT_NEEDS_GPU)
            send({"load_error": {"kernel": key, "error": f"{type(e).__name__}: {e}"[:2000],
                                 "traceback": traceback.format_exc()[-2000:]}})
            os._exit(EXIT_LOAD_FAILED)
    watching = not on_gpu and any(spec.get("sides") for spec in cfg["kernels"].values())
    lines_watched = not on_gpu and any(spec.get("lines") for spec in cfg["kernels"].values())
    if not on_gpu:
        hide_the_interpreter()
    langs = {spec["language"] for spec in cfg["kernels"].values()}
    arch = next((h.emulation["cuda_arch"] for h in kernels.values() if h.emulation), None)
    emu = f"cooperative-thread CUDA emulation, device path __CUDA_ARCH__ {arch}"
    if on_gpu:
        device = backend.describe()
    elif langs == {"cuda"}:
        device = f"cpu ({emu})"
    elif langs == {"triton"}:
        device = "cpu (triton interpreter)"
    else:
        device = f"cpu (triton interpreter; {emu})"
    ready = {"device": device, "kernels": sorted(kernels), "pid": os.getpid(),
             "observes": {k: h.observes for k, h in kernels.items()}}
    emulation = {k: h.emulation for k, h in kernels.items() if h.emulation is not None}
    if emulation:
        ready["emulation"] = emulation
    send({"ready": ready})
    while True:
        line = requests.readline()
        if not line:
            break
        req = json.loads(line)
        send({"start": req["id"]})
        try:
            if req.get("record") is not None:
                sets = run_record(kernels[req["kernel"]], req) if not on_gpu else []
            else:
                sets = run_call(backend, kernels[req["kernel"]], req, cfg["in_dir"], cfg["out_dir"])
        except Exception:  # noqa: BLE001 - the worker's own failure (or a candidate that broke it)
            send({"worker_error": traceback.format_exc()[-3000:]})
            os._exit(EXIT_WORKER_BUG)
        done = {"done": req["id"], "sets": sets}
        if watching:
            done["sides"] = watched_sides(langs)
        if lines_watched:
            from .coverage import RAN
            done["lines"] = sorted(RAN)
        send(done)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
