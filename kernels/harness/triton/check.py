"""`check`: correctness of a kernel against its float64 reference (SPEC section 8, gate 3).

The candidate is untrusted code. It runs only in a sandboxed worker of its own (worker_client.py,
worker.py, kernels/harness/sandbox/) that receives inputs and returns outputs; this process owns the
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

What the CPU runs must be what the GPU runs (on a CPU only):
- GPU specializations: per `gpu` and `bench` shape, one case at the same values of every
  constexpr the candidate's launcher passes (recorded in its worker on shape-only tensors), K and
  V kept, the sequence counts and heads reduced only as far as those constexprs stay the same;
  under the interpreter a sample of the grid's programs runs, judged on what they wrote; CUDA
  kernels on the emulation's device path (`__CUDA_ARCH__`) at the GPU's K and V.
- Program order: one case runs again with its programs (CUDA: blocks and threads) reversed and
  shuffled; outputs must agree bit for bit with the natural order's (within ORDER_ATOMIC_RTOL
  when the kernel used atomics), else its programs race.
- Drift (against the baseline, manifest `[drift]`): many decode steps or chained prefill calls,
  the state fed back, on long-memory inputs; a candidate whose error grows materially faster than
  the baseline's on the same inputs fails, whatever the per-call margin.
"""
import copy
import hashlib
import json
import secrets
import time

import numpy as np

from .backend import OUT_SENTINEL, PAD
from .basecache import BaselineCache
from ..cuda.comparisons import added_comparisons
from ..gpu_sides import cuda_params, evaluate
from .coverage import changed_lines, watchable
from .runtime_tests import new_runtime_comparisons
from ..contract import SHAPE_KEY, ContractError, load_contract
from ..manifest import find_manifest, shape_id
from .worker_client import KernelSpec, Workers, load_result

__all__ = ["run_check", "compare", "metrics", "error_curve", "error_curves", "BASELINE_FACTOR", "BASELINE_FLOOR", "DRIFT_FACTOR",
           "DRIFT_FLOOR", "ORDER_ATOMIC_RTOL", "drift_verdict", "specialization_plan"]

# A candidate fails when, on the same inputs, an output's error exceeds
#     BASELINE_FACTOR * (the baseline kernel's error) + BASELINE_FLOOR
# for rel_l2, max_abs_rel or the worst slice's rel_l2. The factor leaves room for a different
# but equally precise evaluation order; the floor (about one float32 ulp, relative) for outputs
# the baseline gets almost exactly right. A rewrite that lowers precision (bf16 state, TF32 where
# the baseline used ieee, ...) is far outside both, even when inside the absolute tolerance.
BASELINE_FACTOR = 2.0
BASELINE_FLOOR = 1e-7

# Drift: over a sequence of calls with the state fed back, a candidate fails when its final error
# exceeds DRIFT_FACTOR * the baseline's + DRIFT_FLOOR AND its error grows faster (least-squares
# slope against the step) than DRIFT_FACTOR * the baseline's slope (+ DRIFT_FLOOR / steps): a
# systematic bias per call adds up linearly, rounding noise like the baseline's does not.
DRIFT_FACTOR = 2.0
DRIFT_FLOOR = 1e-7
# Program order: outputs of different orders must be equal bit for bit, except after atomics
# (float additions in another order round differently): then within this relative L2.
ORDER_ATOMIC_RTOL = 1e-5
# GPU specializations: a case whose inputs would exceed this many elements (a variable that could
# not be reduced without changing the constexprs) is not run, and says so.
SPEC_MAX_ELEMENTS = 1 << 23


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
    lead = op.slice_lead(name)
    if isinstance(lead, int) and expect.size:
        # slices over the leading axes (state pools are large): all at once, the same choice as
        # below (the last non-finite slice, else the first largest)
        shape = expect.shape[:lead]
        n = np.maximum(np.sqrt(np.square(expect.reshape(int(np.prod(shape)), -1)).sum(axis=1)), 1e-30)
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.sqrt(np.square(diff.reshape(n.size, -1)).sum(axis=1)) / n
        bad = np.flatnonzero(~np.isfinite(e))
        k = int(bad[-1]) if bad.size else int(np.argmax(e))
        worst = {"index": [int(i) for i in np.unravel_index(k, shape)], "rel_l2": float(e[k])}
    for (idx, ref_slice), (_, out_slice) in (zip(op.slices(name, expect), op.slices(name, diff))
                                             if worst["index"] is None else ()):
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
    return op.arrays(x)


def _judge_call(op, x, expect, rec, worker, rid, j, entry, tol, launches_required=True, check_untouched=True):
    """One call's raw metrics {name: m}, outputs {name: array}, failures and facts. `expect`
    None: no metrics (consistency); `tol` None: no tolerance failures (curve, baseline). A call
    that ran a sample of its grid's programs is judged on the elements they wrote
    (facts["written"]: {name: bool array}), and every other element must be as the harness left it."""
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
    _judge_inputs(op, x, rec, facts, fails)
    outs = _read_outputs(op, x, worker, rid, j, facts, fails)
    if check_untouched and op.has("written"):
        # the contract's `written`: every other element of an in/out tensor must come back bit-identical
        for name in op.inouts:
            if name in outs and x.get(name) is not None:
                keep = ~op.written(name, x)
                intact = bool(np.array_equal(outs[name][keep].view(np.uint32),
                                             np.ascontiguousarray(x[name], dtype=np.float32)[keep].view(np.uint32)))
                facts.setdefault("untouched_intact", {})[name] = intact
                if not intact:
                    fails.append(f"untouched_intact is false ({name}: an element outside the contract's written() "
                                 "was written)")
    masks = _written_masks(op, x, rec, worker, rid, j, outs, fails)
    if masks is not None:
        facts["written"] = masks
    ms = {}
    if expect is not None:
        for name in op.results:
            if name in outs and (masks is None or name in masks):
                ms[name] = masked_metrics(op, name, outs[name], expect[name],
                                           None if masks is None else masks[name])
                if tol is not None:
                    fails += tolerance_failures(name, ms[name], tol)
    _judge_provenance(rec, outs, worker, rid, j, facts, fails)
    _judge_bounds(rec, facts, fails)
    s = rec.get("seconds")
    facts["seconds"] = float(s) if isinstance(s, (int, float)) else 0.0
    return ms, outs, fails, facts


# the parts of one call's judgement, each adding to `facts` and `fails` in the order they are reported

def _judge_inputs(op, x, rec, facts, fails):
    """The inputs as the worker saw them after the call: unchanged, and their padding intact."""
    digests = rec.get("inputs") if isinstance(rec.get("inputs"), dict) else {}
    for name in op.layout(x)["inputs"]:
        d = digests.get(name) if isinstance(digests.get(name), dict) else {}
        same = d.get("data") == _digest(x[name])
        tail = d.get("tail") == _tail_digest(x[name].dtype)
        facts["inputs_unchanged"][name] = same
        facts["padding"][name] = tail
        if not same:
            fails.append(f"input {name} was modified by the call")
        if not tail:
            fails.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")


def _read_outputs(op, x, worker, rid, j, facts, fails):
    """The outputs the worker wrote, {name: array} (those that came back well formed), their
    padding checked."""
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
    return outs


def _judge_provenance(rec, outs, worker, rid, j, facts, fails):
    """Every output element written by a kernel, none by host code (where the worker tracked it)."""
    if not isinstance(rec.get("provenance"), dict):
        facts["provenance"] = "not checked"
        return
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


def _judge_bounds(rec, facts, fails):
    """The bounds check's violations, where the worker ran it."""
    v = rec.get("violations")
    if v is None:
        facts["out_of_bounds"] = "not checked"
        return
    v = [e for e in v if isinstance(e, dict)] if isinstance(v, list) else []
    facts["out_of_bounds"] = v
    for e in v:
        fails.append(f"out-of-bounds {e.get('kind')}: {e.get('count')} accesses outside every tensor "
                     f"(nearest {e.get('near')})")


def masked_metrics(op, name, out, expect, mask=None):
    """`metrics` over the elements of `mask` only (all when None): the others count as exact."""
    if mask is None:
        return metrics(op, name, out, expect)
    return metrics(op, name, np.where(mask, out, np.float32(0)), np.where(mask, expect, 0.0))


def _written_masks(op, x, rec, worker, rid, j, outs, fails):
    """For a call that ran a sample of its programs: per result, the elements a kernel wrote
    (the worker's report), after checking that every other element holds what the harness put
    there (NaN in an output, the input in an in/out tensor): a report that hides written elements
    cannot hide a value."""
    written = rec.get("written")
    if written is None:
        return None
    lay = op.layout(x)
    ran = (rec.get("programs") or {}).get("ran") if isinstance(rec.get("programs"), dict) else None
    masks = {}
    for name, a in outs.items():
        try:
            bits = np.unpackbits(load_result(worker.scratch, f"out/{rid}/r{j}_{name}.kw.npy"),
                                 count=a.size).astype(bool).reshape(a.shape)
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: no record of the elements the programs wrote came back ({type(e).__name__})")
            continue
        if name in lay["inouts"]:
            before = np.ascontiguousarray(x[name], dtype=np.float32)
            stray = ~bits & (a.view(np.uint32) != before.view(np.uint32))
        else:
            stray = ~bits & ~np.isnan(a)
        if stray.any():
            fails.append(f"{name}: {int(stray.sum())} elements that no kernel store of the programs run wrote "
                         "changed anyway")
            bits = bits | stray     # judged too
        if not bits.any():
            fails.append(f"{name}: the {ran if ran is not None else 'sampled'} programs run wrote none of it")
        masks[name] = bits
    return masks


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
    def __init__(self, op, shape, seed, index, sets=2, optional=None, salt=(), flags=True):
        self.shape, self.seed, self.index = shape, seed, index
        # the contract's OPTIONAL inputs: present in even cases, None in odd ones
        self.optional = index % 2 == 0 if optional is None else optional
        rngs = [np.random.default_rng([seed, *salt]) if salt else np.random.default_rng(seed),
                np.random.default_rng([seed, 1, *salt])]
        without = () if self.optional else op.optional
        self.xs = [op.make_inputs(shape, rngs[i], without=without) for i in range(sets)]
        # the mode flags (bool scalar INPUTS, a launcher's `use_gate: bool`): True in even cases, False
        # in odd ones, whatever the contract drew, so every branch a flag selects runs in some case
        # (a flag the contract names in FIXED keeps its value: the kernel supports no other; so do
        # they all in a specialization, which runs a GPU shape's very launch smaller)
        self.flags = {}
        for n in op.flags(self.xs[0]) if flags else ():
            for x in self.xs:
                x[n] = index % 2 == 0
            self.flags[n] = index % 2 == 0
        # call 1 realistic; call 2 over the contract's production RANGES, their ends included: a
        # candidate that clamps or approximates outside the realistic draws fails there
        self.ranged = sets > 1 and bool(op.ranges)
        if self.ranged:
            self.xs[1] = op.extremes(self.xs[1], rngs[1])
        self.expects = None
        self.rid = self.base_rid = None
        self.base_metrics = None   # the baseline's metrics per set, from the run's cache (basecache.py)
        self.base_key = self.base_cached = None   # a specialization's baseline arrays in that cache
        self.natural = self.natural_rec = None   # call 1's outputs and report (the program-order check)
        self.autotune = None    # the `@triton.autotune` config this case's calls asked for (None: the default)
        self.autotuned = []     # the autotuned launches its first call reported (autotune.py, LAUNCHES)

    @property
    def id(self):
        return shape_id(self.shape)

    def prefix(self, j):
        """What a failure of call j + 1 is prefixed with: what that call's inputs were."""
        if j == 0:
            return ""
        return "call 2 (same buffers, " + ("inputs over the contract's ranges, extremes included" if self.ranged
                                           else "new inputs") + "): "


MAX_AUTOTUNE = 64   # configs of one autotuned kernel that a check runs (more: an error)


def _autotuned(sets):
    """The autotuned launches a call's first set reported (autotune.py, LAUNCHES), checked as data:
    [{kernel, config, of, ran, described}]. Reported from inside the candidate's process, so they
    say which configs exist, not that a kernel could not forge them (as the work profile's counts)."""
    out = []
    first = sets[0] if sets and isinstance(sets[0], dict) else {}
    for a in first.get("autotuned") or []:
        if not (isinstance(a, dict) and isinstance(a.get("of"), int) and 1 <= a["of"]):
            continue
        out.append({"kernel": str(a.get("kernel"))[:100], "of": a["of"],
                    "config": a["config"] if isinstance(a.get("config"), int) else None,
                    "ran": a.get("ran") is not False, "described": str(a.get("described", ""))[:300]})
    return out


def _autotune_label(case):
    """`autotune config 2 of 3 of kernel (BLOCK=64, num_warps=4)`, or "" for a kernel without one."""
    if not case.autotuned:
        return ""
    parts = []
    for a in case.autotuned:
        k = a["config"] if a["config"] is not None else "Triton's choice"
        note = "" if a["ran"] else "; pruned for these arguments, its first remaining config ran"
        parts.append(f"autotune config {k} of {a['of']} of {a['kernel']} ({a['described']}{note})")
    return "; ".join(dict.fromkeys(parts))


def _autotune_cases(op, cases, cand, device):
    """Every config of the candidate's autotuned kernels, on every case: a case whose first call
    launched one is run again with each config the GPU may pick (its own default ran config 0 on
    a CPU; on a GPU, Triton's autotuning chose). [(config, case)] submitted, judged by the caller."""
    n = max((a["of"] for c in cases for a in c.autotuned), default=1)
    if n > MAX_AUTOTUNE:
        raise ValueError(f"an autotuned kernel has {n} configs: more than the {MAX_AUTOTUNE} a check runs")
    if n == 1:   # one config: the one the cases ran, whoever chose it
        return []
    out = []
    for c in cases:
        if not c.autotuned:
            continue
        for i in range(1 if device == "cpu" else 0, n):
            ci = copy.copy(c)
            ci.autotune, ci.base_rid = i, None
            # what the label says until the call reports its own (a worker that died reports nothing)
            ci.autotuned = [dict(a, config=i % a["of"], ran=True, described="not reported: the call did not end")
                            for a in c.autotuned]
            lay = dict(op.layout(c.xs[0]), autotune=i)
            ci.rid = cand.submit("candidate", op.args, lay, [_arrays(op, x) for x in c.xs],
                                 label=f"case {c.id} seed {c.seed} autotune config {i}")
            out.append((i, ci))
    return out


def _not_run(case, why):
    rec = {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": False, "outputs": {}, "padding": {},
           "out_of_bounds": [], "failures": [why], "seconds": 0.0, "launches": {"entry": [], "total": []},
           "inputs_unchanged": {}}
    return rec


def _judge_case(manifest, op, case, cand, base, bcache=None):
    res = cand.result(case.rid)
    if "sets" not in res:
        rec = _not_run(case, str(res.get("failed", res)))
        if res.get("stderr"):
            rec["stderr"] = res["stderr"]
        return rec
    case.autotuned = _autotuned(res["sets"])
    bres = base.result(case.base_rid) if base is not None and case.base_rid is not None else None
    failures, per_call, base_calls, facts_all, calls = [], [], [], [], []
    for j, x in enumerate(case.xs):
        rec = res["sets"][j] if j < len(res["sets"]) else None
        ms, outs, fails, facts = _judge_call(op, x, case.expects[j], rec, cand, case.rid, j, manifest.entry,
                                             manifest.tolerance)
        if j == 0:
            case.natural, case.natural_rec = outs, rec
        bms = case.base_metrics[j] if case.base_metrics is not None else None
        if bres is not None:
            bms, _, _, _ = _judge_call(op, x, case.expects[j], bres["sets"][j], base, case.base_rid, j,
                                       manifest.entry, None, launches_required=False)
        if bms is not None:
            base_calls.append(bms)
            for name, m in ms.items():
                if name in bms:
                    fails += baseline_failures(name, m, bms[name])
        failures += [case.prefix(j) + f for f in fails]
        per_call.append(ms)
        facts_all.append(facts)
        calls.append({"outputs": _json_safe(ms), "seconds": round(facts["seconds"], 4),
                      "launches": facts["launches"]})
    cand.release(case.rid)
    if base is not None and case.base_rid is not None:
        base.release(case.base_rid)
        if bcache is not None and len(base_calls) == len(case.xs):
            bcache.put(case, base_calls)
    if len(base_calls) == len(case.xs):
        case.base_metrics = base_calls   # the same inputs under the candidate's other autotune configs
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
    if op.has("written") and op.inouts:
        rec["untouched_intact"] = all(all(f.get("untouched_intact", {"": False}).values()) for f in facts_all)
    for name in op.optional:
        rec[name] = case.xs[0][name] is not None
    if case.flags:
        rec["flags"] = dict(case.flags)
    return rec


# curve --------------------------------------------------------------------------------------------

def _variant(op, table):
    """The inputs' variant of a curve or drift: the manifest table's `variant`, else the
    contract's first VARIANTS name, else None."""
    v = (table or {}).get("variant")
    return v if v is not None else (op.variants[0] if op.variants else None)


def _curve_inputs(manifest, op, T, seed):
    var = manifest.curve.get("var", "T")
    shape = dict(manifest.curve["base"], **{var: T})
    return op.make_inputs(shape, np.random.default_rng(seed), _variant(op, manifest.curve), without=op.optional)


def _submit_curve(manifest, op, cand, lengths, seed):
    plan = []
    for T in lengths:
        x = _curve_inputs(manifest, op, T, seed)
        rid = cand.submit("candidate", op.args, op.layout(x), [_arrays(op, x)], label=f"curve T={T}")
        plan.append((T, x, rid))
    return plan


def _length_axis(op, manifest, name, T):
    """The axis of output `name` that grows with the curve's variable (None: none does)."""
    var = manifest.curve.get("var", "T")
    a = op.tensors(dict(manifest.curve["base"], **{var: T}))[name][0]
    b = op.tensors(dict(manifest.curve["base"], **{var: T + 1}))[name][0]
    return next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), None)


def _judge_curve(manifest, op, cand, plan, references=None):
    """Per length: the first output's errors (and over its last chunk along the length), and the
    next result's (`state_*`: prefill's final state)."""
    points, failures = [], []
    first = op.outputs[0]
    second = next((n for n in op.results if n != first), None)
    chunk = int(manifest.raw.get("chunk", 64))
    var = manifest.curve.get("var", "T")
    for T, x, rid in plan:
        res = cand.result(rid)
        empty = {var: T, "rel_l2": None, "max_abs": None, "last_chunk_rel_l2": None, "state_rel_l2": None,
                 "state_max_abs": None}
        if "sets" not in res:
            failures.append(f"curve T={T}: {res.get('failed', res)}")
            points.append(empty)
            continue
        # the same inputs for every variant at a length (one seed): one reference serves them all
        expect = references[T] if references is not None and T in references else op.reference(x)
        _, outs, fails, _ = _judge_call(op, x, None, res["sets"][0], cand, rid, 0, manifest.entry, None)
        failures += [f"curve T={T}: {f}" for f in fails]
        cand.release(rid)
        if any(n not in outs for n in op.results):
            points.append(empty)
            continue
        o, e = outs[first].astype(np.float64), expect[first]
        point = {var: T, "rel_l2": float(np.linalg.norm(o - e) / np.linalg.norm(e)),
                 "max_abs": float(np.abs(o - e).max())}
        axis = _length_axis(op, manifest, first, T)
        if axis is not None:
            tail = (slice(None),) * axis + (slice(max(0, T - chunk), T),)
            point["last_chunk_rel_l2"] = float(np.linalg.norm(o[tail] - e[tail]) / np.linalg.norm(e[tail]))
        if second is not None:
            s, es = outs[second].astype(np.float64), expect[second]
            point.update(state_rel_l2=float(np.linalg.norm(s - es) / np.linalg.norm(es)),
                         state_max_abs=float(np.abs(s - es).max()))
        points.append(_json_safe(point))
    return points, failures


# relations ---------------------------------------------------------------------------------------
# A manifest's [[relation]]: its `check` function (module:function next to the manifest, trusted)
# gets `run(which, shape, args)`, which calls this manifest's kernel ("self": the candidate, in its
# worker) or the `with` kernel ("with": that manifest's own source, in the baseline's worker) on
# `args` and returns its results, and answers [(label, got, expected)]; each pair must agree within
# the manifest's rel_l2 ("consistency" in the output: prefill(T) + M decode steps == prefill(T + M)).

class _RelationFailed(Exception):
    pass


class _Relation:
    def __init__(self, manifest, rel, kind, seed):
        from ..contract import _import
        self.manifest, self.rel, self.seed = manifest, rel, seed
        self.key = "other"   # the `with` kernel's key in the baseline's worker
        self.shape = dict(rel[kind])
        self.other = find_manifest(rel["with"], near=manifest.path)
        self.other_op = load_contract(self.other)
        mod, _, self.fn_name = rel["check"].rpartition(":")
        # `module` next to the manifest, or a path relative to it (`../kda/decode_contract.py`)
        self.path = (manifest.dir / (mod if mod.endswith(".py") else f"{mod}.py")).resolve()
        fn = getattr(_import(self.path), self.fn_name, None)
        if not callable(fn):
            raise ContractError(f"relation {self.path}: {self.fn_name}() is missing")
        self.fn = fn

    def judge(self, op, cand, base):
        m, fails = self.manifest, []
        where = f"relation {self.path}: {self.fn_name}()"

        def run(which, shape, args):
            if which in ("self", m.name):
                w, key, c, entry, mine = cand, "candidate", op, m.entry, True
            elif which in ("with", self.other.name):
                w, key, c, entry, mine = base, self.key, self.other_op, self.other.entry, False
            else:
                raise ContractError(f"{where}: run({which!r}): not \"self\", \"with\" or a kernel name")
            x = {n: args.get(n) for n in c.inputs + c.inouts}
            try:
                c._validate_inputs("tensors", x, shape)
            except ContractError as e:
                raise ContractError(f"{where}: run({which!r}) got arguments its contract refuses: {e}") from None
            x[SHAPE_KEY] = dict(shape)
            rid = w.submit(key, c.args, c.layout(x), [c.arrays(x)], label=f"consistency {which} {shape_id(shape)}")
            res = w.result(rid)
            if "sets" not in res:
                raise _RelationFailed(f"consistency: {res.get('failed', res)}")
            _, outs, f, _ = _judge_call(c, x, None, res["sets"][0], w, rid, 0, entry, None,
                                        launches_required=mine, check_untouched=False)
            w.release(rid)
            if mine:
                fails.extend(f"consistency: {s}" for s in f)
            missing = [n for n in c.results if n not in outs]
            if missing:
                raise _RelationFailed(f"consistency: {which} returned no {', '.join(missing)}")
            return outs

        res = {"with": self.other.name, "check": self.rel["check"], "shape": self.shape, "seed": self.seed}
        try:
            triples = self.fn(run, dict(self.shape), np.random.default_rng(self.seed))
            triples = [(str(label), np.asarray(got), np.asarray(exp)) for label, got, exp in triples]
        except _RelationFailed as e:
            fails.append(str(e))
            triples = []
        except ContractError:
            raise
        except Exception as e:  # noqa: BLE001 - the relation's own code
            raise ContractError(f"{where}: raised {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        tol = m.tolerance["rel_l2"]
        for label, got, exp in triples:
            if got.shape != exp.shape:
                raise ContractError(f"{where}: {label}: got {list(got.shape)} against expected {list(exp.shape)}")
            v = _rel(got.astype(np.float32) if got.dtype != np.float64 else got, exp.astype(np.float64))
            res[f"{label}_rel_l2"] = v
        res = _json_safe(res)
        fails += [f"consistency {label}_rel_l2 {res[f'{label}_rel_l2']} > {tol:.1e}" for label, _, _ in triples
                  if not (isinstance(res[f"{label}_rel_l2"], float) and res[f"{label}_rel_l2"] <= tol)]
        res["passed"] = not fails
        res["failures"] = fails
        return res


# GPU specializations -------------------------------------------------------------------------------
# The interpreter at the CPU shapes (K = 16..48) runs the kernel specialised for those shapes: a
# branch on a constexpr (`if K == 128:`, a block size the launcher derives from the shape) that
# only the GPU shapes take never runs. Per `gpu` and `bench` shape, the candidate's launcher is
# called in its own worker on shape-only tensors with every launch recorded, not run (the
# constexprs it would pass, without the memory); the CPU case is the smallest shape (the contract's `smaller`:
# the sequence counts, token count and heads reduced, never K or V) whose recorded constexprs are
# the same, one case per distinct set of constexprs. Under the interpreter a sample of the grid's
# programs runs (`[specializations] programs`; the grid of a GPU shape's heads is too slow to
# interpret whole), judged on the elements they wrote; a sampled call that used atomics or more
# than one launch (partial sums, or programs reading another launch's unsampled results) runs
# again on the whole grid. A CUDA kernel has no constexprs: its int parameters K and V are kept.

def _arglist(op, shape, optional):
    """The public function's arguments at `shape`: {shape, dtype} per tensor, the value of a scalar,
    None for an OPTIONAL input left out (`optional` False)."""
    out = []
    t = op.tensors(shape)
    for name in op.args:
        if name in op.optional and optional is False:
            out.append(None)
        elif isinstance(t[name], tuple):
            out.append({"shape": list(t[name][0]), "dtype": t[name][1]})
        else:
            out.append({"value": t[name]})
    return out


def _elements(arglist):
    return sum(int(np.prod(a["shape"])) for a in arglist if a is not None and "shape" in a)


def _launch_key(launched):
    """What a call specialises on: per launch, the kernel and its constexprs."""
    return [[str(l.get("kernel")), l.get("constexprs") if isinstance(l.get("constexprs"), dict) else None]
            for l in launched if isinstance(l, dict)]


def specialization_plan(op, manifest):
    """[(label, gpu shape, optional inputs present, [cpu shapes: the most reduced first, the gpu
    shape last])]: the contract's `smaller` shapes, by size."""
    shapes = [(f"gpu[{i}]", s, i % 2 == 0) for i, s in enumerate(manifest.shapes["gpu"])]
    shapes.append(("bench", manifest.shapes["bench"], True))
    plan = []
    for label, shape, flag in shapes:
        flag = flag if op.optional else None
        cands = op.smaller(shape)
        cands = sorted({json.dumps(c, sort_keys=True): c for c in cands}.values(),
                       key=lambda c: _elements(_arglist(op, c, flag)))
        if shape in cands:
            cands.remove(shape)
        plan.append((label, dict(shape), flag, cands + [dict(shape)]))
    return plan


class _Specialization:
    def __init__(self, labels, gpu_shape, shape, optional, constexprs, derived):
        self.labels, self.gpu_shape, self.shape = labels, gpu_shape, shape
        self.optional, self.constexprs, self.derived = optional, constexprs, derived
        self.case = None
        self.skipped = None

    @property
    def id(self):
        return f"{shape_id(self.shape)} [specialization of {'/'.join(self.labels)} {shape_id(self.gpu_shape)}]"


class _Specializations:
    def __init__(self, manifest, op, cand, device, bcache=None, runtime_tests=()):
        self.manifest, self.op, self.bcache = manifest, op, bcache
        cfg = manifest.raw.get("specializations", {}) or {}
        self.enabled = device == "cpu" and cfg.get("enabled", True) is not False
        programs = cfg.get("programs", 8)
        # a sample of each grid under the interpreter; the emulation (native code) runs all of it
        self.sample = int(programs) if manifest.language == "triton" and programs != "all" else None
        # which programs: drawn here, after the candidate is fixed, never from a seed it can know
        self.program_seed = secrets.randbits(32)
        # a comparison the candidate adds on a program id is a branch a sample may miss: every
        # program runs (runtime_tests.py; run_check also requires both its sides taken)
        self.runtime_tests = list(runtime_tests)
        self.sampled = self.sample
        if self.sample is not None and any(r["on"] == "program id" for r in self.runtime_tests):
            self.sample = None
        self.plan = specialization_plan(op, manifest) if self.enabled else []
        self.rid, self.items, self.note = None, [], None
        self.gpu_launches = []   # (label, the launches recorded at that GPU shape): gpu_sides.py
        if self.enabled and manifest.language == "triton":
            arglists = [_arglist(op, c, flag) for _, _, flag, cands in self.plan for c in cands]
            self.rid = cand.submit("candidate", op.args, {"inputs": [], "inouts": [], "outputs": {},
                                                          "record": arglists}, [],
                                   label="specializations (the launcher on shape-only tensors)")

    def derive(self, cand):
        """The CPU shape of each distinct specialization, from the recorded launches."""
        recorded = None
        if self.rid is not None:
            res = cand.result(self.rid)
            cand.release(self.rid)
            if isinstance(res.get("sets"), list):
                recorded = res["sets"]
            else:
                self.note = f"the launcher could not be recorded: {res.get('failed', res)}"
        seen, i = {}, 0
        # what the contract's `smaller` never reduces, at any of these shapes (our decode: K and V)
        fixed = [v for v in (self.plan[0][1] if self.plan else {})
                 if all(c.get(v) == shape.get(v) for _, shape, _, cands in self.plan for c in cands)]
        for label, shape, flag, cands in self.plan:
            recs = recorded[i:i + len(cands)] if recorded is not None else None
            i += len(cands)
            kept = {v: shape[v] for v in fixed}
            cpu, constexprs, derived = cands[0], None, None
            if self.manifest.language != "triton":
                derived = f"{' and '.join(fixed) or 'nothing'} kept (never reduced by the contract), the rest reduced"
            elif recs is None or len(recs) != len(cands):
                derived = "not verified: " + (self.note or "the recorder's answer is incomplete")
            else:
                full = recs[-1] if isinstance(recs[-1], dict) else {}
                key = _launch_key(full.get("launched") or [])
                self.gpu_launches.append((label, [x for x in full.get("launched") or [] if isinstance(x, dict)]))
                if full.get("exception") or not key:
                    exc = full.get("exception") or {}
                    why = (f"raised {exc.get('type')}: {str(exc.get('message'))[:200]}" if exc
                           else "it launched nothing")
                    derived = f"not verified: the launcher on shape-only tensors {why}"
                else:
                    # the smallest shape (cands are sorted by size) that specialises the same way
                    constexprs = key
                    for c, r in zip(cands, recs):
                        if isinstance(r, dict) and not r.get("exception") and _launch_key(r.get("launched") or []) == key:
                            cpu = c
                            break
                    derived = "recorded"
            dkey = json.dumps([constexprs if constexprs is not None else kept, flag], sort_keys=True)
            if dkey in seen:
                seen[dkey].labels.append(label)
                continue
            item = _Specialization([label], shape, dict(cpu), flag, constexprs, derived)
            if _elements(_arglist(self.op, cpu, flag)) > SPEC_MAX_ELEMENTS:
                reduced = [v for v in cpu if cpu[v] == shape[v] and v not in kept]
                item.skipped = (f"not run: {shape_id(cpu)} is too large for the CPU ({', '.join(reduced)} could not "
                                "be reduced without changing the constexprs)")
            seen[dkey] = item
            self.items.append(item)

    def submit(self, cand, base, seed):
        op = self.op
        for k, it in enumerate(self.items):
            if it.skipped:
                continue
            it.case = c = _Case(op, it.shape, seed, k, sets=1, optional=it.optional is not False, salt=(2, k),
                                flags=False)
            self._submit(it, cand, base, self.sample)

    def _submit(self, it, cand, base, sample):
        op, c = self.op, it.case
        lay = op.layout(c.xs[0])
        if sample is not None:
            lay = dict(lay, programs={"order": "natural", "seed": self.program_seed, "sample": sample})
        sets = [_arrays(op, c.xs[0])]
        c.rid = cand.submit("candidate", op.args, lay, sets, label=f"specialization {it.id}")
        # the baseline's outputs on these inputs are the same for every candidate of the run
        c.base_key = {"shape": it.shape, "seed": c.seed, "index": c.index, "initial_state": bool(it.optional),
                      "sample": sample, "programs_seed": self.program_seed if sample is not None else None}
        # a sample is drawn afresh by every check: its baseline outputs are never reused, so never kept
        c.base_cached = self.bcache.get_arrays("specialization", c.base_key) \
            if base is not None and self.bcache is not None and sample is None else None
        c.base_rid = base.submit("baseline", op.args, lay, sets, label=f"specialization {it.id}") \
            if base is not None and c.base_cached is None else None
        it.sample = sample

    def judge(self, cand, base):
        records, failures = [], []
        for it in self.items:
            rec = self._record(it)
            if it.case is not None:
                self._judge(it, cand, base, rec)
            records.append(rec)
            failures += [f"{it.id} seed {rec['seed']}: {f}" for f in rec["failures"]]
        return records, failures

    def _record(self, it):
        rec = {"id": it.id, "gpu": it.labels, "gpu_shape": it.gpu_shape, "shape": it.shape,
               "seed": it.case.seed if it.case else None, "derived": it.derived,
               "constexprs": _constexprs_json(it.constexprs),
               "passed": it.skipped is None, "failures": []}
        for name in self.op.optional:
            rec[name] = bool(it.optional)
        if it.skipped:
            rec["skipped"] = it.skipped
        return rec

    def _judge(self, it, cand, base, rec, again=False):
        op, c, m = self.op, it.case, self.manifest
        x, expect = c.xs[0], c.expects[0]
        res = cand.result(c.rid)
        bres = base.result(c.base_rid) if base is not None and c.base_rid is not None else None
        if "sets" not in res or not res["sets"]:
            rec.update(passed=False, failures=[str(res.get("failed", res))])
            return
        crec = res["sets"][0]
        _, couts, fails, cfacts = _judge_call(op, x, None, crec, cand, c.rid, 0, m.entry, None)
        ran = crec.get("programs") if isinstance(crec.get("programs"), dict) else None
        launches = cfacts["launches"]["total"] or 0
        if it.sample is not None and not again and ran and ran.get("ran", 0) < ran.get("of", 0) and \
                (crec.get("atomics") or launches > 1):
            # partial sums, or a second launch reading what unsampled programs should have written:
            # only the whole grid can be judged
            cand.release(c.rid)
            if bres is not None:
                base.release(c.base_rid)
            self._submit(it, cand, base, None)
            rec["whole_grid"] = "atomics" if crec.get("atomics") else f"{launches} launches per call"
            return self._judge(it, cand, base, rec, again=True)
        bouts, bmasks = {}, {}
        if bres is not None:
            _, bouts, _, bfacts = _judge_call(op, x, None, bres["sets"][0], base, c.base_rid, 0, m.entry, None,
                                              launches_required=False)
            bmasks = bfacts.get("written") or {}
            if self.bcache is not None and bouts and it.sample is None:
                self.bcache.put_arrays("specialization", c.base_key,
                                       {**{f"out.{n}": a for n, a in bouts.items()},
                                        **{f"mask.{n}": a for n, a in bmasks.items()}})
        elif c.base_cached is not None:
            for k, a in c.base_cached.items():
                kind, _, n = k.partition(".")
                (bouts if kind == "out" else bmasks)[n] = a
        cmasks = cfacts.get("written")
        outputs, baseline = {}, {}
        for name in op.results:
            if name not in couts or (cmasks is not None and name not in cmasks):
                continue
            cm = cmasks[name] if cmasks is not None else None
            bm = bmasks.get(name)
            if cm is not None and bm is not None and (cm & bm).any():
                cm = bm = cm & bm      # the same elements for both (their grids may differ)
            cms = masked_metrics(op, name, couts[name], expect[name], cm)
            outputs[name] = cms
            fails += tolerance_failures(name, cms, m.tolerance)
            if name in bouts:
                bms = masked_metrics(op, name, bouts[name], expect[name], bm if bmasks else None)
                baseline[name] = bms
                fails += baseline_failures(name, cms, bms)
        if it.constexprs is not None:
            got = _launch_key(crec.get("launched") or [])
            if got != it.constexprs:
                fails.append(f"the launcher passed other constexprs at {shape_id(it.shape)} ({_key_text(got)}) "
                             f"than at the GPU shape ({_key_text(it.constexprs)}): the case does not run the GPU's "
                             "specialization")
        cand.release(c.rid)
        if bres is not None:
            base.release(c.base_rid)
        rec.update(passed=not fails, failures=fails, outputs=_json_safe(outputs),
                   programs=ran if it.sample is not None and ran else "all",
                   launches={"entry": cfacts["launches"]["entry"], "total": cfacts["launches"]["total"]},
                   seconds=round(cfacts["seconds"], 4), out_of_bounds=cfacts.get("out_of_bounds"),
                   provenance=cfacts.get("provenance"))
        if baseline:
            rec["baseline"] = {"outputs": _json_safe(baseline)}

    def result(self, records):
        out = {"cases": records, "programs": self.sample if self.sample is not None else "all",
               **({"note": self.note} if self.note else {})}
        if self.sample is not None:
            out["programs_seed"] = self.program_seed
            out["programs_drawn"] = "at random when the check ran, after the candidate was fixed"
        if self.runtime_tests:
            out["runtime_tests"] = self.runtime_tests
            if self.sampled is not None and self.sample is None:
                out["programs_why"] = (f"every program (not a sample of {self.sampled}): the candidate adds a "
                                       "comparison on a program id, line " +
                                       ", ".join(str(r["line"]) for r in self.runtime_tests if r["on"] == "program id"))
        return out


def _constexprs_json(key):
    """The recorded constexprs: the one launch's {name: value}, or {kernel: {...}} per launch."""
    if not key:
        return None
    if len(key) == 1:
        return key[0][1]
    return {f"{i}:{k}": c for i, (k, c) in enumerate(key)}


def _key_text(key):
    return "; ".join(f"{k}: " + ", ".join(f"{n}={v}" for n, v in (c or {}).items()) for k, c in key)[:400]


# program order -----------------------------------------------------------------------------------

def _programs_of(rec):
    """How many programs (CUDA: threads) the call's launches had."""
    if not isinstance(rec, dict):
        return 0
    p = rec.get("programs")
    if isinstance(p, dict) and isinstance(p.get("of"), int):
        return p["of"]
    n = 0
    for l in rec.get("launched") or []:
        if isinstance(l, dict) and isinstance(l.get("grid"), list) and isinstance(l.get("block"), list):
            n += int(np.prod(l["grid"])) * int(np.prod(l["block"]))
    return n


def _rel_diff(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if not (np.array_equal(np.isfinite(a64), np.isfinite(b64))):
        return float("inf")
    f = np.isfinite(a64)
    return float(np.linalg.norm(a64[f] - b64[f]) / max(float(np.linalg.norm(a64[f])), 1e-30))


class _ProgramOrder:
    """One case again with its programs reversed (and shuffled, with three or more), on the
    inputs of its first call; the outputs must be those of the natural order, bit for bit. The
    case: the most programs (CUDA: threads of all blocks) among the cases with more than one whose
    call costs at most twice the cheapest's (or half a second more)."""

    def __init__(self, op, cases, cand, seed):
        self.op, self.seed, self.rids, self.case, self.note = op, seed, [], None, None
        ok = [c for c in cases if c.natural and all(n in c.natural for n in op.results)
              and _programs_of(c.natural_rec) >= 2]
        if not ok:
            self.note = "not run: no case has more than one program"
            return
        # the most programs among the cases whose call costs at most about the cheapest one's
        secs = {id(c): float(c.natural_rec.get("seconds") or 0.0) for c in ok}
        cheapest = min(secs.values())
        affordable = [c for c in ok if secs[id(c)] <= max(2 * cheapest, cheapest + 0.5)]
        self.case = c = max(affordable, key=lambda c: (_programs_of(c.natural_rec), -secs[id(c)]))
        self.programs = _programs_of(c.natural_rec)
        orders = ["reversed"] + (["shuffle"] if self.programs >= 3 else [])
        x = c.xs[0]
        for order in orders:
            lay = dict(op.layout(x), programs={"order": order, "seed": seed})
            self.rids.append((order, cand.submit("candidate", op.args, lay, [_arrays(op, x)],
                                                 label=f"program order {order} {c.id}")))

    def judge(self, cand, entry):
        if self.case is None:
            return {"passed": True, "note": self.note}, []
        c, op = self.case, self.op
        fails, identical, diffs = [], {}, {}
        atomics = bool(c.natural_rec.get("atomics"))
        for order, rid in self.rids:
            res = cand.result(rid)
            if "sets" not in res or not res["sets"]:
                fails.append(f"{order} order: {res.get('failed', res)}")
                continue
            rec = res["sets"][0]
            _, outs, f, _ = _judge_call(op, c.xs[0], None, rec, cand, rid, 0, entry, None)
            fails += [f"{order} order: {s}" for s in f]
            cand.release(rid)
            atomics = atomics or bool(rec.get("atomics"))
            same_all = True
            for name in op.results:
                a, b = c.natural.get(name), outs.get(name)
                if a is None or b is None:
                    continue
                same = bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
                d = 0.0 if same else _rel_diff(a, b)
                diffs.setdefault(order, {})[name] = d
                same_all = same_all and same
                if not same and not (atomics and d <= ORDER_ATOMIC_RTOL):
                    fails.append(f"{name}: result depends on program order (natural vs {order}: rel diff {d:.0e}): "
                                 "programs race")
            identical[order] = same_all
        res = {"case": c.id, "seed": c.seed, "programs": self.programs,
               "orders": ["natural"] + [o for o, _ in self.rids], "identical": identical,
               "rel_diff": _json_safe(diffs), "atomics": atomics, "passed": not fails, "failures": fails}
        return res, [f"{c.id} seed {c.seed}: {f}" for f in fails]


# drift ---------------------------------------------------------------------------------------------
# A bias below BASELINE_FACTOR x the baseline's error per call passes every per-call check and
# still adds up over a long sequence. Decode: `steps` steps in one request, the pool carried in
# the worker from step to step; prefill: `steps` chained calls of T tokens, each call's final
# state (the kernel's own) passed as the next one's initial state. Long-memory inputs (decay near
# 1, small beta), so nothing the kernel adds is forgotten; the float64 reference follows the same
# tokens from the same initial state. Candidate and baseline run on the same inputs in their own
# workers; `drift_verdict` compares how their errors grow.

def drift_verdict(name, unit, cand, base):
    """Failures (a list) when the candidate's error per step `cand` grows materially faster than
    the baseline's `base`, and the summary {final, baseline_final, slope, baseline_slope}."""
    c, b = np.asarray(cand, dtype=np.float64), np.asarray(base, dtype=np.float64)
    n = len(c)
    t = np.arange(1, n + 1, dtype=np.float64)
    summary = {"final": float(c[-1]), "baseline_final": float(b[-1]), "slope": None, "baseline_slope": None}
    if not np.all(np.isfinite(c)):
        first = int(np.argmin(np.isfinite(c)))
        return [f"drift: {name} not finite after {first + 1} {unit}"], summary
    if not np.all(np.isfinite(b)) or n < 2:
        return [], summary
    sc, sb = float(np.polyfit(t, c, 1)[0]), float(np.polyfit(t, b, 1)[0])
    summary.update(slope=sc, baseline_slope=sb)
    worse = c[-1] > DRIFT_FACTOR * b[-1] + DRIFT_FLOOR
    faster = sc > DRIFT_FACTOR * max(sb, 0.0) + DRIFT_FLOOR / n
    if not (worse and faster):
        return [], summary
    grows = f"grows {sc / sb:.0f}x faster" if sb > 0 else "grows while the baseline's does not"
    return [f"drift: {name} rel_l2 after {n} {unit} {c[-1]:.1e} is materially worse than the baseline's "
            f"{b[-1]:.1e} on the same inputs and {grows}"], summary


def _checkpoints(n):
    """About a dozen steps (1-based) to report, log-spaced, the last included."""
    return sorted({int(round(v)) for v in np.geomspace(1, n, 12)} | {n})


def _rel(a, b):
    a = a.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30)) if np.all(np.isfinite(a)) \
        else float("inf")


class _Drift:
    """`steps` calls in a row on the contract's `sequence(shape, steps, rng)` (default: independent
    inputs of the curve's variant), each call continuing the last: in/out tensors stay in the
    worker (INOUTS, one request), and the contract's CARRY outputs become the next call's inputs
    (prefill's final state its next initial state; a call per step). The float64 reference
    follows the same chain."""

    def __init__(self, manifest, op, cand, base, seed, kind, bcache=None):
        cfg = manifest.raw["drift"]
        self.op, self.manifest, self.cand, self.base, self.seed = op, manifest, cand, base, seed
        self.shape, self.steps = dict(cfg[kind]), int(cfg.get("steps", 64))
        self.unit = str(cfg.get("unit", "calls")).format(**self.shape)
        # the baseline's side depends on the seed, shape and steps only: once per run (basecache)
        self.bcache, self.bkey = bcache, {"seed": seed, "shape": self.shape, "steps": self.steps}
        self.base_series = bcache.get_series("drift", self.bkey) if bcache is not None else None
        rng = np.random.default_rng([seed, 3])
        self.carry = op.carry
        self.xs = op.sequence(self.shape, self.steps, rng, _variant(op, cfg))
        self.rids = [None, None]
        if not self.carry:
            # one request: the in/out tensors sent with the first call only (they carry over)
            sets = [op.arrays(x) if t == 0 else {n: a for n, a in op.arrays(x).items() if n not in op.inouts}
                    for t, x in enumerate(self.xs)]
            self.rids = [w.submit(key, op.args, op.layout(self.xs[0]), sets, label=f"drift: {self.steps} {self.unit}")
                         if w is not None else None for w, key in self._sides()]

    def _sides(self):
        """(worker, key) of each side run here: the baseline's only when not cached."""
        return (self.cand, "candidate"), (self.base if self.base_series is None else None, "baseline")

    def _reference_chain(self):
        """Per call, the float64 reference with the in/out (and carried) values of the last one."""
        op, refs, held = self.op, [], {}
        for x in self.xs:
            x = dict(x, **held)
            for n in op.inouts + tuple(self.carry.values()):
                if x.get(n) is not None:
                    x[n] = np.asarray(x[n], dtype=np.float64)
            r = op.reference(x)
            refs.append((x, r))
            held = {n: r[n] for n in op.inouts}
            held.update({dst: r[src] for src, dst in self.carry.items()})
        return refs

    def _errors(self, series, x, outs, ref):
        """The call's error per result (in/outs where the contract's `written` says)."""
        op = self.op
        for name in op.results:
            if name not in outs:
                series.setdefault(name, []).append(float("inf"))
                continue
            if name in op.inouts:
                m = op.written(name, x)
                series.setdefault(name, []).append(_rel(outs[name][m], ref[name][m]))
            else:
                series.setdefault(name, []).append(_rel(outs[name], ref[name]))

    def judge(self):
        op, m = self.op, self.manifest
        fails, series = [], {"candidate": {}, "baseline": {}}
        refs = self._reference_chain()
        if not self.carry:
            for side, w, rid in (("candidate", self.cand, self.rids[0]), ("baseline", self.base, self.rids[1])):
                if rid is None:
                    continue
                res = w.result(rid)
                if "sets" not in res:
                    fails.append(f"drift ({side}): {res.get('failed', res)}")
                    continue
                call_fails, sr = [], {}
                for t, x in enumerate(self.xs):
                    rec = res["sets"][t] if t < len(res["sets"]) else None
                    xj = dict(x, **{n: self.xs[0][n] for n in op.inouts})   # (their shapes: they carry over)
                    _, outs, f, _ = _judge_call(op, xj, None, rec, w, rid, t, m.entry, None,
                                                launches_required=side == "candidate")
                    if side == "candidate" and f and not call_fails:
                        call_fails = [f"drift step {t + 1}: {s}" for s in f]
                    self._errors(sr, refs[t][0], outs, refs[t][1])
                w.release(rid)
                fails += call_fails
                series[side] = sr
        else:
            series = self._chain(fails, refs)
        if self.base_series is not None:
            series["baseline"] = self.base_series
        elif self.bcache is not None and series["baseline"] and not any(
                f.startswith("drift (baseline)") for f in fails):
            self.bcache.put_series("drift", self.bkey, series["baseline"])
        result = {"shape": self.shape, "steps": self.steps, "unit": self.unit, "seed": self.seed,
                  "factor": DRIFT_FACTOR, "floor": DRIFT_FLOOR, "outputs": {}}
        cand_s, base_s = series["candidate"], series["baseline"]
        at = _checkpoints(self.steps)
        for name in cand_s:
            if name not in base_s:
                continue
            f, summary = drift_verdict(name, self.unit, cand_s[name], base_s[name])
            fails += f
            result["outputs"][name] = _json_safe(dict(
                summary, steps=at, candidate=[cand_s[name][i - 1] for i in at],
                baseline=[base_s[name][i - 1] for i in at]))
        result.update(passed=not fails, failures=fails)
        return result, fails

    def _chain(self, fails, refs):
        """A call per step and side, the CARRY outputs fed to the next call."""
        op, m = self.op, self.manifest
        held = {side: {} for _, side in self._sides() if _ is not None}
        series = {"candidate": {}, "baseline": {}}
        alive = dict.fromkeys(held, True)
        for i, x0 in enumerate(self.xs):
            xs = {side: dict(x0, **held[side]) for side in held if alive[side]}
            rids = {side: w.submit(side, op.args, op.layout(xs[side]), [op.arrays(xs[side])],
                                   label=f"drift: call {i + 1} of {self.steps}")
                    for w, side in self._sides() if w is not None and alive.get(side)}
            for w, side in self._sides():
                if side not in rids:
                    continue
                res = w.result(rids[side])
                if "sets" not in res:
                    fails.append(f"drift ({side}) call {i + 1}: {res.get('failed', res)}")
                    alive[side] = False
                    continue
                _, outs, f, _ = _judge_call(op, xs[side], None, res["sets"][0], w, rids[side], 0, m.entry, None,
                                            launches_required=side == "candidate")
                w.release(rids[side])
                if side == "candidate" and f:
                    fails += [f"drift call {i + 1}: {s}" for s in f]
                if any(n not in outs for n in op.results):
                    alive[side] = False
                    continue
                self._errors(series[side], refs[i][0], outs, refs[i][1])
                held[side] = {dst: np.ascontiguousarray(outs[src]) for src, dst in self.carry.items()}
            if not all(alive.values()):
                break
        for side in held:   # a chain that broke: the rest counts as infinitely wrong
            for name in op.results:
                e = series[side].setdefault(name, [])
                e += [float("inf")] * (self.steps - len(e))
        return series


# the check ----------------------------------------------------------------------------------------

# memory hints the interpreter does not model ---------------------------------------------------------

# Keyword arguments of tl.load/tl.store that select a cache policy on the GPU and nothing else:
# Triton's interpreter validates their values and then ignores them (interpreter.py
# create_masked_load/create_masked_store take `cache_policy` and drop it).
INTERPRETER_IGNORED = ("eviction_policy", "cache_modifier")


def _without_hints(tree):
    """The module with every string-valued hint keyword of tl.load/tl.store removed."""
    import ast

    class Strip(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("load", "store") and isinstance(f.value, ast.Name) \
                    and f.value.id == "tl":
                node.keywords = [k for k in node.keywords
                                 if not (k.arg in INTERPRETER_IGNORED and isinstance(k.value, ast.Constant)
                                         and isinstance(k.value.value, str))]
            return node
    return Strip().visit(tree)


def interpreter_identical(baseline_path, source):
    """Why the candidate `source` is, under the interpreter, the baseline's own program (None: it
    is not, or that cannot be told): its source differs from the baseline's only in string-valued
    memory hints on tl.load/tl.store (INTERPRETER_IGNORED), in a module that binds `tl` to
    triton.language. Parsed, never imported: this process never runs candidate code."""
    import ast
    try:
        base_text = open(baseline_path, encoding="utf-8").read()
        cand_text = open(source, encoding="utf-8").read()
        if base_text == cand_text:
            return None
        base, cand = ast.parse(base_text), ast.parse(cand_text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    binds_tl = any(isinstance(n, ast.Import) and any(a.name == "triton.language" and a.asname == "tl" for a in n.names)
                   for n in base.body)
    if not binds_tl:
        return None
    try:
        same = ast.dump(_without_hints(base)) == ast.dump(_without_hints(cand))
    except RecursionError:
        return None
    if not same:
        return None
    return (f"the candidate differs from the baseline only in memory hints ({', '.join(INTERPRETER_IGNORED)} "
            "on tl.load/tl.store), which the interpreter validates and ignores: on this CPU it runs the "
            "baseline's program")


def odd_shapes(manifest):
    """A second set of sizes for each CPU shape, none a multiple of a block size: every integer size
    variable made odd and different from its first size and from the other variables' (1 -> 3,
    3 -> 5, 64 -> 65), so that a grid, a mask or a tensor shape that holds only at the first sizes
    (a multiple of a block, a batch of one, two sizes equal) fails here. Variables the manifest lists
    in `[shapes] exact` keep their sizes, as do values that are not positive integers (flags,
    dtypes). Shapes that would not change are left out."""
    exact = set(manifest.shapes.get("exact") or [])
    out = []
    for shape in manifest.shapes.get("cpu") or []:
        new, used = dict(shape), set()
        for k, v in shape.items():
            if k in exact or isinstance(v, bool) or not isinstance(v, int) or v < 1:
                continue
            w = v + 1 if v % 2 == 0 else v + 2
            while w in used:
                w += 2
            used.add(w)
            new[k] = w
        if new != shape and new not in out:
            out.append(new)
    return out


def check_odd_sizes(manifest, seed, device, tf32, deadline):
    """The manifest's own kernel at `odd_shapes` (one seed, the cases only): {shapes, exact, guesses,
    passed, cases, failures (each prefixed "odd sizes: "), inconclusive?}. Only wrong, unwritten or
    out-of-bounds values count: sizes the contract cannot make (its reference or tensors() asserts a
    relation between them, HV a multiple of H) and cases whose kernel or launcher raised (a
    power-of-two tl.arange) are no evidence against the kernel or a guess, and `inconclusive` says
    which. Raises workers.WorkerTimeout past `deadline`."""
    shapes = odd_shapes(manifest)
    odd = {"shapes": shapes, "exact": manifest.shapes.get("exact") or [], "guesses": contract_guesses(manifest),
           "passed": True, "cases": [], "failures": []}
    if not shapes:
        return odd
    try:
        r = run_check(manifest, None, [seed], device, tf32=tf32, with_curve=False, with_consistency=False,
                      with_baseline=False, deadline=deadline, shapes=shapes, with_specializations=False,
                      with_order=False, with_drift=False)
    except ContractError as e:
        return dict(odd, inconclusive=f"the contract cannot make them: {e}")
    raised = {c.get("id") for c in r.get("cases", []) if any(str(f).startswith("raised ") for f in c.get("failures") or [])}
    kept = [f for f in r.get("failures", []) if not any(str(f).startswith(f"{i} ") for i in raised)]
    odd.update(passed=not kept, cases=r.get("cases", []), failures=[f"odd sizes: {f}" for f in kept])
    if raised:
        odd["inconclusive"] = f"the kernel raised at {', '.join(sorted(str(i) for i in raised))} (sizes it does not take)"
    return odd


def contract_guesses(manifest):
    """The contract's GUESSES ({what: the guess}, written by `kidiom init` for what it could not read
    in the source), as strings; {} when it has none."""
    try:
        g = getattr(load_contract(manifest).mod, "GUESSES", None)
    except ContractError:   # a contract that does not load says so in the check itself
        return {}
    return {str(k): str(v) for k, v in g.items()} if isinstance(g, dict) else {}


def run_check(manifest, source=None, seeds=(0,), device="cpu", tf32=True, with_curve=True,
              with_consistency=True, with_baseline=True, deadline=None, shapes=None,
              with_specializations=None, with_order=None, with_drift=None, baseline_cache=None):
    """The check of `source` (None: the manifest's own) on `device` ("cpu" or "cuda").

    Returns {cases, specializations?, program_order?, curve?, consistency?, drift?, failures,
    passed, device, mode, sandbox}, or {skipped: reason, device, mode} when the candidate cannot
    run here. The GPU specializations and the program order (on a CPU) and the drift (against
    the baseline) run unless turned off, by default only for the manifest's own shape matrix
    (`shapes` None). Raises workers.WorkerTimeout past `deadline` (time.monotonic()),
    workers.WorkerFailed when a trusted (baseline) worker fails. `baseline_cache`: a directory where
    the baseline's metrics per case are kept for the other checks of a run (basecache.py); a case
    found there does not run the baseline again."""
    deadline = deadline if deadline is not None else time.monotonic() + 1800
    op = load_contract(manifest)
    if manifest.language == "cuda" and not op.has("launch"):
        raise ContractError(f"contract {op.path}: launch() is missing (a CUDA kernel's grid, block and parameters)")
    kind = "gpu" if device == "cuda" else "cpu"
    full = shapes is None
    # a candidate that is the baseline's program under the interpreter: every shape on one seed,
    # its outputs required to equal the baseline's exactly; the other seeds, the GPU
    # specializations, the curve, the drift, the program order and the consistency would rerun
    # the baseline's own program (on a GPU, where the hints matter, everything runs)
    same_program = None
    if source is not None and device == "cpu" and manifest.language == "triton" and with_baseline:
        same_program = interpreter_identical(manifest.source_path, source)
    if same_program is not None:
        not_run = [f"seeds after the first ({len(seeds) - 1})"] if len(seeds) > 1 else []
        not_run += [n for n, on in (("GPU specializations", with_specializations is not False),
                                    ("curve", with_curve and manifest.curve), ("consistency", with_consistency),
                                    ("drift", with_drift is not False), ("program order", with_order is not False))
                    if on]
        seeds, with_curve, with_consistency, with_drift, with_order = seeds[:1], False, False, False, False
        with_specializations = False
    shapes = manifest.shapes[kind] if shapes is None else shapes
    against_baseline = with_baseline and source is not None
    with_specializations = full if with_specializations is None else with_specializations
    with_order = full if with_order is None else with_order
    with_drift = full if with_drift is None else with_drift
    with_drift = with_drift and against_baseline and kind in (manifest.raw.get("drift") or {})
    relations = [_Relation(manifest, r, kind, seeds[0]) for r in manifest.relations if r.get(kind)] \
        if with_consistency else []
    base_specs = {}
    if against_baseline:
        base_specs["baseline"] = KernelSpec.of(manifest)
    for i, rel in enumerate(relations):   # each partner hosted by the baseline's worker
        rel.key = "other" if i == 0 else f"other{i}"
        base_specs[rel.key] = KernelSpec.of(rel.other)
    bcache = BaselineCache(baseline_cache, manifest, device, tf32) if baseline_cache and against_baseline else None
    mode = "native" if device == "cuda" else (
        "emulation" if manifest.language == "cuda" else ("interpreter-tf32" if tf32 else "interpreter"))
    with Workers(device, tf32, deadline) as ws:
        runtime_tests = _runtime_tests(manifest, source) if device == "cpu" else []
        changed = _changed_lines(manifest, source) if device == "cpu" else None
        cand = ws.start("candidate", {"candidate": KernelSpec.of(manifest, source, sides=runtime_tests,
                                                                 lines=changed["watched"] if changed else ())},
                        trusted=False)
        # with a baseline cache the baseline's worker may have nothing to do: it starts when asked
        base = ws.start("baseline", base_specs, trusted=True, lazy=bcache is not None) if base_specs else None
        cases = []
        for seed in seeds:
            for i, shape in enumerate(shapes):
                c = _Case(op, shape, seed, i)
                lay = op.layout(c.xs[0])
                sets = [_arrays(op, x) for x in c.xs]
                c.rid = cand.submit("candidate", op.args, lay, sets, label=f"case {c.id} seed {seed}")
                if against_baseline:
                    c.base_metrics = bcache.get(c, len(c.xs)) if bcache is not None else None
                    if c.base_metrics is None:
                        c.base_rid = base.submit("baseline", op.args, lay, sets, label=f"case {c.id} seed {seed}")
                cases.append(c)
        base_kernel = base if against_baseline else None
        spec = _Specializations(manifest, op, cand, device, bcache, runtime_tests) \
            if with_specializations and device == "cpu" else None
        curve_plan = None
        if with_curve and manifest.curve:
            lengths = manifest.curve["gpu_T" if device == "cuda" else "cpu_T"]
            curve_plan = _submit_curve(manifest, op, cand, lengths, seeds[0])
        drift = _Drift(manifest, op, cand, base, seeds[0], kind, bcache) if with_drift else None
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
        records, failures = [], []
        for c in cases:
            rec = _judge_case(manifest, op, c, cand, base, bcache)
            records.append(rec)
            label = _autotune_label(c)
            at = f" ({label})" if label else ""
            failures += [f"{rec['id']} seed {rec['seed']}{at}: {f}" for f in rec["failures"]]
        result = {"cases": records}
        # `@triton.autotune`: the same cases under each of the other configs (the rest of the
        # check, specializations to drift, runs the default: config 0 on a CPU)
        tuned = _autotune_cases(op, cases, cand, device)
        if tuned or any(c.autotuned for c in cases):
            runs = []
            for i, ci in tuned:
                rec = _judge_case(manifest, op, ci, cand, None, None)
                rec["autotune"] = i
                runs.append(rec)
                failures += [f"{rec['id']} seed {rec['seed']} ({_autotune_label(ci) or f'autotune config {i}'}): {f}"
                             for f in rec["failures"]]
            result["autotune"] = {
                "kernels": sorted({a["kernel"] for c in cases for a in c.autotuned}),
                "configs": max((a["of"] for c in cases for a in c.autotuned), default=1),
                "default": "config 0" if device == "cpu" else "Triton's autotuning", "cases": runs}
        order = _ProgramOrder(op, cases, cand, seeds[0]) if with_order and device == "cpu" else None
        if spec is not None:
            spec.derive(cand)
            spec.submit(cand, base_kernel, seeds[0])
            for it in spec.items:   # the references, while the workers run
                if it.case is not None:
                    it.case.expects = [op.reference(it.case.xs[0])]
        if curve_plan is not None:
            result["curve"], fails = _judge_curve(manifest, op, cand, curve_plan)
            failures += fails
        for i, rel in enumerate(relations):   # the first is `consistency`, every one in `relations`
            c = rel.judge(op, cand, base)
            if i == 0:
                result["consistency"] = c
            if len(relations) > 1:
                result.setdefault("relations", []).append(c)
            failures += c["failures"]
        if spec is not None:
            recs, fails = spec.judge(cand, base_kernel)
            result["specializations"] = spec.result(recs)
            failures += fails
        if order is not None:
            result["program_order"], fails = order.judge(cand, manifest.entry)
            failures += fails
        if drift is not None:
            result["drift"], fails = drift.judge()
            failures += fails
        if runtime_tests:
            envs = _gpu_envs(manifest, op, source, spec)
            result["runtime_tests"], fails = _judge_sides(runtime_tests, cand.sides, envs, manifest.language)
            failures += fails
        if changed:
            result["coverage"] = _coverage(changed, cand.lines_ran)
        emulation = (info.get("emulation") or {}).get("candidate") if isinstance(info.get("emulation"), dict) else None
        if isinstance(emulation, dict):
            result["emulation"] = emulation
            if failures and emulation.get("differs_from_host"):
                # name the class: what failed is the code the GPU compiles, not the host path
                # (first, so that a summary of the first failures names it)
                failures.insert(0, f"device path: the source reads differently under __CUDA_ARCH__ "
                                   f"{emulation.get('cuda_arch')}; the failures that follow are the device path's, "
                                   "which the emulation ran as the GPU would")
        if same_program is not None:
            # the claim is checked on what ran: the same program gives the very same errors
            differs = [r["id"] for r in records if r.get("baseline") and r["outputs"] != r["baseline"]["outputs"]]
            if differs:
                failures.append(f"the candidate should run the baseline's program under the interpreter (memory "
                                f"hints only), but its errors differ from the baseline's on {', '.join(differs)}")
            result["same_program"] = {"why": same_program, "not_run": not_run}
        result.update(failures=failures, passed=not failures, device=info["device"], mode=mode,
                      sandbox=_sandbox(cand, base),
                      baseline={"compared": against_baseline, "factor": BASELINE_FACTOR, "floor": BASELINE_FLOOR,
                                **({"cache": bcache.describe()} if bcache is not None else {})})
        return result


def _changed_lines(manifest, source):
    """The candidate's changed lines, and those of them a worker can watch run (coverage.py): a
    Triton candidate's on a CPU; None without a change to watch."""
    if manifest.language != "triton" or source is None:
        return None
    try:
        base_text = manifest.source_path.read_text(encoding="utf-8")
        cand_text = open(source, encoding="utf-8").read()
        lines = changed_lines(base_text, cand_text)
        watched = watchable(cand_text, lines)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None   # the static gate reports what does not read or parse
    return {"lines": lines, "watched": watched} if lines else None


def _coverage(changed, ran):
    """Which changed lines some case ran. A change whose every line is in a function body that no
    case reached is `unverified`: the cases passed without running it (a branch of a mode flag
    the contract fixes, a launcher it never calls)."""
    unrun = [n for n in changed["watched"] if n not in ran]
    rec = {"changed": changed["lines"], "watched": changed["watched"], "unrun": unrun}
    if unrun and len(unrun) == len(changed["lines"]):
        rec["unverified"] = (f"no CPU case ran the change (line{'s' if len(unrun) > 1 else ''} "
                             f"{', '.join(map(str, unrun))}): it lies in code only other inputs, flags or "
                             "launches reach; a case (a shape, a flag's value, an OPTIONAL input) that runs it verifies it")
    return rec


def _runtime_tests(manifest, source):
    """The comparisons a candidate adds on values known only at run time: a Triton kernel's on a
    program id, a runtime parameter or a loaded value (runtime_tests.py), a CUDA kernel's all
    (cuda/comparisons.py)."""
    if manifest.language not in ("triton", "cuda") or source is None:
        return []
    try:
        base_text = manifest.source_path.read_text(encoding="utf-8")
        cand_text = open(source, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        return []
    if manifest.language == "cuda":
        return added_comparisons(base_text, cand_text)
    return new_runtime_comparisons(base_text, cand_text)


def _gpu_envs(manifest, op, source, spec):
    """[(label, sizes, grid)] per GPU and bench shape: what the candidate's kernel is passed there
    (gpu_sides.py); [] when it cannot be told."""
    if manifest.language == "cuda":
        try:
            names = cuda_params(open(source, encoding="utf-8").read(), manifest.entry)
        except (OSError, UnicodeDecodeError):
            return []
        shapes = [(f"gpu[{i}]", s) for i, s in enumerate(manifest.shapes["gpu"])] + [("bench", manifest.shapes["bench"])]
        out = []
        for label, shape in shapes:
            try:
                launch = op.launch(shape)
            except Exception:  # noqa: BLE001 - the contract's; the GPU's side stays unknown
                return []
            params = list(launch.get("params") or [])
            if names is None or len(names) != len(params):
                return []
            env = {n: (p.get("int") if "int" in p else p.get("float")) for n, p in zip(names, params)
                   if isinstance(p, dict) and ("int" in p or "float" in p)}
            dims = lambda v: (list(v) if isinstance(v, (list, tuple)) else [v]) + [1] * 3  # noqa: E731
            env.update(gridDim=dims(launch.get("grid"))[:3], blockDim=dims(launch.get("block"))[:3])
            out.append((label, env, None))
        return out
    if spec is None:
        return []
    out = []
    for label, launched in spec.gpu_launches:
        mine = [x for x in launched if x.get("kernel") == manifest.entry]
        if not mine:
            return []
        for x in mine:
            env = dict(x.get("constexprs") or {}, **(x.get("scalars") or {}))
            out.append((label, env, x.get("grid")))
    return out


def _judge_sides(tests, sides, envs=(), language="triton"):
    """Every comparison the candidate adds on a runtime value must have taken both its sides in
    some program of some call the CPU checked: a side only the GPU's sizes or programs take is
    code no check ran (issue #50, class 5). A side no CPU case took passes only where the
    comparison reads nothing but sizes and no GPU shape takes it either (`envs`, gpu_sides.py).
    `sides`: {line: [true seen, false seen]}."""
    records, fails = [], []
    for t in tests:
        seen = sides.get(int(t["line"]), [False, False])
        rec = dict(t, sides={"true": bool(seen[0]), "false": bool(seen[1])})
        records.append(rec)
        if seen[0] and seen[1]:
            continue
        pick = t.get("form") == "min/max"
        what = f"a {'minimum or maximum' if pick else 'comparison'} on a {t['on']} that the candidate adds"
        if not (seen[0] or seen[1]):
            took = "was never evaluated"
        elif pick:
            took = f"always found its first operand {'below' if seen[0] else 'above'} the second"
        else:
            took = f"was always {'true' if seen[0] else 'false'}"
        where = f"in every program of every case the CPU ran (line {t['line']}: `{t['test']}`)"
        at = [(label, evaluate(t["test"], env, language, grid)) for label, env, grid in envs]
        if (seen[0] or seen[1]) and at and all(v is not None for _, v in at):
            rec["gpu_sides"] = {label: v for label, v in at}
            missed = [label for label, v in at if not seen[0 if v else 1]]
            if not missed:
                continue   # it reads only sizes, and every GPU shape takes a side the CPU took
            fails.append(f"{what} {took} {where}, and at the GPU's {', '.join(missed)} it takes the other side, "
                         "which no case checked; the CPU's cases must take both sides")
            continue
        fails.append(f"{what} {took} {where}: the side only the GPU's sizes, programs or inputs may take was never "
                     "checked; the CPU's cases must take both sides")
    return records, fails


def _sandbox(cand, base):
    sb = dict(cand.sandbox)
    sb.update(workers=cand.workers + (base.workers if base else 0), crashes=cand.crashes, calls_per_case=2,
              baseline_worker="none" if base is None else "its own worker, same sandbox" if base.workers else
              "not started: every baseline figure was read from the baseline cache")
    return sb


def error_curves(manifest, sources, lengths, seed, device="cpu", tf32=True, deadline=None, references=None):
    """The error-versus-length curves of many variants of one kernel ({key: source}), all hosted by
    ONE sandboxed worker (one interpreter start and import for the lot, instead of one each):
    {key: [point]} for those measured, {key: why} for those that failed. The variants are candidate
    code, confined as every candidate is; they share a process with each other only, never with
    trusted code. The reference at each length is computed once here for all of them
    (`references`, {T: expect}, shared between calls when given). A worker that could not host the
    lot (one variant failed to load, or crashed it) answers nothing for the variants it did not
    measure: they are in neither dict, and the caller measures each alone (`error_curve`)."""
    m, op = manifest, load_contract(manifest)
    references = {} if references is None else references
    curves, failed = {}, {}
    with Workers(device, tf32, deadline or time.monotonic() + 1800) as ws:
        specs = {key: KernelSpec.of(m, src) for key, src in sources.items()}
        w = ws.start("candidate", specs, trusted=False)
        plans = {}
        for key in sources:
            plans[key] = []
            for T in lengths:
                x = _curve_inputs(m, op, T, seed)
                rid = w.submit(key, op.args, op.layout(x), [_arrays(op, x)], label=f"{key} curve T={T}")
                plans[key].append((T, x, rid))
        for key, plan in plans.items():
            if w.fatal is not None or w.crashes:
                break   # the rest alone: a crash or a load failure must not read as theirs
            for T, x, _ in plan:
                if T not in references:
                    references[T] = op.reference(x)
            points, fails = _judge_curve(m, op, w, plan, references)
            if w.fatal is not None or w.crashes:
                break
            if fails:
                failed[key] = "; ".join(fails)
            else:
                curves[key] = points
    return curves, failed


def error_curve(manifest, source, lengths, seed, device="cpu", tf32=True, deadline=None):
    """The error-versus-length curve of one source alone (its own worker): [point]."""
    m = manifest
    with Workers(device, tf32, deadline or time.monotonic() + 1800) as ws:
        cand = ws.start("candidate", {"candidate": KernelSpec.of(m, source)}, trusted=False)
        op = load_contract(m)
        plan = _submit_curve(m, op, cand, lengths, seed)
        points, fails = _judge_curve(m, op, cand, plan)
    if fails:
        raise RuntimeError("; ".join(fails))
    return points
