"""`bench`: speed on a GPU (SPEC section 8, gate 4).

Baseline and candidate run interleaved in one process (ABAB..., the order alternating every
iteration), after a warm-up, each timed call bracketed by CUDA events and preceded by an L2
flush (which also keeps the GPU busy while the next launch is enqueued, so the events time the
kernel and not the host), over `--rotate` input sets used in turn. Reported: median, p10, p90
per variant, the speedup of the candidate, the noise floor (the larger half-spread of the two),
the achieved bandwidth against the manifest's floor and the device's peak, and flags for
results that are implausible (beyond the peak; a speedup far outside what a rewrite gives).
No speed is reported when the candidate fails a quick correctness check first (one case, run
in the check's sandboxed workers). The timed runs happen in a sandboxed worker of their own
(benchworker.py: the check's sandbox, the GPU's device files reachable), which imports the
baseline, the candidate and the `--against` function and returns raw times; this process makes
the inputs (written as .npy for the worker) and computes every statistic. The times are measured
in the process the candidate shares: not hardened against a candidate that forges them.
"""
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import sandbox
from .check import run_check
from ..contract import load_contract
from .worker_client import CUDA_RUNTIME   # the same CUDA runtime as the check's workers

__all__ = ["run_bench", "time_in_sandbox"]

HERE = Path(__file__).resolve().parent
RUNTIME = {"benchworker.py": HERE / "benchworker.py", "arrays.py": HERE / "arrays.py",
           "backend.py": HERE / "backend.py", "interp.py": HERE / "interp.py"}
AS_LIMIT = 16 << 30      # a CPU bench worker's address space (none on a GPU: CUDA maps the device)


class BenchFailed(RuntimeError):
    """A variant failed to load or crashed while timed (the worker's message)."""


def _inputs(op, shape, rotate, seed):
    """`rotate` input sets (OPTIONAL inputs present), the contract's argument order, its read-only
    and in/out tensors, output shapes, scalars."""
    rng = np.random.default_rng(seed)
    sets = [op.make_inputs(shape, rng) for _ in range(rotate)]
    lay = op.layout(sets[0])
    # outputs the launcher allocates and returns are its own work, timed with it
    return sets, list(op.args), lay["inputs"] + lay["inouts"], \
        {n: list(s) for n, s in lay["outputs"].items() if n not in lay["returns"]}, lay["scalars"]


def _variant_spec(manifest, source, key, pkg):
    """How the worker loads one variant: a copy of its source under rt/src/."""
    src = Path(source) if source else manifest.source_path
    if not src.exists():
        raise FileNotFoundError(f"source file {src} does not exist")
    dst = pkg.parent / "src" / f"{key}{src.suffix}"
    shutil.copyfile(src, dst)
    if manifest.language == "triton":
        return {"kind": "triton", "file": str(dst), "launcher": manifest.launcher,
                "package": getattr(manifest, "python_package", None)}
    from .worker_client import KernelSpec
    return {"kind": "cuda", "file": str(dst), "entry": manifest.entry,
            "signature": KernelSpec.of(manifest).signature}


def _against(op, against, pkg):
    """`--against NAME`: an adapter the contract names (AGAINST {NAME: "file.py:function"}, the
    file beside the contract, copied for the worker), else an installed module:function."""
    named = (getattr(op.mod, "AGAINST", None) or {}).get(against)
    if named is None:
        return {"kind": "function", "function": against}
    file, _, fn = named.rpartition(":")
    src = op.path.parent / file
    dst = pkg.parent / "src" / f"against{src.suffix}"
    shutil.copyfile(src, dst)
    return {"kind": "file", "file": str(dst), "function": fn}


def time_in_sandbox(manifest, sources, against, shape, rotate, warmup, iters, deadline, device="cuda", seed=1):
    """Time the variants `sources` ({name: source path or None (the manifest's)}) and `against`
    (None, "fla" or "module:function") interleaved in one sandboxed worker. Returns
    ({name: np.array of microseconds}, device description, sandbox report). Raises BenchFailed,
    sandbox.JobTimeout."""
    op = load_contract(manifest)
    root = Path(tempfile.mkdtemp(prefix="kidiom-bench-"))
    try:
        scratch = root / "bench"
        scratch.mkdir(mode=0o700)
        pkg = sandbox.install_runtime(scratch, dict(RUNTIME, **(CUDA_RUNTIME if manifest.language == "cuda" else {})))
        (scratch / "rt" / "src").mkdir()
        variants = {k: _variant_spec(manifest, src, k, pkg) for k, src in sources.items()}
        if against:
            variants["against"] = _against(op, against, pkg)
        in_dir = scratch / "in"
        in_dir.mkdir()
        sets, args, inputs, outputs, scalars = _inputs(op, shape, rotate, seed)
        for j, x in enumerate(sets):
            for name in inputs:
                np.save(in_dir / f"s{j}_{name}.npy", np.ascontiguousarray(x[name]))
        out_dir, _ = sandbox.writable_dirs(scratch)
        job = {"device": device, "op": op.name, "variants": variants, "sets": len(sets), "args": args,
               "inputs": inputs, "outputs": outputs, "scalars": scalars,
               "launch": op.launch(shape) if manifest.language == "cuda" else None, "warmup": warmup, "iters": iters, "in_dir": str(in_dir),
               "out_dir": str(out_dir)}
        (scratch / "job.json").write_text(json.dumps(job))
        cfg = {"module": "kidiom_rt.benchworker", "path": [str(scratch / "rt")], "args": [str(scratch / "job.json")]}
        env = {"TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")}
        if device != "cuda":
            env["TRITON_INTERPRET"] = "1"
        run = sandbox.run_job(scratch, cfg, deadline, "the bench's timed runs", env_extra=env,
                              address_space=None if device == "cuda" else AS_LIMIT, gpu=device == "cuda",
                              why_no_as="not applied: CUDA maps the GPU's address space",
                              python_note="isolated mode (-I); importable: the timed sources and the bench's "
                                          "runtime (kidiom_rt), never the reference or the checker")
        try:
            result = json.loads(sandbox.read_file(scratch, "out/result.json", limit=64 << 20))
        except (OSError, ValueError):
            result = None
        if not isinstance(result, dict):
            death = sandbox.death_text(run["rc"], run["exit"]) or "exited without a result"
            raise BenchFailed(f"the bench worker {death}: {run['stderr'][-1500:]}")
        if "error" in result:
            raise BenchFailed(f"{result['error']}\n{str(result.get('traceback'))[-1200:]}")
        times = result.get("times_us")
        names = list(variants)
        if not isinstance(times, dict) or sorted(times) != sorted(names) or not all(
                isinstance(times[n], list) and len(times[n]) == iters and
                all(isinstance(t, (int, float)) and np.isfinite(t) and t > 0 for t in times[n]) for n in names):
            raise BenchFailed("the bench worker's times are malformed")
        return {n: np.asarray(times[n], dtype=np.float64) for n in names}, str(result.get("device")), run["sandbox"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stats(us):
    med = float(np.median(us))
    return {"median_us": med, "p10_us": float(np.percentile(us, 10)), "p90_us": float(np.percentile(us, 90)),
            "min_us": float(us.min()), "samples": int(us.size)}


def run_bench(manifest, args, backend=None):
    """`bench`'s result object (the correctness gate, then the timed runs in a sandboxed worker).
    `backend`: unused (the worker makes its own); kept for callers."""
    shape = manifest.shapes["bench"]
    # a speedup is never reported on a red gate
    gate = run_check(manifest, args.source, seeds=[12345], device="cuda", shapes=[dict(manifest.shapes["gpu"][0])],
                     with_curve=False, with_consistency=False, with_baseline=True,
                     deadline=getattr(args, "deadline", None))
    out = {"shape": shape, "iters": args.iters, "warmup": args.warmup, "rotate": args.rotate}
    if "skipped" in gate or not gate["passed"]:
        out.update(status="failed", reason="candidate fails the correctness gate; no speed measured",
                   failures=gate.get("failures") or [gate.get("skipped")])
        return out
    deadline = getattr(args, "deadline", None) or time.monotonic() + 1800
    try:
        times, device, report = time_in_sandbox(manifest, {"baseline": args.baseline, "candidate": args.source},
                                                args.against, shape, args.rotate, args.warmup, args.iters,
                                                deadline)
    except BenchFailed as e:
        out.update(status="failed", reason=f"the timed runs failed: {e}")
        return out
    out["sandbox"] = report
    out["timed_device"] = device
    floor_bytes = float(manifest.floor_bytes(shape))
    floor_flops = float(manifest.floor_flops(shape))
    peak = args.peak_gbps * 1e9
    results = {}
    for n, us in times.items():
        st = _stats(us)
        secs = st["median_us"] * 1e-6
        st["achieved_gbps"] = floor_bytes / secs / 1e9
        st["fraction_of_peak_bw"] = floor_bytes / secs / peak
        st["achieved_tflops"] = floor_flops / secs / 1e12
        results[n] = st
    b, c = results["baseline"], results["candidate"]
    speedup = b["median_us"] / c["median_us"]
    noise = max((r["p90_us"] - r["p10_us"]) / (2 * r["median_us"]) for r in (b, c))
    flags = []
    for n, r in results.items():
        if r["fraction_of_peak_bw"] > 1.05:
            flags.append(f"{n}: {r['achieved_gbps']:.0f} GB/s is beyond the device's peak: timing or floor is wrong")
    if speedup > 5 or speedup < 0.2:
        flags.append(f"speedup {speedup:.2f}x is implausible for a local rewrite: check the measurement")
    out.update(status="ok", results=results, speedup=speedup, noise_floor=noise,
               significant=abs(speedup - 1) > noise, floor={
                   "bytes": floor_bytes, "flops": floor_flops, "peak_gbps": args.peak_gbps,
                   "time_at_peak_us": floor_bytes / peak * 1e6},
               flags=flags)
    return out
