"""`spec`: launch specs for the Rust GPU gate (SPEC section 8, "The GPU gate is owned by Rust";
validator/src/gpu/spec.rs holds the format and the directory layout), made without a GPU.

Per shape (every `gpu` shape of the manifest, then `bench`; `--shapes` selects some), one
directory named by the shape (`N64-H16-HV32-K128-V128-S64`):

    launch.json                         the LaunchSpec (format 1)
    kernel.cubin                        sm_90 device code; launch.json names its sha256
    inputs/set<j>/<name>.npy            every tensor parameter of input set j (outputs: NaN)
    expected/set<j>/<name>.npy          float64 expected values of every output and in/out tensor
    expected/set<j>/<name>.written.npy  uint8, 1 where the call writes an in/out tensor

Who computes what:
- The device code and what the launch needs come from the source, so they are made where the
  source may run: the sandboxed compile worker (aot.run_worker, aotworker.py; the same as
  `compile`). Triton: per shape the launcher's one launch recorded on shape-only tensors,
  specialised as the JIT does and compiled (grid, `32 x num_warps`, shared memory, flags and
  scratch sizes from the compiled metadata; the non-constexpr parameters in order, each pointer
  identified with the call's tensor it received, never by the kernel's own parameter names; then
  Triton's two scratch pointers; its element type must be that tensor's). CUDA C++: NVRTC's PTX and the `extern "C" __global__` entry's
  parameter list; ptxas (here) makes the one cubin, valid at every shape; the grid and block are
  the contract's `launch(shape)`, and so are the ints and floats it passes.
  A spec without `--source` is the baseline's, made by a process that never imported a candidate.
- Everything that judges is made here and only here: the tensor roles (the contract's INPUTS,
  INOUTS, OUTPUTS), the input sets (its `make_inputs`, OPTIONAL inputs present) and the float64
  expected values (its `reference`), and the written mask (its `written`, else every element).
The Rust side (`validator/src/gpu/check.rs`) checks each spec against its cubin's ELF before it
launches anything.
"""
import hashlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from . import aot, cudatools
from ..contract import load_contract
from ..manifest import shape_id

__all__ = ["emit_specs", "FORMAT"]

FORMAT = 1   # validator/src/gpu/spec.rs's FORMAT


def _shapes(manifest, select):
    """(label, shape) of every gpu shape (gpu0, gpu1, ...) and bench, the same shape once, in
    order; `select`: labels to keep (None: all)."""
    out, seen = [], set()
    labelled = [(f"gpu{i}", s) for i, s in enumerate(manifest.shapes["gpu"])] + [("bench", manifest.shapes["bench"])]
    known = {label for label, _ in labelled}
    if select is not None:
        unknown = [s for s in select if s not in known]
        if unknown:
            raise ValueError(f"unknown shape label {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    for label, shape in labelled:
        if select is not None and label not in select:
            continue
        if shape_id(shape) in seen:
            continue
        seen.add(shape_id(shape))
        out.append((label, dict(shape)))
    return out


def _tools(cubin, assembler, nvrtc=None):
    """Triton's version, the assembler's (as the cubin's `.note.nv.tkinfo` names it; ptxas 12 writes
    no such note, then `--version` of the assembler that made it) and NVRTC's."""
    tools = {}
    try:
        import triton
        tools["triton"] = triton.__version__
    except ImportError:
        pass
    m = re.search(rb"Cuda compilation tools, release [\d.]+, V([\d.]+)", cubin)
    v = m[1].decode() if m else cudatools.tool_version(assembler)
    if v:
        tools["ptxas"] = v
    if nvrtc:
        tools["nvrtc"] = nvrtc
    return tools


def _roles(op, shape):
    """Contract name -> role (tensors only)."""
    t = op.tensors(shape)
    roles = {n: "input" for n in op.inputs if isinstance(t[n], tuple)}
    roles.update({n: "in_out" for n in op.inouts})
    roles.update({n: "output" for n in op.outputs})
    return roles


def _fake(op, shape):
    """The call's arguments at `shape`: shape-only tensors, scalars' values."""
    t = op.tensors(shape)
    return [aot.FakeTensor(t[n][0], np.dtype(t[n][1])) if isinstance(t[n], tuple) else t[n] for n in op.args]


# numpy dtype of a contract tensor -> the element type a launch spec names (Triton's spelling)
_DTYPES = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "int64": "i64", "int32": "i32", "uint8": "u8"}


def _tensor(op, roles, call, arg, dtype, align):
    """A tensor parameter that received the call's argument `arg`: its contract name and role, and
    the element type the source says, which must be the contract tensor's own."""
    if not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < len(op.args):
        raise ValueError(f"tensor parameter names call argument {arg!r}, not one of {len(op.args)}")
    name = op.args[arg]
    if name not in roles:
        raise ValueError(f"tensor {name} has no role in the op's layout")
    want = _DTYPES.get(call[arg].dtype.np.name)   # a ShapeOnly tensor's NpDtype
    if str(dtype) != want:
        raise ValueError(f"tensor {name}: the kernel takes {dtype}, the contract's tensor is {want}")
    return {"kind": "tensor", "name": name, "dtype": want, "role": roles[name], "align": int(align)}


def _triton_params(op, roles, call, facts):
    """The worker's parameter facts, as LaunchSpec params (roles and names from the op)."""
    params = []
    for p in facts["params"]:
        kind = p.get("kind")
        if kind == "tensor":
            params.append(_tensor(op, roles, call, p.get("arg"), p.get("dtype"), p.get("align")))
        elif kind == "int":
            params.append({"kind": "int", "name": str(p["name"]), "value": int(p["value"]), "bits": int(p["bits"]),
                           "divisible_by_16": bool(p.get("divisible_by_16"))})
        elif kind == "float":
            params.append({"kind": "float", "name": str(p["name"]), "value": float(p["value"])})
        elif kind == "scratch" and p.get("which") in ("global", "profile"):
            params.append({"kind": "scratch", "which": p["which"]})
        else:
            raise ValueError(f"unknown parameter kind in the compile's facts: {p!r}")
    return params


def _cuda_params(op, roles, call, signature, shape):
    """The CUDA entry's parameters as LaunchSpec params, from the contract's `launch(shape)`: its
    pointers the contract's tensors, its ints and floats the values given there. A signature of
    another form than the launch's is refused."""
    given = op.launch(shape)["params"]
    kinds = [p["kind"] for p in signature]
    want = ["tensor" if "ptr" in p else ("int" if "int" in p else "float") for p in given]
    if kinds != want:
        raise ValueError(f"the entry takes ({', '.join(kinds)}); the contract's launch passes ({', '.join(want)})")
    params = []
    for p, g in zip(signature, given):
        if "ptr" in g:
            align = np.dtype({"fp32": np.float32, "i64": np.int64, "i32": np.int32}.get(p["dtype"], np.uint8)).itemsize
            params.append(_tensor(op, roles, call, op.args.index(g["ptr"]), p["dtype"], align))
        elif "int" in g:
            params.append({"kind": "int", "name": p["name"], "value": int(g["int"]), "bits": int(p["bits"]),
                           "divisible_by_16": False})
        else:
            params.append({"kind": "float", "name": p["name"], "value": float(g["float"])})
    return params


def _save(path, a):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.ascontiguousarray(a))


def _write_sets(op, shape, index, params, d, sets, seed):
    """R input sets and their float64 expected values, by the contract's own functions (trusted side)."""
    tensors = [p for p in params if p["kind"] == "tensor"]
    for j in range(sets):
        x = op.make_inputs(shape, np.random.default_rng([seed, index, j]))
        expect = op.reference(x)
        lay = op.layout(x)
        for p in tensors:
            name = p["name"]
            if p["role"] == "output":
                a = np.full(lay["outputs"][name], np.nan, dtype=np.float32)
            else:
                a = x[name]
            _save(d / "inputs" / f"set{j}" / f"{name}.npy", a)
            if p["role"] != "input":
                _save(d / "expected" / f"set{j}" / f"{name}.npy", np.asarray(expect[name], dtype=np.float64))
            if p["role"] == "in_out":
                written = op.written(name, x)
                _save(d / "expected" / f"set{j}" / f"{name}.written.npy", np.asarray(written, dtype=np.uint8))


def emit_specs(manifest, source, out, sets=8, select=None, seed=None, arch=90, deadline=None):
    """`spec`'s result object: writes one spec directory per shape under `out` (module doc)."""
    if manifest.language not in ("triton", "cuda"):
        raise ValueError(f"{manifest.name}: launch specs are for device kernels (triton, cuda), not {manifest.language}")
    source = str(Path(source) if source else manifest.source_path)
    if not Path(source).exists():
        raise FileNotFoundError(f"source file {source} does not exist")
    if sets < 0:
        raise ValueError("--sets must be 0 or more")
    op = load_contract(manifest)
    shapes = _shapes(manifest, select)
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    deadline = deadline or time.monotonic() + 1800
    t0 = time.monotonic()
    if manifest.language == "triton":
        def collect(read, result):
            return [(facts, read(f"out/spec{i}.cubin", True)) for i, facts in enumerate(result["specs"])]
        compiled, report = aot.run_worker(
            manifest, source, arch, deadline, {"mode": "spec", "shapes": [s for _, s in shapes]}, collect,
            lambda r: isinstance(r.get("specs"), list) and len(r["specs"]) == len(shapes), "the specs' compile")
        assembler = cudatools.tool("ptxas", arch)   # the one Triton's compile used
        nvrtc = None
    else:
        def collect(read, result):
            return read("out/kernel.ptx", False), result["params"], result["info"]
        (ptx, signature, info), report = aot.run_worker(
            manifest, source, arch, deadline, {"mode": "spec"}, collect,
            lambda r: isinstance(r.get("params"), list) and isinstance(r.get("info"), dict), "the specs' compile")
        cubin, _, assembler = cudatools.assemble(ptx, arch=f"sm_{arch}a" if arch == 90 else f"sm_{arch}")
        nvrtc = info.get("nvrtc_version")
    compile_seconds = round(time.monotonic() - t0, 3)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index, (label, shape) in enumerate(shapes):
        roles = _roles(op, shape)
        call = _fake(op, shape)
        if manifest.language == "triton":
            facts, cubin = compiled[index]
            params = _triton_params(op, roles, call, facts)
            grid = [int(g) for g in facts["grid"]]
            block = [32 * int(facts["num_warps"]), 1, 1]
            launch = {k: facts[k] for k in ("shared_bytes", "num_ctas", "cooperative", "pdl", "tensor_descriptors",
                                            "global_scratch_bytes", "global_scratch_align", "profile_scratch_bytes")}
            kernel = str(facts["kernel"])
        else:
            params = _cuda_params(op, roles, call, signature, shape)
            lc = op.launch(shape)
            grid, block = lc["grid"], lc["block"]
            launch = {"shared_bytes": 0, "num_ctas": 1, "cooperative": False, "pdl": False, "tensor_descriptors": 0,
                      "global_scratch_bytes": 0, "global_scratch_align": 1, "profile_scratch_bytes": 0}
            kernel = manifest.entry
        spec = {"format": FORMAT, "kernel": kernel, "cubin": "kernel.cubin",
                "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "shape": shape, "grid": grid, "block": block,
                **launch, "params": params, "tools": _tools(cubin, assembler, nvrtc)}
        d = out / shape_id(shape)
        d.mkdir(parents=True, exist_ok=True)
        (d / "kernel.cubin").write_bytes(cubin)
        (d / "launch.json").write_text(json.dumps(spec, indent=1) + "\n")
        _write_sets(op, shape, index, params, d, sets, seed)
        written.append({"label": label, "shape": shape, "dir": str(d), "grid": grid, "block": block,
                        "cubin_sha256": spec["cubin_sha256"], "params": len(params),
                        "floor_bytes": float(manifest.floor_bytes(shape))})
    return {"out": str(out), "specs": written, "sets": sets, "seed": seed, "compile_seconds": compile_seconds,
            "sandbox": report, "tools": spec["tools"] if written else {}}
