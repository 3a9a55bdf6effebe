"""`check`: correctness of a kernel against its float64 reference (SPEC section 8, gate 3).

The candidate is untrusted code. It runs only in a sandboxed worker of its own (workers.py,
kernelworker.py, sandbox.py) that receives inputs and returns outputs; this process owns the
reference, the expected values, the tolerances and every judgement, and never imports the
candidate. What the worker reports about itself (launch counts, input digests, out-of-bounds
accesses, provenance) is observed inside the candidate's process: it catches a kernel or launcher
that breaks the rules, not one that deliberately forges the worker's bookkeeping; the output
values, judged here against float64 on inputs the candidate has never seen, cannot be forged.

Per fresh seed and shape (a case), two input sets: the worker calls the kernel's public function
on the first, then on the second into the SAME buffers (outputs poisoned with NaN again), and
both results are judged, so an output cache (by address or by shape) fails. Per call: relative
L2, max-abs and per-slice errors of every output, non-finite (e.g. unwritten) elements, sentinel
tails, pool slots outside `slots`, every read-only input unchanged, the manifest's entry kernel
launched at least once, and on a CPU out-of-bounds accesses and provenance (no host code wrote
an output or in/out tensor during the call: only kernels did). The baseline kernel (the manifest's
source) runs in a worker of its own on exactly the same inputs, and a candidate whose error is
materially worse than the baseline's fails (BASELINE_FACTOR, BASELINE_FLOOR), whatever the
absolute tolerance allows. Plus, where the manifest asks: the error-versus-length curve, and
prefill(T) + M decode steps against prefill(T + M), the other half being the baseline Triton
kernel of the other op (in the baseline's worker).
"""
import hashlib
import time

import numpy as np

from .backend import OUT_SENTINEL, PAD
from .manifest import all_manifests, shape_id
from .ops import OPS, slices
from .workers import KernelSpec, Workers, load_result

__all__ = ["run_check", "compare", "metrics", "error_curve", "BASELINE_FACTOR", "BASELINE_FLOOR"]

# A candidate fails when, on the same inputs, an output's error exceeds
#     BASELINE_FACTOR * (the baseline kernel's error) + BASELINE_FLOOR
# for rel_l2, max_abs_rel or the worst slice's rel_l2. The factor leaves room for a different
# but equally precise evaluation order; the floor (about one float32 ulp, relative) for outputs
# the baseline gets almost exactly right. A rewrite that lowers precision (bf16 state, TF32 where
# the baseline used ieee, ...) is far outside both, even when inside the absolute tolerance.
BASELINE_FACTOR = 2.0
BASELINE_FLOOR = 1e-7


# metrics ----------------------------------------------------------------------------------------

def metrics(op, name, out, expect):
    """Error metrics of one output against its reference (raw floats)."""
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
    return {"rel_l2": rel_l2, "max_abs": max_abs, "max_abs_rel": max_abs / ref_max, "worst_slice": worst,
            "nonfinite": nonfinite}


def tolerance_failures(name, m, tol):
    fails = []
    if m["nonfinite"]:
        fails.append(f"{name}: {m['nonfinite']} non-finite elements (unwritten, or NaN read out of bounds)")
    if not m["rel_l2"] <= tol["rel_l2"]:
        fails.append(f"{name}: rel_l2 {m['rel_l2']:.3e} > {tol['rel_l2']:.1e}")
    w = m["worst_slice"]
    if not w["rel_l2"] <= tol["slice_rel_l2"]:
        fails.append(f"{name}: slice {w['index']} rel_l2 {w['rel_l2']:.3e} > {tol['slice_rel_l2']:.1e}")
    if not m["max_abs_rel"] <= tol["max_abs_rel"]:
        fails.append(f"{name}: max_abs_rel {m['max_abs_rel']:.3e} > {tol['max_abs_rel']:.1e}")
    return fails


def compare(op, name, out, expect, tol):
    """Error metrics of one output against its reference (JSON-safe), and the tolerance failures."""
    m = metrics(op, name, out, expect)
    return _json_safe(m), tolerance_failures(name, m, tol)


def baseline_failures(name, cand, base):
    """An output materially less accurate than the baseline's on the same inputs."""
    fails = []
    if cand["nonfinite"]:
        return fails   # already a failure of its own
    for label, c, b in (("rel_l2", cand["rel_l2"], base["rel_l2"]),
                        ("max_abs_rel", cand["max_abs_rel"], base["max_abs_rel"]),
                        ("worst slice rel_l2", cand["worst_slice"]["rel_l2"], base["worst_slice"]["rel_l2"])):
        if np.isfinite(b) and not c <= BASELINE_FACTOR * b + BASELINE_FLOOR:
            fails.append(f"{name}: {label} {c:.1e} is materially worse than the baseline's {b:.1e} on the same inputs")
    return fails


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not np.isfinite(x):
        return None if np.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _worst(per_call):
    """Per output, the worse of the calls' metrics (max of each error, total non-finite)."""
    out = {}
    for ms in per_call:
        for name, m in ms.items():
            w = out.get(name)
            if w is None:
                out[name] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in m.items()}
                continue
            for k in ("rel_l2", "max_abs", "max_abs_rel"):
                w[k] = max(w[k], m[k]) if not (np.isnan(w[k]) or np.isnan(m[k])) else float("nan")
            w["nonfinite"] += m["nonfinite"]
            if not (m["worst_slice"]["rel_l2"] <= w["worst_slice"]["rel_l2"]):
                w["worst_slice"] = dict(m["worst_slice"])
    return out


def _digest(a):
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def _tail_digest(dtype):
    dtype = np.dtype(dtype)
    return _digest(np.zeros(PAD, dtype) if dtype.kind in "iub" else np.full(PAD, np.nan, dtype))


# one call -----------------------------------------------------------------------------------------

def _arrays(op, x):
    lay = op.layout(x)
    return {n: x[n] for n in lay["inputs"] + lay["inouts"] if n in x and x[n] is not None}


def _judge_call(op, x, expect, rec, worker, rid, j, entry, tol, launches_required=True, check_untouched=True):
    """One call's raw metrics {name: m}, outputs {name: array}, failures and facts. `expect`
    None: no metrics (consistency); `tol` None: no tolerance failures (curve, baseline)."""
    fails = []
    facts = {"padding": {}, "inputs_unchanged": {}, "launches": {"entry": 0, "total": None}, "seconds": 0.0}
    if not isinstance(rec, dict):
        return {}, {}, ["the worker's report of the call is malformed or missing"], facts
    exc = rec.get("exception")
    if exc:
        exc = exc if isinstance(exc, dict) else {"type": "?", "message": str(exc)}
        fails.append(f"raised {str(exc.get('type'))[:80]}: {str(exc.get('message'))[:300]}")
    launches = rec.get("launches") if isinstance(rec.get("launches"), dict) else {}
    n_entry = launches.get("entry") if isinstance(launches.get("entry"), int) else 0
    facts["launches"] = {"entry": n_entry, "total": launches.get("total") if isinstance(launches.get("total"), int)
                         else None}
    if launches_required and n_entry < 1:
        fails.append(f"the kernel {entry} never ran")
    lay = op.layout(x)
    digests = rec.get("inputs") if isinstance(rec.get("inputs"), dict) else {}
    for name in lay["inputs"]:
        d = digests.get(name) if isinstance(digests.get(name), dict) else {}
        same = d.get("data") == _digest(x[name])
        tail = d.get("tail") == _tail_digest(x[name].dtype)
        facts["inputs_unchanged"][name] = same
        facts["padding"][name] = tail
        if not same:
            fails.append(f"input {name} was modified by the call")
        if not tail:
            fails.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")
    outs = {}
    for name in op.results:
        shape = tuple(op.result_shape(name, x))
        try:
            flat = load_result(worker.scratch, f"out/{rid}/r{j}_{name}.npy")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: no result came back ({type(e).__name__})")
            continue
        n = int(np.prod(shape))
        if flat.dtype != np.float32 or flat.ndim != 1 or flat.size != n + PAD:
            fails.append(f"{name}: came back as {flat.dtype}{list(flat.shape)}")
            continue
        outs[name] = flat[:n].reshape(shape)
        ok = bool(np.all(flat[n:] == OUT_SENTINEL))
        facts["padding"][name] = ok
        if not ok:
            fails.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")
    if op.name == "kda_decode" and "state" in outs and check_untouched:
        untouched = np.setdiff1d(np.arange(x["state"].shape[0]), x["slots"])
        intact = bool(np.array_equal(outs["state"][untouched], x["state"][untouched]))
        facts["untouched_slots_intact"] = intact
        if not intact:
            fails.append("untouched_slots_intact is false (a pool slot outside `slots` was written)")
    ms = {}
    if expect is not None:
        for name in op.results:
            if name in outs:
                ms[name] = metrics(op, name, outs[name], expect[name])
                if tol is not None:
                    fails += tolerance_failures(name, ms[name], tol)
    prov = rec.get("provenance")
    if not isinstance(prov, dict):
        facts["provenance"] = "not checked"
    else:
        facts["provenance"] = {}
        for name, a in outs.items():
            try:
                bits = np.unpackbits(load_result(worker.scratch, f"out/{rid}/r{j}_{name}.prov.npy"),
                                     count=a.size).astype(bool).reshape(a.shape)
            except Exception as e:  # noqa: BLE001
                fails.append(f"{name}: no provenance came back ({type(e).__name__})")
                continue
            bad = int(np.count_nonzero(~bits))
            facts["provenance"][name] = bad == 0
            if bad:
                fails.append(f"{name}: {bad} of {a.size} elements were written by host code, outside any kernel")
    v = rec.get("violations")
    if v is None:
        facts["out_of_bounds"] = "not checked"
    else:
        v = [e for e in v if isinstance(e, dict)] if isinstance(v, list) else []
        facts["out_of_bounds"] = v
        for e in v:
            fails.append(f"out-of-bounds {e.get('kind')}: {e.get('count')} accesses outside every tensor "
                         f"(nearest {e.get('near')})")
    s = rec.get("seconds")
    facts["seconds"] = float(s) if isinstance(s, (int, float)) else 0.0
    return ms, outs, fails, facts


def _merge_oob(lists):
    if any(isinstance(v, str) for v in lists):
        return "not checked"
    merged = {}
    for v in lists:
        for e in v:
            key = (e.get("kind"), e.get("near"))
            m = merged.setdefault(key, {"kind": e.get("kind"), "near": e.get("near"), "count": 0})
            m["count"] += int(e.get("count") or 0)
    return list(merged.values())


def _and(dicts):
    if any(isinstance(d, str) for d in dicts):
        return "not checked"
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, True) and bool(v)
    return out


# cases ------------------------------------------------------------------------------------------

class _Case:
    def __init__(self, op, shape, seed, index):
        self.shape, self.seed, self.index = shape, seed, index
        kw = {"initial_state": index % 2 == 0} if op.name == "kda_prefill" else {}
        self.xs = [op.make_inputs(shape, np.random.default_rng(seed), **kw),
                   op.make_inputs(shape, np.random.default_rng([seed, 1]), **kw)]
        self.expects = None
        self.rid = self.base_rid = None

    @property
    def id(self):
        return shape_id(self.shape)


def _not_run(case, why):
    rec = {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": False, "outputs": {}, "padding": {},
           "out_of_bounds": [], "failures": [why], "seconds": 0.0, "launches": {"entry": [], "total": []},
           "inputs_unchanged": {}}
    return rec


def _judge_case(manifest, op, case, cand, base):
    res = cand.result(case.rid)
    if "sets" not in res:
        rec = _not_run(case, str(res.get("failed", res)))
        if res.get("stderr"):
            rec["stderr"] = res["stderr"]
        return rec
    bres = base.result(case.base_rid) if base is not None and case.base_rid is not None else None
    failures, per_call, base_calls, facts_all, calls = [], [], [], [], []
    for j, x in enumerate(case.xs):
        rec = res["sets"][j] if j < len(res["sets"]) else None
        ms, _, fails, facts = _judge_call(op, x, case.expects[j], rec, cand, case.rid, j, manifest.entry,
                                          manifest.tolerance)
        if bres is not None:
            bms, _, _, _ = _judge_call(op, x, case.expects[j], bres["sets"][j], base, case.base_rid, j,
                                       manifest.entry, None, launches_required=False)
            base_calls.append(bms)
            for name, m in ms.items():
                if name in bms:
                    fails += baseline_failures(name, m, bms[name])
        prefix = "" if j == 0 else "call 2 (same buffers, new inputs): "
        failures += [prefix + f for f in fails]
        per_call.append(ms)
        facts_all.append(facts)
        calls.append({"outputs": _json_safe(ms), "seconds": round(facts["seconds"], 4),
                      "launches": facts["launches"]})
    cand.release(case.rid)
    if base is not None and case.base_rid is not None:
        base.release(case.base_rid)
    rec = {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": not failures,
           "outputs": _json_safe(_worst(per_call)),
           "padding": _and([f["padding"] for f in facts_all]),
           "out_of_bounds": _merge_oob([f.get("out_of_bounds", []) for f in facts_all]),
           "failures": failures,
           "seconds": round(sum(f["seconds"] for f in facts_all), 4),
           "launches": {"entry": [f["launches"]["entry"] for f in facts_all],
                        "total": [f["launches"]["total"] for f in facts_all]},
           "inputs_unchanged": _and([f["inputs_unchanged"] for f in facts_all]),
           "provenance": _and([f.get("provenance", "not checked") for f in facts_all]),
           "calls": calls}
    if base_calls:
        rec["baseline"] = {"outputs": _json_safe(_worst(base_calls))}
    if op.name == "kda_decode":
        rec["untouched_slots_intact"] = all(f.get("untouched_slots_intact", False) for f in facts_all)
    else:
        rec["initial_state"] = case.xs[0]["initial_state"] is not None
    return rec


# curve --------------------------------------------------------------------------------------------

def _submit_curve(manifest, op, cand, lengths, seed):
    plan = []
    for T in lengths:
        shape = dict(manifest.curve["base"], T=T)
        x = op.make_inputs(shape, np.random.default_rng(seed), long_memory=True, initial_state=False)
        rid = cand.submit("candidate", op.args, op.layout(x), [_arrays(op, x)], label=f"curve T={T}")
        plan.append((T, x, rid))
    return plan


def _judge_curve(manifest, op, cand, plan):
    points, failures = [], []
    for T, x, rid in plan:
        res = cand.result(rid)
        if "sets" not in res:
            failures.append(f"curve T={T}: {res.get('failed', res)}")
            points.append({"T": T, "rel_l2": None, "max_abs": None, "last_chunk_rel_l2": None,
                           "state_rel_l2": None, "state_max_abs": None})
            continue
        expect = op.reference(x)
        _, outs, fails, _ = _judge_call(op, x, None, res["sets"][0], cand, rid, 0, manifest.entry, None)
        failures += [f"curve T={T}: {f}" for f in fails]
        cand.release(rid)
        if "o" not in outs or "final_state" not in outs:
            points.append({"T": T, "rel_l2": None, "max_abs": None, "last_chunk_rel_l2": None,
                           "state_rel_l2": None, "state_max_abs": None})
            continue
        o, e = outs["o"].astype(np.float64), expect["o"]
        s, es = outs["final_state"].astype(np.float64), expect["final_state"]
        tail = slice(max(0, T - 64), T)
        points.append(_json_safe({
            "T": T,
            "rel_l2": float(np.linalg.norm(o - e) / np.linalg.norm(e)),
            "max_abs": float(np.abs(o - e).max()),
            "last_chunk_rel_l2": float(np.linalg.norm(o[:, tail] - e[:, tail]) / np.linalg.norm(e[:, tail])),
            "state_rel_l2": float(np.linalg.norm(s - es) / np.linalg.norm(es)),
            "state_max_abs": float(np.abs(s - es).max()),
        }))
    return points, failures


# consistency --------------------------------------------------------------------------------------

class _Consistency:
    """prefill(T) then M decode steps == prefill(T + M): last M outputs and the final state."""

    def __init__(self, shape, seed, pre_w, pre_key, dec_w, dec_key, candidate_side, pre_entry, dec_entry):
        self.shape, self.seed = shape, seed
        self.pre_entry, self.dec_entry = pre_entry, dec_entry
        self.pre_w, self.pre_key, self.dec_w, self.dec_key = pre_w, pre_key, dec_w, dec_key
        self.candidate_side = candidate_side        # "prefill" or "decode"
        B, T, M, HV, K, V = (shape[k] for k in ("B", "T", "M", "HV", "K", "V"))
        pre = OPS["kda_prefill"]
        rng = np.random.default_rng(seed)
        self.x = pre.make_inputs(dict(shape, T=T + M), rng, initial_state=True)
        self.head = {n: (a[:, :T] if n != "initial_state" else a) for n, a in self.x.items()}
        self.S = B + 2
        self.slots = rng.permutation(self.S)[:B].astype(np.int64)
        self.rid_full = pre_w.submit(pre_key, pre.args, pre.layout(self.x), [_arrays(pre, self.x)],
                                     label=f"consistency prefill(T={T + M})")
        self.rid_part = pre_w.submit(pre_key, pre.args, pre.layout(self.head), [_arrays(pre, self.head)],
                                     label=f"consistency prefill(T={T})")

    def _prefill_result(self, rid, x, fails):
        pre = OPS["kda_prefill"]
        res = self.pre_w.result(rid)
        if "sets" not in res:
            fails.append(f"consistency: {res.get('failed', res)}")
            return None
        _, outs, f, _ = _judge_call(pre, x, None, res["sets"][0], self.pre_w, rid, 0, self.pre_entry, None,
                                    launches_required=self.candidate_side == "prefill")
        if self.candidate_side == "prefill":
            fails += [f"consistency: {s}" for s in f]
        self.pre_w.release(rid)
        return outs

    def submit_decode(self):
        """Phase 2, once prefill(T) is back: the decode steps on a pool holding its final state."""
        B, T, M, HV, K, V = (self.shape[k] for k in ("B", "T", "M", "HV", "K", "V"))
        self.fails = []
        part = self._prefill_result(self.rid_part, self.head, self.fails)
        self.rid_dec = None
        if part is None or "final_state" not in part:
            return
        dec = OPS["kda_decode"]
        pool = np.zeros((self.S, HV, K, V), dtype=np.float32)
        pool[self.slots] = part["final_state"]
        self.steps = []
        for m in range(M):
            t = T + m
            step = {n: np.ascontiguousarray(self.x[n][:, t]) for n in ("q", "k", "v", "g", "beta")}
            step["slots"] = self.slots
            if m == 0:
                step["state"] = pool
            self.steps.append(step)
        layout = {"inputs": ["q", "k", "v", "g", "beta", "slots"], "inouts": ["state"],
                  "outputs": {"o": [B, HV, V]}}
        self.rid_dec = self.dec_w.submit(self.dec_key, dec.args, layout, self.steps, label=f"consistency decode x{M}")

    def judge(self, manifest):
        B, T, M, HV, K, V = (self.shape[k] for k in ("B", "T", "M", "HV", "K", "V"))
        fails = self.fails
        full = self._prefill_result(self.rid_full, self.x, fails)
        dec_o = dec_s = None
        if self.rid_dec is not None:
            res = self.dec_w.result(self.rid_dec)
            if "sets" not in res:
                fails.append(f"consistency: {res.get('failed', res)}")
            else:
                dec = OPS["kda_decode"]
                outs_o = []
                for m, step in enumerate(self.steps):
                    xm = dict(step, state=self.steps[0]["state"])   # (its shape; the pool carries over)
                    rec = res["sets"][m] if m < len(res["sets"]) else None
                    _, outs, f, _ = _judge_call(dec, xm, None, rec, self.dec_w, self.rid_dec, m, self.dec_entry, None,
                                                launches_required=self.candidate_side == "decode",
                                                check_untouched=False)
                    if self.candidate_side == "decode":
                        fails += [f"consistency step {m}: {s}" for s in f]
                    outs_o.append(outs.get("o"))
                    if m == M - 1 and "state" in outs:
                        dec_s = outs["state"][self.slots]
                if all(o is not None for o in outs_o):
                    dec_o = np.stack(outs_o, axis=1)          # [B, M, HV, V]
                self.dec_w.release(self.rid_dec)
        rel = lambda a, b: float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-30))
        res = {"shape": self.shape, "seed": self.seed, "o_rel_l2": float("inf"), "state_rel_l2": float("inf")}
        if full is not None and "o" in full and dec_o is not None:
            res["o_rel_l2"] = rel(dec_o, full["o"][:, T:].astype(np.float64))
        if full is not None and "final_state" in full and dec_s is not None:
            res["state_rel_l2"] = rel(dec_s, full["final_state"].astype(np.float64))
        tol = manifest.tolerance["rel_l2"]
        res = _json_safe(res)
        fails += [f"consistency {k} {res[k]} > {tol:.1e}" for k in ("o_rel_l2", "state_rel_l2")
                  if not (isinstance(res[k], float) and res[k] <= tol)]
        res["passed"] = not fails
        res["failures"] = fails
        return res


def _baseline_triton(op_name):
    for m in all_manifests().values():
        if m.op == op_name and m.language == "triton":
            return m
    raise LookupError(f"no Triton manifest implements {op_name}")


# the check ----------------------------------------------------------------------------------------

def run_check(manifest, source=None, seeds=(0,), device="cpu", tf32=True, with_curve=True,
              with_consistency=True, with_baseline=True, deadline=None, shapes=None):
    """The check of `source` (None: the manifest's own) on `device` ("cpu" or "cuda").

    Returns {cases, curve?, consistency?, failures, passed, device, mode, sandbox}, or
    {skipped: reason, device, mode} when the candidate cannot run here. Raises
    workers.WorkerTimeout past `deadline` (time.monotonic()), workers.WorkerFailed when a
    trusted (baseline) worker fails."""
    deadline = deadline if deadline is not None else time.monotonic() + 1800
    op = OPS[manifest.op]
    kind = "gpu" if device == "cuda" else "cpu"
    shapes = manifest.shapes[kind] if shapes is None else shapes
    against_baseline = with_baseline and source is not None
    cons_shape = manifest.consistency.get(kind) if with_consistency and manifest.consistency else None
    base_specs = {}
    if against_baseline:
        base_specs["baseline"] = KernelSpec.of(manifest)
    if cons_shape:
        other_op = "kda_prefill" if manifest.op == "kda_decode" else "kda_decode"
        base_specs["other"] = KernelSpec.of(_baseline_triton(other_op))
    mode = "native" if device == "cuda" else (
        "emulation" if manifest.language == "cuda" else ("interpreter-tf32" if tf32 else "interpreter"))
    with Workers(device, tf32, deadline) as ws:
        cand = ws.start("candidate", {"candidate": KernelSpec.of(manifest, source)}, trusted=False)
        base = ws.start("baseline", base_specs, trusted=True) if base_specs else None
        cons = None
        if cons_shape:   # first in its queue: the decode steps wait for prefill(T)
            other_entry = base_specs["other"].entry
            if manifest.op == "kda_decode":
                cons = _Consistency(cons_shape, seeds[0], base, "other", cand, "candidate", "decode",
                                    other_entry, manifest.entry)
            else:
                cons = _Consistency(cons_shape, seeds[0], cand, "candidate", base, "other", "prefill",
                                    manifest.entry, other_entry)
        cases = []
        for seed in seeds:
            for i, shape in enumerate(shapes):
                c = _Case(op, shape, seed, i)
                lay = op.layout(c.xs[0])
                sets = [_arrays(op, x) for x in c.xs]
                c.rid = cand.submit("candidate", op.args, lay, sets, label=f"case {c.id} seed {seed}")
                if against_baseline:
                    c.base_rid = base.submit("baseline", op.args, lay, sets, label=f"case {c.id} seed {seed}")
                cases.append(c)
        curve_plan = None
        if with_curve and manifest.curve:
            lengths = manifest.curve["gpu_T" if device == "cuda" else "cpu_T"]
            curve_plan = _submit_curve(manifest, op, cand, lengths, seeds[0])
        for c in cases:   # the references, while the workers run
            c.expects = [op.reference(x) for x in c.xs]
        info = cand.wait_ready()
        if info is None and cand.fatal and "needs_gpu" in cand.fatal:
            return {"skipped": cand.fatal["needs_gpu"], "device": "none (not run: the kernel cannot run here)",
                    "mode": mode, "sandbox": _sandbox(cand, base)}
        if info is None:
            why = cand.fatal.get("failed") if cand.fatal else "the candidate's worker did not start"
            return {"cases": [], "failures": [why], "passed": False, "device": "none (not run: failed to load)",
                    "mode": mode, "sandbox": _sandbox(cand, base)}
        if cons is not None:
            cons.submit_decode()
        records, failures = [], []
        for c in cases:
            rec = _judge_case(manifest, op, c, cand, base)
            records.append(rec)
            failures += [f"{rec['id']} seed {rec['seed']}: {f}" for f in rec["failures"]]
        result = {"cases": records}
        if curve_plan is not None:
            result["curve"], fails = _judge_curve(manifest, op, cand, curve_plan)
            failures += fails
        if cons is not None:
            c = cons.judge(manifest)
            result["consistency"] = c
            failures += c["failures"]
        result.update(failures=failures, passed=not failures, device=info["device"], mode=mode,
                      sandbox=_sandbox(cand, base),
                      baseline={"compared": against_baseline, "factor": BASELINE_FACTOR, "floor": BASELINE_FLOOR})
        return result


def _sandbox(cand, base):
    sb = dict(cand.sandbox)
    sb.update(workers=cand.workers + (base.workers if base else 0), crashes=cand.crashes, calls_per_case=2,
              baseline_worker="its own worker, same sandbox" if base else "none")
    return sb


def error_curve(manifest, source, lengths, seed, device="cpu", tf32=True, deadline=None):
    """The error-versus-length curve of one source alone (its own worker): [point]."""
    m = manifest
    with Workers(device, tf32, deadline or time.monotonic() + 1800) as ws:
        cand = ws.start("candidate", {"candidate": KernelSpec.of(m, source)}, trusted=False)
        op = OPS[m.op]
        plan = _submit_curve(m, op, cand, lengths, seed)
        points, fails = _judge_curve(m, op, cand, plan)
    if fails:
        raise RuntimeError("; ".join(fails))
    return points
