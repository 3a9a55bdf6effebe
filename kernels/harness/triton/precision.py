"""`precision`: a storage variant of a contract judged as production judges it (issue #27).

A variant manifest (`variant_of`, `[storage]`, `[budget]`, `[precision]`; kernels/README.md,
"Precision variants") names a kernel that keeps an in/out tensor (the decode's state pool) in
fewer bytes: bf16, fp8 e4m3 or int8, with its scales. Its error has two causes that the gate
tells apart:

(a) One step, per CPU shape, on default and long-memory inputs, from a stored state:
    - against the float64 reference (the same step on the dequantised stored state, kept in
      float64): what the format costs, judged against the manifest's `[budget]`;
    - against the simulated reference: the same float64 step, its result stored the way the
      format stores it (the variant's own rounding and scales; storage.py). A correct kernel
      differs from it only by float32 arithmetic: its stored state within `sim_units` of the
      format's rounding step plus ARITH_EPS of the terms each value is computed from (the variant
      contract's `magnitude`: where they cancel, float32's error exceeds the format's step at
      the small result; `state_excess` <= 1), its outputs within `sim_rel_l2`. More is a kernel bug, however small
      it is against float64.
(b) Drift: `steps` decode steps on long-memory inputs, the pool fed back in the worker, from the
    same initial values for the variant, the fp32 baseline (the `variant_of` manifest's kernel)
    and the float64 reference; the error of outputs and state per step against float64 for the
    variant, the baseline and the free-running simulation, the step where each first exceeds the
    budget, and at every step the kernel against one simulated step from its own previous stored
    state (so a kernel error is caught wherever the state wanders).
(c) The pool slots outside `slots` and their scales bit-identical; stored scales finite and
    consistent with their codes (scale = amax / qmax: each group's largest code is qmax).
(d) The verdict: kernel error beyond the simulation, or a broken (c), rejects; error beyond the
    budget (in a step, or before `budget.steps` steps) rejects with the crossing step; within it
    the variant is `within-budget`, with bytes per step of the variant and of the baseline (the
    manifests' floor formulas at the bench shape) and the speedup predicted from them for a
    bandwidth-bound decode: a GPU measures the rest.

The candidate runs only in a sandboxed worker (worker_client.py), as `check` runs it; this process
owns the inputs, the references and every judgement. The decode operation (inputs, float64
reference) is the `variant_of` manifest's contract (kernels/kda/decode_contract.py), reached through
`decode_operation()` alone; how the variant is called (its ARGS, in/outs, a CUDA launch) is the
variant manifest's own contract (kernels/kda/decode_state_contract.py: the pool's bits and scales
as tensors, declared STORED).
"""
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ..contract import SHAPE_KEY, load_contract
from ..manifest import find_manifest, eval_expr, shape_id
from .backend import OUT_SENTINEL, PAD
from .storage import Storage
from .worker_client import KernelSpec, Workers, load_result

__all__ = ["run_precision", "decode_operation", "simulate_step", "AT_STEPS"]

AT_STEPS = (1, 64, 1024, 4096)
_TOKEN = ("q", "k", "v", "g", "beta")   # a decode step's per-token inputs        # drift values reported at these steps (those run)
DEFAULT_SIM_UNITS = 1.5             # stored state vs the simulation: a tie flip, and fp32 vs float64 scales
DEFAULT_SIM_REL_L2 = 1e-5             # outputs vs the simulation: float32 arithmetic, ~100 ulp
TF_CHUNK = 512                        # drift steps simulated per batched decode call (memory: a few MB each)
# float32 arithmetic against the float64 simulation, absolute: this many float32 unit roundoffs of
# the terms a stored value is computed from (the variant contract's `magnitude`). Negligible beside
# the format's rounding step unless the terms cancel (a value far smaller than they are), where
# sim_units alone would call float32 a kernel error.
ARITH_EPS = 4 * 2.0 ** -24


def decode_operation(base=None):
    """The decode contract as this gate uses it, its one access to the operation: the contract of
    `base` (a manifest; default kda.decode's, kernels/kda/decode_contract.py), as
    (make_inputs(shape, rng, long_memory) -> {q, k, v, g, beta, state, slots} float32 / int64,
    reference(x) -> {"o": [N, HV, V], "state": [S, HV, K, V]} float64)."""
    op = load_contract(base if base is not None else find_manifest("kda.decode"))

    def make_inputs(shape, rng, long_memory=False):
        return op.strip(op.make_inputs(shape, rng, "long_memory" if long_memory else None))

    def reference(x):
        # the shape of a decode call, from its arrays (the gate builds its own dicts of inputs)
        (N, H, K), (HV, V), S = x["q"].shape, x["v"].shape[1:], x["state"].shape[0]
        return op.reference(dict(x, **{SHAPE_KEY: {"N": N, "H": H, "HV": HV, "K": K, "V": V, "S": S}}))

    return make_inputs, reference


# the simulated reference ----------------------------------------------------------------------------

def simulate_step(reference, st, x, bits, scales):
    """One step of the variant in float64 on its stored state: the stored pool dequantised, the
    float64 step, the rows of `slots` stored again as the format stores them.
    Returns (o float64, new bits, new scales, new pool float64 before storing)."""
    slots = x["slots"]
    r = reference(dict(x, state=st.decode(bits, scales)))
    nb = bits.copy()
    ns = None if scales is None else scales.copy()
    eb, es = st.encode(r["state"][slots])
    nb[slots] = eb
    if ns is not None:
        ns[slots] = es
    return r["o"], nb, ns, r["state"]


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


def _rel_rows(a, b):
    """_rel of each row of two [rows, n] arrays."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        r = np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), 1e-30)
    return np.where(np.all(np.isfinite(a), axis=1), r, np.inf)


def _max_abs_rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def _units_map(st, kb, ks, sb, ss):
    """|kernel - simulation| of stored rows (bits and scales of the same rows), per element, in the
    format's rounding steps (the simulation's)."""
    k, s, u = st.decode(kb, ks), st.decode(sb, ss), st.unit(sb, ss)
    d = np.where(np.isfinite(k), np.abs(k - s), np.inf)
    return np.where(d == 0, 0.0, d / np.maximum(u, np.finfo(np.float64).tiny))


def _excess_map(st, kb, ks, sb, ss, mag, sim_units):
    """|kernel - simulation| of stored rows over what a correct float32 kernel may differ by, per
    element: sim_units rounding steps plus ARITH_EPS of the terms' magnitude (`mag`, of the same
    rows; None: 0). At most 1 passes."""
    k, s = st.decode(kb, ks), st.decode(sb, ss)
    allowed = sim_units * st.unit(sb, ss)
    if mag is not None:
        allowed = allowed + ARITH_EPS * mag
    d = np.where(np.isfinite(k), np.abs(k - s), np.inf)
    return np.where(d == 0, 0.0, d / np.maximum(allowed, np.finfo(np.float64).tiny))


def _rows(a, slots):
    return None if a is None else a[slots]


def _units(st, kb, ks, sb, ss, slots):
    """Largest |kernel - simulation| of the stored rows, in the format's rounding steps (the
    simulation's), and the fraction of codes that differ."""
    u = _units_map(st, kb[slots], _rows(ks, slots), sb[slots], _rows(ss, slots))
    return float(u.max()), float(np.mean(kb[slots] != sb[slots]))


def _excess(st, kb, ks, sb, ss, slots, mag, sim_units):
    """Largest |kernel - simulation| of the stored rows over what a correct float32 kernel may
    differ by (_excess_map). At most 1 passes."""
    return float(_excess_map(st, kb[slots], _rows(ks, slots), sb[slots], _rows(ss, slots),
                             _rows(mag, slots), sim_units).max())


def _digest(a):
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def _tail_digest(dtype):
    dtype = np.dtype(dtype)
    return _digest(np.zeros(PAD, dtype) if dtype.kind in "iub" else np.full(PAD, np.nan, dtype))


# one call of a worker -----------------------------------------------------------------------------

class _Call:
    """How one kernel is called, from its contract at `shape`: its positional arguments, which are
    inputs, in/outs, outputs, and (CUDA) the launch: grid, block and parameters."""

    def __init__(self, contract, shape, cuda):
        t = contract.tensors(shape)
        self.args = list(contract.args)
        self.inouts = list(contract.inouts)
        self.inputs = [a for a in contract.inputs if isinstance(t[a], tuple)]
        self.outputs = {n: list(t[n][0]) for n in contract.outputs}
        self.launch = contract.launch(shape) if cuda else None

    def layout(self):
        lay = {"inputs": self.inputs, "inouts": self.inouts, "outputs": self.outputs}
        if self.launch is not None:
            lay["launch"] = self.launch
        return lay


class _Rows:
    """The result files of one request: per set (`r<j>_<name>.npy`), or stacked (one
    `r_<name>.npy` per name, [sets, buffer], read once; worker.py `stacked`)."""

    def __init__(self, worker, rid, stacked=False):
        self.worker, self.rid, self.stacked, self.files = worker, rid, stacked, {}

    def get(self, j, name):
        if not self.stacked:
            return load_result(self.worker.scratch, f"out/{self.rid}/r{j}_{name}.npy")
        if name not in self.files:
            self.files[name] = load_result(self.worker.scratch, f"out/{self.rid}/r_{name}.npy")
        rows = self.files[name]
        if rows.ndim != 2 or not 0 <= j < rows.shape[0]:
            raise ValueError(f"r_{name}.npy has no row {j}")
        return rows[j]


def _read_call(worker, rid, j, rec, call, x, shapes, entry, required=True, rows=None):
    """One call's results {name: array} and its failures (exception, launches, inputs modified,
    sentinels, out-of-bounds accesses, host writes). `rows`: where its result files are (default:
    per set)."""
    rows = rows if rows is not None else _Rows(worker, rid)
    fails = []
    if not isinstance(rec, dict):
        return {}, ["the worker's report of the call is malformed or missing"]
    exc = rec.get("exception")
    if exc:
        exc = exc if isinstance(exc, dict) else {"type": "?", "message": str(exc)}
        fails.append(f"raised {str(exc.get('type'))[:80]}: {str(exc.get('message'))[:300]}")
    n_entry = (rec.get("launches") or {}).get("entry", 0) if isinstance(rec.get("launches"), dict) else 0
    if required and not (isinstance(n_entry, int) and n_entry >= 1):
        fails.append(f"the kernel {entry} never ran")
    digests = rec.get("inputs") if isinstance(rec.get("inputs"), dict) else {}
    for name in call.inputs:
        if name not in x:
            continue
        d = digests.get(name) if isinstance(digests.get(name), dict) else {}
        if d.get("data") != _digest(x[name]):
            fails.append(f"input {name} was modified by the call")
        if d.get("tail") != _tail_digest(x[name].dtype):
            fails.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")
    outs = {}
    for name, (shape, dtype) in shapes.items():
        try:
            flat = rows.get(j, name)
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: no result came back ({type(e).__name__})")
            continue
        n = int(np.prod(shape))
        if flat.dtype != np.dtype(dtype) or flat.ndim != 1 or flat.size != n + PAD:
            fails.append(f"{name}: came back as {flat.dtype}{list(flat.shape)}, not {np.dtype(dtype)}")
            continue
        outs[name] = flat[:n].reshape(shape)
        sentinel = 0 if np.dtype(dtype).kind in "iub" else OUT_SENTINEL
        if not np.all(flat[n:] == sentinel):
            fails.append(f"{name}: sentinel padding after the tensor was overwritten (out-of-bounds write)")
    v = rec.get("violations")
    for e in (v if isinstance(v, list) else []):
        if isinstance(e, dict):
            fails.append(f"out-of-bounds {e.get('kind')}: {e.get('count')} accesses outside every tensor")
    prov = rec.get("provenance")
    if isinstance(prov, dict):
        for name, a in outs.items():
            try:
                bits = np.unpackbits(rows.get(j, f"{name}.prov"), count=a.size)
            except Exception:  # noqa: BLE001
                continue
            bad = int(np.count_nonzero(bits == 0))
            if bad:
                fails.append(f"{name}: {bad} of {a.size} elements were written by host code, outside any kernel")
    return outs, fails


# the gate ---------------------------------------------------------------------------------------

class _Variant:
    """What the variant manifest declares, read once."""

    def __init__(self, manifest):
        raw = manifest.raw
        for key in ("variant_of", "storage", "budget"):
            if key not in raw:
                raise ValueError(f"manifest {manifest.path.name}: a precision variant needs `{key}` "
                                 "(kernels/README.md, \"Precision variants\")")
        self.m = manifest
        self.base = find_manifest(raw["variant_of"])
        self.st = Storage(raw["storage"])
        self.budget = {k: float(v) for k, v in raw["budget"].items() if k in ("o_rel_l2", "state_rel_l2")}
        self.horizon = int(raw["budget"].get("steps", 4096))
        prec = raw.get("precision", {})
        self.sim_units = float(prec.get("sim_units", DEFAULT_SIM_UNITS))
        self.sim_rel_l2 = float(prec.get("sim_rel_l2", DEFAULT_SIM_REL_L2))
        self.drift_shape = dict(prec.get("drift", {"N": 1, "H": 1, "HV": 1, "K": 32, "V": 32, "S": 3}))
        # the variant's contract says how it is called (the pool's bits and scales among its ARGS);
        # its stored in/outs must be the [storage] table's
        self.contract = load_contract(manifest)
        stored = [self.st.tensor] + ([self.st.scale_tensor] if self.st.scale_tensor else [])
        if sorted(self.contract.inouts) != sorted(stored):
            raise ValueError(f"manifest {manifest.path.name}: its contract's INOUTS {list(self.contract.inouts)} "
                             f"are not the [storage] table's tensors {stored}")
        declared = getattr(self.contract.mod, "STORAGE", None)
        if isinstance(declared, dict) and declared.get("dtype") != raw["storage"].get("dtype"):
            raise ValueError(f"manifest {manifest.path.name}: its contract stores {declared.get('dtype')}, "
                             f"its [storage] says {raw['storage'].get('dtype')}")
        self.base_contract = load_contract(self.base)
        cuda = manifest.language == "cuda"
        self.cand_call = lambda shape: _Call(self.contract, shape, cuda)
        self.base_call = lambda shape: _Call(self.base_contract, shape, self.base.language == "cuda")

    def stored(self, pool):
        """(arrays the kernel receives for the pool, bits, scales, the float64 values they hold)."""
        bits, scales = self.st.encode(pool)
        arrays = {self.st.tensor: bits}
        if self.st.scale_tensor:
            arrays[self.st.scale_tensor] = scales
        return arrays, bits, scales, self.st.decode(bits, scales)

    def result_shapes(self, x, bits, scales):
        s = {"o": (tuple(x["v"].shape), np.float32), self.st.tensor: (bits.shape, bits.dtype)}
        if self.st.scale_tensor:
            s[self.st.scale_tensor] = (scales.shape, np.float32)
        return s

    def magnitude(self, x, bits, scales):
        """The variant contract's `magnitude` of the stored tensor for the step on `x` from the
        stored `bits`, `scales` (None when the contract has none: the rounding steps alone)."""
        c = self.contract
        if not c.has("magnitude"):
            return None
        xv = dict({n: x[n] for n in ("q", "k", "v", "g", "beta", "slots")}, **{self.st.tensor: bits})
        if self.st.scale_tensor:
            xv[self.st.scale_tensor] = scales
        m = np.asarray(c._call("magnitude", self.st.tensor, xv), dtype=np.float64)
        if m.shape != bits.shape or not np.all(np.isfinite(m)):
            raise c.fail("magnitude", f"{self.st.tensor}: finite float64 of shape {list(bits.shape)}, "
                         f"got {list(m.shape)}")
        return m

    def crossed(self, o_err, s_err):
        return o_err > self.budget.get("o_rel_l2", np.inf) or s_err > self.budget.get("state_rel_l2", np.inf)


def _bytes(manifest, shape):
    try:
        return float(eval_expr(manifest.floor["bytes"], shape))
    except Exception:  # noqa: BLE001
        return None


def _first(flags):
    idx = np.flatnonzero(flags)
    return int(idx[0]) + 1 if idx.size else None


def _curve_points(n):
    pts = {int(round(v)) for v in np.geomspace(1, n, 24)} | {t for t in AT_STEPS if t <= n} | {n}
    return sorted(pts)


class _Cases:
    """(a) and (c): one step per CPU shape, default and long-memory inputs."""

    def __init__(self, var, make_inputs, reference, cand, base, seed):
        self.var, self.items = var, []
        for i, shape in enumerate(var.m.shapes["cpu"]):
            for long_memory in (False, True):
                rng = np.random.default_rng([seed, i, int(long_memory), 27])
                x = make_inputs(shape, rng, long_memory)
                arrays, bits, scales, pool0 = var.stored(x["state"])
                inputs = {n: x[n] for n in ("q", "k", "v", "g", "beta", "slots")}
                cc, bc = var.cand_call(shape), var.base_call(shape)
                it = {"id": f"{shape_id(shape)}-{'long' if long_memory else 'default'}", "shape": shape, "x": x,
                      "bits": bits, "scales": scales, "pool0": pool0, "cc": cc, "bc": bc}
                it["rid"] = cand.submit("candidate", cc.args, cc.layout(), [dict(inputs, **arrays)],
                                        label=f"precision case {it['id']}")
                it["brid"] = base.submit("baseline", bc.args, bc.layout(),
                                         [dict(inputs, state=pool0.astype(np.float32))],
                                         label=f"precision case {it['id']}")
                self.items.append(it)
        for it in self.items:   # the references while the workers run
            x = it["x"]
            it["ref"] = reference(dict(x, state=it["pool0"]))
            it["sim"] = simulate_step(reference, var.st, x, it["bits"], it["scales"])

    def judge(self, cand, base):
        var, st = self.var, self.var.st
        records, reasons = [], []
        for it in self.items:
            x, slots = it["x"], it["x"]["slots"]
            rec = {"id": it["id"], "inputs": "long_memory" if it["id"].endswith("long") else "default",
                   "failures": []}
            res = cand.result(it["rid"])
            if "sets" not in res:
                rec["failures"].append(str(res.get("failed") or res.get("needs_gpu") or res))
                records.append(rec)
                continue
            xin = {n: x[n] for n in ("q", "k", "v", "g", "beta", "slots")}
            outs, fails = _read_call(cand, it["rid"], 0, res["sets"][0], it["cc"], xin,
                                     var.result_shapes(x, it["bits"], it["scales"]), var.m.entry)
            rec["failures"] += fails
            cand.release(it["rid"])
            o64, pool64 = it["ref"]["o"], it["ref"]["state"]
            so, sb, ss, _ = it["sim"]
            if "o" in outs and st.tensor in outs:
                kb, ks = outs[st.tensor], outs.get(st.scale_tensor) if st.scale_tensor else None
                kv = st.decode(kb, ks)
                units, differ = _units(st, kb, ks, sb, ss, slots)
                excess = _excess(st, kb, ks, sb, ss, slots, var.magnitude(x, it["bits"], it["scales"]), var.sim_units)
                rec["vs_float64"] = {"o_rel_l2": _rel(outs["o"], o64), "o_max_abs_rel": _max_abs_rel(outs["o"], o64),
                                     "state_rel_l2": _rel(kv[slots], pool64[slots]),
                                     "state_max_abs_rel": _max_abs_rel(kv[slots], pool64[slots])}
                rec["vs_simulated"] = {"o_rel_l2": _rel(outs["o"], so), "state_units": units,
                                       "state_excess": excess, "codes_differ": differ}
                # the simulation's own error: what the format costs in this step
                rec["simulated_vs_float64"] = {"o_rel_l2": _rel(so, o64),
                                               "state_rel_l2": _rel(st.decode(sb, ss)[slots], pool64[slots])}
                untouched = np.setdiff1d(np.arange(kb.shape[0]), slots)
                intact = bool(np.array_equal(kb[untouched], it["bits"][untouched]))
                if ks is not None:
                    intact = intact and bool(np.array_equal(ks[untouched].view(np.uint32),
                                                            it["scales"][untouched].view(np.uint32)))
                problems = st.scale_problems(kb[slots], None if ks is None else ks[slots])
                rec["checks"] = {"untouched_slots_intact": intact, "scales_consistent": not problems}
                if not intact:
                    rec["failures"].append("a pool slot (or its scales) outside `slots` was written")
                rec["failures"] += [f"stored state: {p}" for p in problems]
                if not (excess <= 1.0):
                    rec["failures"].append(f"kernel error beyond its quantization: the stored state is "
                                           f"{units:.3g} rounding steps from the simulated reference "
                                           f"(allowed {var.sim_units:g}, and float32 arithmetic of the terms)")
                if not (rec["vs_simulated"]["o_rel_l2"] <= var.sim_rel_l2):
                    rec["failures"].append(f"kernel error beyond its quantization: o is {rec['vs_simulated']['o_rel_l2']:.2e} "
                                           f"(rel_l2) from the simulated reference (allowed {var.sim_rel_l2:.0e})")
            bres = base.result(it["brid"])
            if "sets" in bres:
                bouts, _ = _read_call(base, it["brid"], 0, bres["sets"][0], it["bc"], xin,
                                      {"o": (tuple(x["v"].shape), np.float32),
                                       "state": (it["pool0"].shape, np.float32)}, var.base.entry)
                base.release(it["brid"])
                if "o" in bouts and "state" in bouts:
                    rec["baseline_vs_float64"] = {"o_rel_l2": _rel(bouts["o"], o64),
                                                  "state_rel_l2": _rel(bouts["state"][slots], pool64[slots])}
            if "vs_float64" in rec:
                e = rec["vs_float64"]
                if var.crossed(e["o_rel_l2"], e["state_rel_l2"]):
                    reasons.append(f"{rec['id']}: quantization error of one step beyond the budget "
                                   f"(o {e['o_rel_l2']:.2e}, state {e['state_rel_l2']:.2e}; budget {var.budget})")
            records.append(rec)
        return records, reasons


class _DriftRun:
    """(b): `steps` decode steps, the pool fed back in the workers."""

    def __init__(self, var, make_inputs, reference, cand, base, seed, steps):
        self.var, self.reference, self.steps = var, reference, steps
        shape = self.shape = var.drift_shape
        rng = np.random.default_rng([seed, 27, 4096])
        x0 = make_inputs(shape, rng, True)
        self.slots = x0["slots"]
        self.arrays, self.bits0, self.scales0, self.pool0 = var.stored(x0["state"])
        self.xs = [x0] + [make_inputs(shape, rng, True) for _ in range(steps - 1)]
        toks = [{n: x[n] for n in ("q", "k", "v", "g", "beta")} for x in self.xs]
        for t in toks:
            t["slots"] = self.slots
        self.cc, self.bc = var.cand_call(shape), var.base_call(shape)
        csets = [dict(toks[0], **self.arrays)] + [dict(t) for t in toks[1:]]
        bsets = [dict(toks[0], state=self.pool0.astype(np.float32))] + [dict(t) for t in toks[1:]]
        for s in csets[1:] + bsets[1:]:
            s.pop("slots")          # sent once: the worker keeps it, as it keeps the pool
        self.rid = cand.submit("candidate", self.cc.args, self.cc.layout(), csets, label=f"precision drift {steps} steps",
                               stacked=True)
        # the fp32 baseline's errors depend on its source, the seed, the shape, the steps and the
        # initial values (the variant's stored state, dequantised): kept in $TMPDIR for the next
        # run of the same variant
        key = json.dumps([var.base.source_path.read_text(), var.base.name, seed, shape, steps,
                          _digest(self.pool0)], sort_keys=True)
        self.cache = Path(tempfile.gettempdir()) / "kidiom-precision" / (
            hashlib.sha256(key.encode()).hexdigest()[:32] + ".npz")
        self.cached = None
        try:
            with np.load(self.cache) as z:
                self.cached = {"o": z["o"], "state": z["state"]}
        except (OSError, KeyError, ValueError):
            pass
        self.brid = None if self.cached is not None else base.submit(
            "baseline", self.bc.args, self.bc.layout(), bsets, label=f"precision drift {steps} steps", stacked=True)
        self.toks = toks

    def _references(self):
        """float64 (from the stored initial values) and the free-running simulation, per step: one
        decode call per step for both, their rows side by side (the float64 pool's slot rows, then
        the simulation's), as the decode's sequences are independent of one another."""
        st, ref, slots, N = self.var.st, self.reference, self.slots, len(self.slots)
        rows = self.pool0[slots]
        bits, scales = self.bits0[slots], _rows(self.scales0, slots)
        both = np.arange(2 * N)
        self.ref, self.sim = [], []
        for t in self.toks:
            x = {k: np.concatenate([t[k], t[k]]) for k in _TOKEN}
            r = ref(dict(x, state=np.concatenate([rows, st.decode(bits, scales)]), slots=both))
            rows = r["state"][:N]
            self.ref.append((r["o"][:N], rows))
            bits, scales = st.encode(r["state"][N:])
            self.sim.append((r["o"][N:], st.decode(bits, scales)))

    def _teacher_forced(self, kept):
        """Each kernel step against one simulated step from the kernel's own previous stored state
        (`kept`: per step its o and stored rows at `slots`; the first step's previous state is the
        initial one). Given those states the steps are independent of one another, so TF_CHUNK of
        them are simulated as one decode call of that many times the sequences, each its own pool
        row: the same float64 step in a few calls instead of thousands. Returns per step the state's
        largest rounding steps and excess (_units_map, _excess_map) and o's rel_l2."""
        var, st, N = self.var, self.var.st, len(self.slots)
        m = len(kept)
        units, excess, orel = np.full(m, np.inf), np.full(m, np.inf), np.full(m, np.inf)
        first = (None, self.bits0[self.slots], _rows(self.scales0, self.slots))
        for c0 in range(0, m, TF_CHUNK):
            ts = range(c0, min(m, c0 + TF_CHUNK))
            prev = [kept[t - 1] if t else first for t in ts]
            x = {k: np.concatenate([self.toks[t][k] for t in ts]) for k in _TOKEN}
            x["slots"] = np.arange(len(ts) * N)
            pb = np.concatenate([p[1] for p in prev])
            ps = None if first[2] is None else np.concatenate([p[2] for p in prev])
            so, sb, ss, _ = simulate_step(self.reference, st, x, pb, ps)
            kb = np.concatenate([kept[t][1] for t in ts])
            ks = None if ps is None else np.concatenate([kept[t][2] for t in ts])
            per_step = lambda a: a.reshape(len(ts), -1)   # noqa: E731
            units[ts.start:ts.stop] = per_step(_units_map(st, kb, ks, sb, ss)).max(axis=1)
            excess[ts.start:ts.stop] = per_step(_excess_map(st, kb, ks, sb, ss, var.magnitude(x, pb, ps),
                                                            var.sim_units)).max(axis=1)
            orel[ts.start:ts.stop] = _rel_rows(per_step(np.concatenate([kept[t][0] for t in ts])), per_step(so))
        return units, excess, orel

    def judge(self, cand, base):
        var, st, slots = self.var, self.var.st, self.slots
        self._references()
        fails, curves = [], {}
        n = self.steps
        # the variant: its error, and each step against one simulated step from its own last state
        res = cand.result(self.rid)
        tf_units, tf_o, tf_excess = np.full(n, np.inf), np.full(n, np.inf), np.full(n, np.inf)
        if "sets" not in res:
            fails.append(f"drift: {res.get('failed') or res.get('needs_gpu') or res}")
        else:
            eo, es = np.full(n, np.inf), np.full(n, np.inf)
            shapes = var.result_shapes(self.xs[0], self.bits0, self.scales0)
            rows = _Rows(cand, self.rid, stacked=True)
            kept = []
            for t in range(n):
                rec = res["sets"][t] if t < len(res["sets"]) else None
                xin = {k: v for k, v in self.toks[t].items()}
                outs, f = _read_call(cand, self.rid, t, rec, self.cc, xin if t == 0 else
                                     {k: v for k, v in xin.items() if k != "slots"}, shapes, var.m.entry, rows=rows)
                if f:
                    fails += [f"drift step {t + 1}: {s}" for s in f[:3]]
                    break
                kb, ks = outs[st.tensor][slots], outs[st.scale_tensor][slots] if st.scale_tensor else None
                o64, s64 = self.ref[t]
                eo[t] = _rel(outs["o"], o64)
                es[t] = _rel(st.decode(kb, ks), s64)
                kept.append((outs["o"], kb, ks))
            cand.release(self.rid)
            m = len(kept)
            tf_units[:m], tf_excess[:m], tf_o[:m] = self._teacher_forced(kept)
            curves["variant"] = {"o": eo, "state": es}
        bres = base.result(self.brid) if self.brid is not None else {}
        if self.cached is not None:
            curves["baseline"] = self.cached
        elif "sets" in bres:
            bo, bs = np.full(n, np.inf), np.full(n, np.inf)
            bshapes = {"o": (tuple(self.xs[0]["v"].shape), np.float32), "state": (self.pool0.shape, np.float32)}
            brows = _Rows(base, self.brid, stacked=True)
            for t in range(n):
                rec = bres["sets"][t] if t < len(bres["sets"]) else None
                outs, f = _read_call(base, self.brid, t, rec, self.bc, {}, bshapes, var.base.entry, required=False,
                                     rows=brows)
                if "o" not in outs or "state" not in outs:
                    break
                bo[t], bs[t] = _rel(outs["o"], self.ref[t][0]), _rel(outs["state"][slots], self.ref[t][1])
            base.release(self.brid)
            curves["baseline"] = {"o": bo, "state": bs}
            if np.all(np.isfinite(bo)) and np.all(np.isfinite(bs)):
                self.cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.cache.with_suffix(f".{os.getpid()}.npz")
                np.savez(tmp, o=bo, state=bs)
                os.replace(tmp, self.cache)
        curves["simulated"] = {"o": np.array([_rel(so, r[0]) for (so, _), r in zip(self.sim, self.ref)]),
                               "state": np.array([_rel(ss, r[1]) for (_, ss), r in zip(self.sim, self.ref)])}
        pts = _curve_points(n)
        out = {"shape": self.shape, "steps": n, "inputs": "long_memory", "budget": var.budget,
               "baseline_cached": self.cached is not None,
               "points": pts, "curves": {}, "at": {}, "crossing": {}}
        for side, c in curves.items():
            out["curves"][side] = {k: [float(v[p - 1]) for p in pts] for k, v in c.items()}
            out["crossing"][side] = _first([var.crossed(o, s) for o, s in zip(c["o"], c["state"])])
        for t in AT_STEPS:
            if t <= n:
                out["at"][str(t)] = {side: {k: float(v[t - 1]) for k, v in c.items()} for side, c in curves.items()}
        beyond = ~(tf_excess <= 1.0) | ~(tf_o <= var.sim_rel_l2)
        out["vs_simulated"] = {"max_state_units": float(np.max(tf_units)) if n else None,
                               "max_o_rel_l2": float(np.max(tf_o)) if n else None,
                               "max_state_excess": float(np.max(tf_excess)) if n else None,
                               "first_step_beyond": _first(beyond)}
        reasons = []
        if "variant" in curves and out["vs_simulated"]["first_step_beyond"] is not None and not fails:
            t = out["vs_simulated"]["first_step_beyond"]
            reasons.append(f"drift step {t}: kernel error beyond its quantization (state {tf_units[t - 1]:.3g} "
                           f"rounding steps, o {tf_o[t - 1]:.2e} from one simulated step of its own stored state)")
        cross = out["crossing"].get("variant")
        if cross is not None:
            reasons.append(f"drift: the error against float64 first exceeds the budget {var.budget} at step {cross} "
                           f"of {n} (budget horizon {var.horizon} steps; the fp32 baseline "
                           f"{'crosses at step %d' % out['crossing']['baseline'] if out['crossing'].get('baseline') else 'stays within it'})")
        return out, fails, reasons


def run_precision(manifest, source=None, seed=0, steps=None, device="cpu", deadline=None):
    """The precision gate of a variant manifest (its own source, or `source`). Returns the JSON
    fields of the command (docs/HARNESS.md, "precision"), `status` ok / rejected / skipped."""
    deadline = deadline if deadline is not None else time.monotonic() + 1800
    var = _Variant(manifest)
    steps = int(steps if steps is not None else var.horizon)
    if steps < 1:
        raise ValueError("--steps must be at least 1")
    make_inputs, reference = decode_operation(var.base)
    bench = manifest.shapes["bench"]
    vb, bb = _bytes(manifest, bench), _bytes(var.base, bench)
    out = {"variant": {"name": manifest.name, "variant_of": var.base.name, "storage": var.st.describe(),
                       "budget": dict(var.budget, steps=var.horizon),
                       "against_simulated": {"sim_units": var.sim_units, "sim_rel_l2": var.sim_rel_l2}},
           "seed": seed,
           "bytes_per_step": {"shape": bench, "variant": vb, "baseline": bb,
                              "ratio": (vb / bb) if vb and bb else None},
           "mode": "emulation" if manifest.language == "cuda" else "interpreter"}
    with Workers(device, True, deadline) as ws:
        cand = ws.start("candidate", {"candidate": KernelSpec.of(manifest, source)}, trusted=False)
        base = ws.start("baseline", {"baseline": KernelSpec.of(var.base)}, trusted=True)
        cases = _Cases(var, make_inputs, reference, cand, base, seed)
        drift = _DriftRun(var, make_inputs, reference, cand, base, seed, steps)
        info = cand.wait_ready()
        if info is None and cand.fatal and "needs_gpu" in cand.fatal:
            out.update(status="skipped", reason=cand.fatal["needs_gpu"], device="none")
            return out
        if info is None:
            why = cand.fatal.get("failed") if cand.fatal else "the candidate's worker did not start"
            out.update(status="rejected", verdict="kernel-error", reasons=[why], device="none (failed to load)")
            return out
        out["device"] = info.get("device")
        records, budget_reasons = cases.judge(cand, base)
        out["cases"] = records
        out["drift"], drift_fails, drift_reasons = drift.judge(cand, base)
    kernel_reasons = [f"{r['id']}: {f}" for r in records for f in r["failures"]] + drift_fails
    kernel_reasons += [r for r in drift_reasons if "beyond its quantization" in r]
    budget_reasons += [r for r in drift_reasons if "exceeds the budget" in r]
    worst = {}
    for key, sub in (("vs_float64", ("o_rel_l2", "state_rel_l2")), ("vs_simulated", ("o_rel_l2", "state_units")),
                     ("baseline_vs_float64", ("o_rel_l2", "state_rel_l2"))):
        vals = [r[key] for r in records if key in r]
        if vals:
            worst[key] = {k: max(v[k] for v in vals) for k in sub}
    out["worst"] = worst
    if kernel_reasons:
        verdict = "kernel-error"
    elif budget_reasons:
        verdict = "beyond-budget"
    else:
        verdict = "within-budget"
    out["verdict"] = verdict
    out["reasons"] = kernel_reasons + budget_reasons
    out["status"] = "ok" if verdict == "within-budget" else "rejected"
    if verdict == "within-budget" and vb and bb:
        # decode is bandwidth-bound: time scales with the bytes moved per step (a prediction the
        # GPU gate measures; the Rust side reports it as needs-gpu)
        out["predicted_speedup"] = bb / vb
    return out
