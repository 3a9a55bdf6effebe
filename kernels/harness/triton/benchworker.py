"""Worker of the Triton / CUDA `bench` (bench.py starts it in the sandbox of ../sandbox/, with the
GPU's device files reachable): the only process that imports the kernels it times.

    python -I confine.py CONFIG   ->   kidiom_rt.benchworker JOB.json

It runs from a copy in its scratch directory, as the package `kidiom_rt` (this file, arrays.py,
backend.py, interp.py; for CUDA the launcher as cuda_launch.py and cudatools.py); kernel sources
are copies under `rt/src/`. The job names the variants (baseline, candidate, and optionally a
third-party `against`), the input sets (`.npy` files the harness wrote in `in/`: set j's
`s<j>_<name>.npy`), the argument order, the outputs' shapes and the timing parameters. Every
variant gets its own device tensors of every set. Baseline and candidate run interleaved (the
order alternating every iteration) after a warm-up, each timed call bracketed by CUDA events and
preceded by an L2 flush; the raw times (microseconds) go back in `out/result.json`. On a CPU
(`device` "cpu", used by the tests of this plumbing) calls are timed with perf_counter under
Triton's interpreter.

What it reports about itself (the times) is measured in the process the candidate shares: not
hardened against a candidate that forges it, but confined like every other run of candidate code.
"""
import functools
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback

import numpy as np


def import_file(path, name, package=None):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if package:   # what its relative imports are relative to
        mod.__package__ = package
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_variant(key, spec, on_gpu):
    """The public function of one variant."""
    kind = spec["kind"]
    if kind == "triton":
        mod = import_file(spec["file"], f"kidiom_bench_{key}", spec.get("package"))
        from .arrays import launcher_of
        launcher = launcher_of(mod, spec["launcher"])
        if launcher is None:
            raise AttributeError(f"{key}: the source defines no {spec['launcher']}()")
        return launcher
    if kind == "cuda":
        from . import cuda_launch
        cuda_launch.prepare(spec["file"], spec["entry"], spec.get("signature", ""), on_gpu=on_gpu)
        launch = functools.partial(cuda_launch.launch_kernel, source_path=spec["file"], entry=spec["entry"])
        launch.cuda = True
        return launch
    if kind == "file":   # a third party's function through an adapter the contract names (AGAINST)
        return getattr(import_file(spec["file"], f"kidiom_against_{key}"), spec["function"])
    mod, _, attr = spec["function"].partition(":")      # an installed module:function
    return getattr(importlib.import_module(mod), attr)


def make_calls(fn, backend, job, in_dir):
    """One closure per input set, each on this variant's own tensors."""
    calls = []
    for j in range(int(job["sets"])):
        t = {}
        for name in job["inputs"]:
            t[name] = backend.put(np.load(os.path.join(in_dir, f"s{j}_{name}.npy"), allow_pickle=False), pad=0)
        for name, shape in job["outputs"].items():
            t[name] = backend.poisoned(tuple(shape), pad=0)
        if getattr(fn, "cuda", False):   # the launch (grid, block, parameters) from the contract
            calls.append(lambda t=t: fn(job["launch"], t))
            continue
        scalars = job.get("scalars") or {}
        args = [t.get(n, scalars.get(n)) for n in job["args"]]
        calls.append(lambda a=args: fn(*a))
    return calls


def time_variants(backend, variants, warmup, iters, on_gpu):
    """{name: [microseconds per timed call]}, variants interleaved ABAB.., the order alternating."""
    for calls in variants.values():
        for i in range(warmup):
            calls[i % len(calls)]()
    backend.sync()
    names = list(variants)
    if on_gpu:
        torch = backend.torch
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
        events = {n: [] for n in names}
        for it in range(iters):
            for n in (names if it % 2 == 0 else names[::-1]):
                calls = variants[n]
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                calls[it % len(calls)]()
                e.record()
                events[n].append((s, e))
        torch.cuda.synchronize()
        return {n: [s.elapsed_time(e) * 1e3 for s, e in events[n]] for n in names}
    times = {n: [] for n in names}
    for it in range(iters):
        for n in (names if it % 2 == 0 else names[::-1]):
            calls = variants[n]
            t0 = time.perf_counter()
            calls[it % len(calls)]()
            times[n].append((time.perf_counter() - t0) * 1e6)
    return times


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    out_dir = job["out_dir"]
    result = {}
    try:
        on_gpu = job["device"] == "cuda"
        if on_gpu:
            from .backend import TorchBackend
            backend = TorchBackend()
        else:
            from .backend import NumpyBackend
            backend = NumpyBackend()
        result["device"] = backend.describe()
        fns = {key: load_variant(key, spec, on_gpu) for key, spec in job["variants"].items()}
        variants = {key: make_calls(fn, backend, job, job["in_dir"]) for key, fn in fns.items()}
        result["times_us"] = time_variants(backend, variants, int(job["warmup"]), int(job["iters"]), on_gpu)
    except BaseException as e:  # noqa: BLE001 - reported; the harness says which variant failed
        result["error"] = f"{type(e).__name__}: {e}"[:3000]
        result["traceback"] = traceback.format_exc()[-3000:]
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
