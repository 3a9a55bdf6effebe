"""`check`: correctness of a kernel against its float64 reference (SPEC section 8, gate 3).

For each of several fresh seeds and every shape of the matrix: new random inputs, outputs
poisoned with NaN, sentinel padding after every tensor; then relative L2, max-abs and per-slice
errors of every output, non-finite (e.g. unwritten) elements, untouched padding and pool slots.
Plus, where the manifest asks: the error-versus-length curve, and prefill(T) + M decode steps
against prefill(T + M).
"""
import time

import numpy as np

from ..kda.decode import kda_decode as baseline_decode
from ..kda.prefill import kda_prefill as baseline_prefill
from .manifest import shape_id
from .ops import OPS, slices

__all__ = ["run_check", "compare"]


def compare(op, name, out, expect, tol):
    """Error metrics of one output against its reference, and the tolerance failures."""
    out64 = out.astype(np.float64)
    finite = np.isfinite(out64)
    nonfinite = int(out.size - finite.sum())
    diff = np.where(finite, out64 - expect, np.inf)
    ref_norm = max(float(np.linalg.norm(expect)), 1e-30)
    ref_max = max(float(np.abs(expect).max()) if expect.size else 0.0, 1e-30)
    rel_l2 = float(np.linalg.norm(diff) / ref_norm) if nonfinite == 0 else float("inf")
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    worst = {"index": None, "rel_l2": 0.0}
    for (idx, ref_slice), (_, out_slice) in zip(slices(op, name, expect), slices(op, name, diff)):
        n = max(float(np.linalg.norm(ref_slice)), 1e-30)
        e = float(np.linalg.norm(out_slice) / n)
        if worst["index"] is None or e > worst["rel_l2"] or not np.isfinite(e):
            worst = {"index": [int(i) for i in idx], "rel_l2": e}
    m = {"rel_l2": rel_l2, "max_abs": max_abs, "max_abs_rel": max_abs / ref_max,
         "worst_slice": worst, "nonfinite": nonfinite}
    fails = []
    if nonfinite:
        fails.append(f"{name}: {nonfinite} non-finite elements (unwritten, or NaN read out of bounds)")
    if not rel_l2 <= tol["rel_l2"]:
        fails.append(f"{name}: rel_l2 {rel_l2:.3e} > {tol['rel_l2']:.1e}")
    if not worst["rel_l2"] <= tol["slice_rel_l2"]:
        fails.append(f"{name}: slice {worst['index']} rel_l2 {worst['rel_l2']:.3e} > {tol['slice_rel_l2']:.1e}")
    if not m["max_abs_rel"] <= tol["max_abs_rel"]:
        fails.append(f"{name}: max_abs_rel {m['max_abs_rel']:.3e} > {tol['max_abs_rel']:.1e}")
    return _json_safe(m), fails


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, float) and not np.isfinite(x):
        return None if np.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def check_case(manifest, op, fn, backend, shape, seed, index):
    rng = np.random.default_rng(seed)
    kwargs = {"initial_state": index % 2 == 0} if op.name == "kda_prefill" else {}
    x = op.make_inputs(shape, rng, **kwargs)
    backend.begin()
    t0 = time.perf_counter()
    run = op.run(fn, backend, x)
    seconds = time.perf_counter() - t0
    violations = backend.violations()
    expect = op.reference(x)
    outputs, failures = {}, []
    for name, ref in expect.items():
        m, f = compare(op, name, run.outputs[name], ref, manifest.tolerance)
        outputs[name] = m
        failures += f
    for name, ok in run.padding.items():
        if not ok:
            failures.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")
    for v in violations:
        failures.append(f"out-of-bounds {v['kind']}: {v['count']} accesses outside every tensor (nearest {v['near']})")
    for name, ok in run.extra.items():
        if not ok:
            failures.append(f"{name} is false (a pool slot outside `slots` was written)")
    case = {"id": shape_id(shape), "shape": shape, "seed": seed, "passed": not failures,
            "outputs": outputs, "padding": run.padding, "out_of_bounds": violations, "failures": failures,
            "seconds": round(seconds, 4)}
    case.update(run.extra)
    if op.name == "kda_prefill":
        case["initial_state"] = x["initial_state"] is not None
    return case


def error_curve(manifest, op, fn, backend, lengths, seed):
    """Error of the outputs and final state against float64, at each length T."""
    points = []
    for T in lengths:
        shape = dict(manifest.curve["base"], T=T)
        rng = np.random.default_rng(seed)
        x = op.make_inputs(shape, rng, long_memory=True, initial_state=False)
        run = op.run(fn, backend, x)
        expect = op.reference(x)
        o, e = run.outputs["o"].astype(np.float64), expect["o"]
        s, es = run.outputs["final_state"].astype(np.float64), expect["final_state"]
        tail = slice(max(0, T - 64), T)
        points.append(_json_safe({
            "T": T,
            "rel_l2": float(np.linalg.norm(o - e) / np.linalg.norm(e)),
            "max_abs": float(np.abs(o - e).max()),
            "last_chunk_rel_l2": float(np.linalg.norm(o[:, tail] - e[:, tail]) / np.linalg.norm(e[:, tail])),
            "state_rel_l2": float(np.linalg.norm(s - es) / np.linalg.norm(es)),
            "state_max_abs": float(np.abs(s - es).max()),
        }))
    return points


def consistency(manifest, decode_fn, prefill_fn, backend, shape, seed):
    """prefill(T) then M decode steps == prefill(T + M): last M outputs and the final state."""
    B, T, M, H, HV, K, V = (shape[x] for x in ("B", "T", "M", "H", "HV", "K", "V"))
    prefill = OPS["kda_prefill"]
    rng = np.random.default_rng(seed)
    x = prefill.make_inputs(dict(shape, T=T + M), rng, initial_state=True)
    full = prefill.run(prefill_fn, backend, x)
    head = {n: (a[:, :T] if n != "initial_state" else a) for n, a in x.items()}
    part = prefill.run(prefill_fn, backend, head)
    # the decode pool: B sequences in shuffled slots among B + 2
    S = B + 2
    slots = rng.permutation(S)[:B].astype(np.int64)
    pool = np.zeros((S, HV, K, V), dtype=np.float32)
    pool[slots] = part.outputs["final_state"]
    pool_t = backend.put(pool)
    slots_t = backend.put(slots)
    outs = []
    for m in range(M):
        t = T + m
        o = backend.poisoned((B, HV, V))
        decode_fn(*(backend.put(np.ascontiguousarray(x[n][:, t])) for n in ("q", "k", "v", "g", "beta")),
                  pool_t, slots_t, o)
        backend.sync()
        outs.append(backend.get(o))
    dec_o = np.stack(outs, axis=1)                       # [B, M, HV, V]
    dec_s = backend.get(pool_t)[slots]
    full_o = full.outputs["o"][:, T:]
    full_s = full.outputs["final_state"]
    rel = lambda a, b: float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-30))
    res = {"shape": shape, "seed": seed,
           "o_rel_l2": rel(dec_o, full_o.astype(np.float64)),
           "state_rel_l2": rel(dec_s, full_s.astype(np.float64))}
    tol = manifest.tolerance["rel_l2"]
    res = _json_safe(res)
    fails = [f"consistency {k} {res[k]} > {tol:.1e}" for k in ("o_rel_l2", "state_rel_l2")
             if not (isinstance(res[k], float) and res[k] <= tol)]
    res["passed"] = not fails
    res["failures"] = fails
    return res


def run_check(manifest, fn, backend, seeds, device_kind, with_curve=True, with_consistency=True):
    op = OPS[manifest.op]
    shapes = manifest.shapes["gpu" if device_kind == "cuda" else "cpu"]
    cases, failures = [], []
    for seed in seeds:
        for i, shape in enumerate(shapes):
            c = check_case(manifest, op, fn, backend, shape, seed, i)
            cases.append(c)
            failures += [f"{c['id']} seed {seed}: {f}" for f in c["failures"]]
    result = {"cases": cases}
    if with_curve and manifest.curve:
        lengths = manifest.curve["gpu_T" if device_kind == "cuda" else "cpu_T"]
        result["curve"] = error_curve(manifest, op, fn, backend, lengths, seeds[0])
    if with_consistency and manifest.consistency:
        shape = manifest.consistency["gpu" if device_kind == "cuda" else "cpu"]
        dec = fn if manifest.op == "kda_decode" else baseline_decode
        pre = fn if manifest.op == "kda_prefill" else baseline_prefill
        c = consistency(manifest, dec, pre, backend, shape, seeds[0])
        result["consistency"] = c
        failures += c["failures"]
    result["failures"] = failures
    result["passed"] = not failures
    return result
