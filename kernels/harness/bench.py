"""`bench`: speed on a GPU (SPEC section 8, gate 4).

Baseline and candidate run interleaved in one process (ABAB..., the order alternating every
iteration), after a warm-up, each timed call bracketed by CUDA events and preceded by an L2
flush (which also keeps the GPU busy while the next launch is enqueued, so the events time the
kernel and not the host), over `--rotate` input sets used in turn. Reported: median, p10, p90
per variant, the speedup of the candidate, the noise floor (the larger half-spread of the two),
the achieved bandwidth against the manifest's floor and the device's peak, and flags for
results that are implausible (beyond the peak; a speedup far outside what a rewrite gives).
No speed is reported when the candidate fails a quick correctness check first (one case, run
in the check's sandboxed workers). The timed runs themselves import the candidate into this
process (CUDA events need it): bench's numbers are not hardened against a hostile candidate.
"""
import numpy as np

from .check import run_check
from .loader import load_launcher, resolve
from .ops import OPS

__all__ = ["run_bench"]


def _calls(op, fn, backend, shape, rotate, seed):
    """`rotate` closures, each running fn on its own input set."""
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(rotate):
        x = op.make_inputs(shape, rng) if op.name == "kda_decode" else \
            op.make_inputs(shape, rng, initial_state=True)
        if op.name == "kda_decode":
            t = {n: backend.put(x[n], pad=0) for n in ("q", "k", "v", "g", "beta", "state", "slots")}
            t["o"] = backend.poisoned(x["v"].shape, pad=0)
            args = [t[n] for n in ("q", "k", "v", "g", "beta", "state", "slots", "o")]
        else:
            t = {n: backend.put(x[n], pad=0) for n in ("q", "k", "v", "g", "beta", "initial_state")}
            B, T, H, K = x["q"].shape
            HV, V = x["v"].shape[2:]
            t["o"] = backend.poisoned((B, T, HV, V), pad=0)
            t["final_state"] = backend.poisoned((B, HV, K, V), pad=0)
            args = [t[n] for n in ("q", "k", "v", "g", "beta", "o", "initial_state", "final_state")]
        calls.append((lambda a=args: fn(*a)))
    return calls


def fla_adapter(op_name):
    """FLA's own KDA (if importable) on our argument order, for a side-by-side number."""
    if op_name == "kda_decode":
        from fla.ops.kda import fused_recurrent_kda

        def run(q, k, v, g, beta, state, slots, o):
            # FLA takes the state rows as [N, HV, K, V] (no pool indirection here)
            rows = run.rows.get(id(state))
            if rows is None:
                rows = run.rows[id(state)] = state[slots].contiguous()
            fused_recurrent_kda(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None],
                                initial_state=rows, output_final_state=True)
        run.rows = {}
        return run
    from fla.ops.kda import chunk_kda

    def run(q, k, v, g, beta, o, h0, ht):
        chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    return run


def _time(backend, variants, warmup, iters):
    torch = backend.torch
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for calls in variants.values():
        for i in range(warmup):
            calls[i % len(calls)]()
    torch.cuda.synchronize()
    names = list(variants)
    events = {n: [] for n in names}
    for it in range(iters):
        order = names if it % 2 == 0 else names[::-1]
        for n in order:
            calls = variants[n]
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            calls[it % len(calls)]()
            e.record()
            events[n].append((s, e))
    torch.cuda.synchronize()
    return {n: np.array([s.elapsed_time(e) * 1e3 for s, e in events[n]]) for n in names}  # microseconds


def _stats(us):
    med = float(np.median(us))
    return {"median_us": med, "p10_us": float(np.percentile(us, 10)), "p90_us": float(np.percentile(us, 90)),
            "min_us": float(us.min()), "samples": int(us.size)}


def run_bench(manifest, args, backend):
    op = OPS[manifest.op]
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
    cand = load_launcher(manifest, args.source)
    base = load_launcher(manifest, args.baseline)
    variants = {"baseline": _calls(op, base, backend, shape, args.rotate, 1),
                "candidate": _calls(op, cand, backend, shape, args.rotate, 1)}
    if args.against:
        other = fla_adapter(op.name) if args.against == "fla" else resolve(args.against)
        variants["against"] = _calls(op, other, backend, shape, args.rotate, 1)
    times = _time(backend, variants, args.warmup, args.iters)
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
