"""`profile`: the work of a kernel (or a candidate) counted per source line on the CPU, scaled to
the manifest's `bench` shape and set against its `[floor]` (SPEC section 8, "Work profile and
prediction"; wire format in docs/HARNESS.md, "profile").

The candidate is untrusted: it runs only in the check's sandboxed worker (worker_client.py,
worker.py), which counts under Triton's interpreter (workprofile.py) and writes its counts
to its `out/` directory; this process makes the inputs, reads the counts back as data (bounded
size, integers, lines within the source, consistent sums: anything else is an error, never a
profile) and does all the scaling. The counts are observed inside the candidate's process: they
catch a kernel that does more work than it needs, not one that deliberately forges the worker's
bookkeeping beyond what the checks here see (a total below the floor, which no correct kernel
moves, is refused as implausible). Besides bytes, special calls, flops and dot MACs, each line
carries its redundant computation (issue #24): `repeat_calls`, special calls the same program
(CUDA: thread) evaluated before on the same arguments, and `uniform_calls`, those another program
of the launch (CUDA: thread of the block) evaluated first; each at most the line's special calls
in the report (else an error) and after scaling (clamped). A report of format 1 (before them)
reads them as 0.

The counted shape: the most reduced of the contract's `counted(shape)` (else `smaller`) shapes
at which the launcher passes the bench's constexprs (our KDA kernels: K and V kept, one sequence,
one query/key head with HV / H kept). Programs of a grid do uniform work in these kernels, so the counts scale by
programs_total / programs (the grid at the bench shape, recorded by calling the launcher on
shape-only tensors in the worker, against the grid the counted call launched). A kernel with a
manifest `chunk` (prefill) walks its chunks in every program: with more than two chunks at the
bench shape it is counted at one
and two chunks (plus the bench's remainder) and extrapolated linearly to the bench's chunks,
exact when chunks do uniform work. `exact` is true when the bench shape itself was counted.

A CUDA kernel is counted by the emulation's counting build (kernels/harness/cuda/emulation.py, in the
same worker, asked for with the program order "profile" whose seed names its report in the
worker's work/ directory). Its launch is its contract's `launch(shape)`, so the grid at any shape
is known here; blocks do uniform work and what the launch's parameters depend on is never
reduced by the contract (our decode: K and V), so it is counted at the most reduced shape and
scaled by blocks at the bench shape / blocks run.
"""
import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..contract import load_contract
from ..cuda.emulation import PROFILE_REPORT as CUDA_REPORT
from .worker_client import KernelSpec, Workers

__all__ = ["run_profile", "profile_kernel", "counted_plan", "validate_report", "ProfileError", "ProfileSkipped",
           "MAX_REPORT_BYTES", "FIELDS", "SPECIAL_KINDS"]

FIELDS = ("load_bytes", "store_bytes", "reread_bytes", "special_calls", "flops", "dot_macs", "repeat_calls",
          "uniform_calls")
SPECIAL, REPEAT, UNIFORM = 3, 6, 7
# a format-1 report has the fields before repeat_calls (read as 0); format 2 all of FIELDS
FORMAT_FIELDS = {1: FIELDS[:6], 2: FIELDS}
SPECIAL_KINDS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "div", "sigmoid")
MAX_REPORT_BYTES = 1 << 20   # the worker's report: larger is an error
MAX_COUNT = 1 << 53          # any one count at the counted shape
MAX_LAUNCHES = 4096          # launches of one call
SEED = 20240601              # inputs of the counted calls (counts do not depend on values here)
TEXT_CHARS = 200
# the most a reduction may cost under the interpreter (programs; with a `chunk`, program-chunks)
# before the most reduced shape is counted instead (with a note): the manifest's [profile] budget
BUDGET = 2048


class ProfileError(Exception):
    """The profile could not be made (the kernel failed, or its worker's report is not valid)."""


class ProfileSkipped(ProfileError):
    """This CPU cannot run the kernel (a CUDA source the emulation cannot build)."""


# the counted shape ----------------------------------------------------------------------------------

def _chunked(manifest):
    """A kernel that walks `chunk`-long chunks of the variable `[profile] chunk_var` (default T) in
    every program: (variable, chunk) or None."""
    if "chunk" not in manifest.raw:
        return None
    return str((manifest.raw.get("profile") or {}).get("chunk_var", "T")), int(manifest.raw["chunk"])


def reductions(manifest, bench):
    """The bench shape reduced as the contract's `counted` (else `smaller`) says (the variables that reach no
    constexpr or block size), most reduced (fewest elements) first, the bench's own values last.
    A chunked variable is not among them (`counted_plan`)."""
    bench = {k: int(v) for k, v in bench.items()}
    op = load_contract(manifest)
    ch = _chunked(manifest)
    cands = [c for c in op.counted(bench) if ch is None or c.get(ch[0]) == bench.get(ch[0])]
    out = {}
    for c in cands:
        out[json.dumps(c, sort_keys=True)] = c
    size = lambda c: sum(int(np.prod(t[0])) for t in op.tensors(c).values() if isinstance(t, tuple))  # noqa: E731
    ordered = sorted((c for c in out.values() if c != bench), key=size)
    return ordered + [dict(bench)]


def default_reductions(manifest, bench):
    """Reductions kidiom chooses itself when the contract names none (no `counted`, no `smaller`;
    a Triton kernel walking no chunks): one size variable at a time, halved while it divides evenly
    (4096 -> 2048 -> ... -> 1), most reduced first. Each is a candidate only: the profile counts at
    one only when the grid shrinks exactly as the variable does and the counts at twice that size
    are exactly twice its counts (`_linear`), so the programs it scales by do the same work."""
    if manifest.language != "triton" or _chunked(manifest) is not None:
        return []
    op = load_contract(manifest)
    if op.has("counted") or op.has("smaller"):
        return []
    out = []
    for k, v in bench.items():
        if isinstance(v, bool) or not isinstance(v, int):
            continue
        r = v
        while r > 1 and r % 2 == 0:
            r //= 2
            out.append((k, r))
    return sorted(out, key=lambda kr: kr[1] / bench[kr[0]])


def _linear(reports):
    """Whether the second counted call (the reduced variable doubled) did exactly twice the first's
    work, line by line and kind by kind: the programs kidiom scales by are uniform."""
    (l1, s1, _), (l2, s2, _) = reports
    if set(l1) != set(l2) or set(s1) != set(s2):
        return False
    return all(all(b == 2 * a for a, b in zip(l1[n], l2[n])) for n in l1) and \
        all(s2[n].get(k, 0) == 2 * s1[n].get(k, 0) for n in s1 for k in set(s1[n]) | set(s2[n]))


def counted_plan(manifest, bench, base=None):
    """What to run for the bench shape `bench`, at the reduction `base` (default: the most
    reduced): {shapes: [shape] or [shape at c1 chunks, at c2], chunks: None or (c1, c2, chunks at
    bench), note}."""
    bench = {k: int(v) for k, v in bench.items()}
    base = dict(base) if base is not None else reductions(manifest, bench)[0]
    ch = _chunked(manifest)
    if ch is not None and ch[0] in bench:
        var, C = ch
        T = bench[var]
        rem, full = T % C, T // C
        if full <= 2:
            return {"shapes": [dict(base, **{var: T})], "chunks": None, "note": None}
        s1, s2 = dict(base, **{var: rem + C}), dict(base, **{var: rem + 2 * C})
        return {"shapes": [s1, s2], "chunks": (1, 2, full),
                "note": f"{var} counted at {s1[var]} and {s2[var]} ({'' if not rem else f'{rem} + '}1 and 2 chunks of "
                        f"{C}), extrapolated linearly to {full} chunks (chunks do uniform work)"}
    return {"shapes": [base], "chunks": None, "note": None}


def _varied(bench, shapes):
    return {k for k in bench if any(s.get(k) != bench[k] for s in shapes)}


# the worker's report --------------------------------------------------------------------------------

def _int(v, what):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > MAX_COUNT:
        raise ProfileError(f"the worker's report is malformed: {what} is {str(v)[:40]!r}, not a count")
    return v


def validate_report(obj, nlines):
    """The worker's counts as ({line: [ints in FIELDS' order]}, {line: {kind: n}}, programs);
    ProfileError when `obj` is not exactly a report: candidate-controlled data is only ever read as
    counts. Format 2 carries every field of FIELDS; format 1 those before `repeat_calls` (the
    redundancy counts then read as 0). Repeat and uniform calls are each at most the line's
    special calls."""
    fmt = obj.get("format") if isinstance(obj, dict) else None
    if fmt not in FORMAT_FIELDS or isinstance(fmt, bool) or not isinstance(obj.get("lines"), dict):
        raise ProfileError("the worker's report is malformed: not a format-1 or format-2 report with lines")
    fields = FORMAT_FIELDS[fmt]
    if set(obj) - {"format", "lines", "programs", "flops_counted", "lane_bytes"}:
        raise ProfileError("the worker's report is malformed: unknown keys")
    if not isinstance(obj.get("flops_counted", True), bool):
        raise ProfileError("the worker's report is malformed: flops_counted is not a bool")
    _int(obj.get("lane_bytes", 0), "lane_bytes")
    raw = obj["lines"]
    if len(raw) > nlines + 1:
        raise ProfileError(f"the worker's report is malformed: {len(raw)} lines for a source of {nlines}")
    lines, special = {}, {}
    for key, entry in raw.items():
        if not isinstance(key, str) or not key.isdigit() or len(key) > 7:
            raise ProfileError(f"the worker's report is malformed: line {key[:20]!r}")
        line = int(key)
        if line > nlines:
            raise ProfileError(f"the worker's report is malformed: line {line} is past the source's {nlines}")
        if not isinstance(entry, dict) or set(entry) != set(fields) | {"special"}:
            raise ProfileError(f"the worker's report is malformed: line {line}'s fields")
        row = [_int(entry[f], f"line {line} {f}") if f in fields else 0 for f in FIELDS]
        sp = entry["special"]
        if not isinstance(sp, dict) or not set(sp) <= set(SPECIAL_KINDS):
            raise ProfileError(f"the worker's report is malformed: line {line}'s special functions")
        sp = {k: _int(v, f"line {line} {k}") for k, v in sp.items()}
        if sum(sp.values()) != row[3]:
            raise ProfileError(f"the worker's report is inconsistent: line {line}'s special calls are not the sum "
                               "of its functions")
        if row[2] > row[0]:
            raise ProfileError(f"the worker's report is inconsistent: line {line} re-reads more than it loads")
        for i in (REPEAT, UNIFORM):
            if row[i] > row[SPECIAL]:
                raise ProfileError(f"the worker's report is inconsistent: line {line}'s {FIELDS[i]} exceed its "
                                   "special calls")
        lines[line] = row
        special[line] = sp
    programs = obj.get("programs", 0)
    programs = _int(programs, "programs")
    return lines, special, programs


def read_report(scratch, rel):
    """The report file the worker wrote, refusing links, anything outside its scratch directory
    and anything over MAX_REPORT_BYTES."""
    scratch = Path(scratch).resolve()
    raw = scratch / rel
    parent = raw.parent.resolve()
    try:
        parent.relative_to(scratch)
    except ValueError:
        raise ProfileError("the worker's report lies outside its directory") from None
    p = parent / raw.name   # the file itself may not be a link (O_NOFOLLOW)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise ProfileError(f"the worker wrote no report ({type(e).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        if not os.path.isfile(p) or os.fstat(f.fileno()).st_size > MAX_REPORT_BYTES:
            raise ProfileError(f"the worker's report is larger than {MAX_REPORT_BYTES} bytes")
        data = f.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        raise ProfileError(f"the worker's report is larger than {MAX_REPORT_BYTES} bytes")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ProfileError("the worker's report is not JSON") from None


# facts of a call --------------------------------------------------------------------------------------

def _grids(launched, what):
    if not isinstance(launched, list) or not launched:
        raise ProfileError(f"{what}: no launch was recorded")
    out = []
    for l in launched:
        g = l.get("grid") if isinstance(l, dict) else None
        if not isinstance(g, list) or not 1 <= len(g) <= 3 or \
                not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 31) for x in g):
            raise ProfileError(f"{what}: a launch without a valid grid")
        out.append((str(l.get("kernel"))[:80], l.get("constexprs") if isinstance(l.get("constexprs"), dict) else {},
                    int(np.prod(g, dtype=np.int64))))
    return out


def _recorded_grids(rec):
    """[(kernel, grid)] of one recorded call, None when it raised or recorded nothing valid."""
    if not isinstance(rec, dict) or rec.get("exception") or not isinstance(rec.get("launched"), list):
        return None
    out = []
    for l in rec["launched"]:
        g = l.get("grid") if isinstance(l, dict) else None
        if not isinstance(g, list) or not 1 <= len(g) <= 3 or \
                not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in g):
            return None
        out.append((str(l.get("kernel"))[:80], [int(x) for x in g]))
    return out or None


def _call_facts(rec, entry, label):
    if not isinstance(rec, dict):
        raise ProfileError(f"{label}: the worker's report of the call is malformed or missing")
    exc = rec.get("exception")
    if exc:
        exc = exc if isinstance(exc, dict) else {"type": "?", "message": str(exc)}
        raise ProfileError(f"{label}: the kernel raised {str(exc.get('type'))[:80]}: {str(exc.get('message'))[:300]}")
    launches = rec.get("launches") if isinstance(rec.get("launches"), dict) else {}
    n_entry, total = launches.get("entry"), launches.get("total")
    if not isinstance(n_entry, int) or n_entry < 1:
        raise ProfileError(f"{label}: the kernel {entry} never ran")
    if not isinstance(total, int) or not n_entry <= total <= MAX_LAUNCHES:
        raise ProfileError(f"{label}: implausible launch count {str(total)[:20]}")
    grids = _grids(rec.get("launched"), label)
    if len(grids) != total:
        raise ProfileError(f"{label}: {total} launches but {len(grids)} described")
    programs = sum(g[2] for g in grids)
    ran = rec.get("programs") if isinstance(rec.get("programs"), dict) else {}
    if ran.get("ran") is not None and ran.get("ran") != programs:
        raise ProfileError(f"{label}: {ran.get('ran')} programs ran of the {programs} launched")
    return {"launches": total, "programs": programs, "grids": grids}


# scaling ----------------------------------------------------------------------------------------------

def _extrapolate(vals, chunks):
    """The count at the bench's chunks from the counts at (c1, c2) (or the single count)."""
    if chunks is None:
        return Fraction(vals[0])
    c1, c2, cb = chunks
    v1, v2 = Fraction(vals[0]), Fraction(vals[1])
    return v1 + (v2 - v1) * Fraction(cb - c1, c2 - c1)


def _scale_counts(reports, chunks, factor):
    """Bench-scaled {line: [ints in FIELDS' order]} and {kind: n} from the per-run reports (a line's
    repeat and uniform calls at most its special calls, which extrapolation alone need not keep)."""
    lines_all = sorted(set().union(*[r[0] for r in reports]))
    lines, special, negative = {}, {}, False
    for line in lines_all:
        rows = [r[0].get(line, [0] * len(FIELDS)) for r in reports]
        row = []
        for i in range(len(FIELDS)):
            v = _extrapolate([r[i] for r in rows], chunks) * factor
            negative |= v < 0
            row.append(max(0, round(v)))
        row[REPEAT], row[UNIFORM] = min(row[REPEAT], row[SPECIAL]), min(row[UNIFORM], row[SPECIAL])
        lines[line] = row
        kinds = set().union(*[r[1].get(line, {}) for r in reports])
        for k in kinds:
            v = _extrapolate([r[1].get(line, {}).get(k, 0) for r in reports], chunks) * factor
            negative |= v < 0
            special[k] = special.get(k, 0) + max(0, round(v))
    return lines, special, negative


def _source_lines(path):
    try:
        return Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        raise ProfileError(f"cannot read the kernel source {path}: {e}") from None


def _constexpr_note(bench_grids, counted_grids, varied):
    """Where the counted call specialises differently from the bench's (beyond the reduced shape
    variables themselves), in words; None when it does not."""
    if len(bench_grids) != len(counted_grids):
        return f"{len(counted_grids)} launches at the counted shape, {len(bench_grids)} at the bench shape"
    diffs = []
    for (kb, cb, _), (kc, cc, _) in zip(bench_grids, counted_grids):
        if kb != kc:
            diffs.append(f"kernel {kc} launched where the bench shape launches {kb}")
            continue
        for name in sorted(set(cb) | set(cc)):
            if name in varied:
                continue
            if cb.get(name) != cc.get(name):
                diffs.append(f"{name} is {cc.get(name)} at the counted shape, {cb.get(name)} at the bench shape")
    return "; ".join(diffs[:4]) or None


# CUDA's launch limits per grid axis (x, y, z): a launch past one fails outright
GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)
INT32_MAX = (1 << 31) - 1


def limit_probes(manifest):
    """The shapes whose launches the launch-limit check records: the manifest's gpu and bench
    shapes, each also with every variable doubled (to see what each grid axis grows with)."""
    shapes = [(f"gpu[{i}]", dict(s)) for i, s in enumerate(manifest.shapes.get("gpu", []))]
    shapes.append(("bench", dict(manifest.shapes["bench"])))
    probes = []
    for label, shape in shapes:
        probes.append((label, shape, None))
        for v in shape:
            probes.append((label, dict(shape, **{v: 2 * int(shape[v])}), v))
    return probes


def launch_limit_findings(probes, grids_of, arglists):
    """The baseline's own launch defects: a grid axis past its limit at a manifest shape, an axis
    (y or z) that grows in proportion to a variable and passes its limit at some value of it,
    and a tensor with more elements than a 32-bit offset reaches. `grids_of[i]`: the launches
    [(kernel, [x, y, z])] recorded at probe i (None: not recorded); `arglists[i]` its arguments."""
    found, grows = [], {}
    base = {}
    for i, (label, shape, doubled) in enumerate(probes):
        if doubled is None:
            base[label] = i
    for i, (label, shape, doubled) in enumerate(probes):
        launches = grids_of[i]
        if launches is None:
            continue
        sid = ", ".join(f"{k}={v}" for k, v in shape.items())
        if doubled is None:
            for kernel, g in launches:
                for axis, (n, lim) in enumerate(zip(g, GRID_LIMITS)):
                    if n > lim:
                        found.append(f"{kernel}: grid axis {axis} is {n} at {label} ({sid}), above the limit "
                                     f"{lim}: the launch fails")
            for a in arglists[i]:
                if a is not None and "shape" in a and int(np.prod(a["shape"], dtype=np.int64)) > INT32_MAX:
                    found.append(f"a {a['dtype']} tensor of {int(np.prod(a['shape'], dtype=np.int64))} elements at "
                                 f"{label} ({sid}): offsets computed in 32 bits overflow past {INT32_MAX}")
            continue
        j = base.get(label)
        if j is None or grids_of[j] is None or len(grids_of[j]) != len(launches):
            continue
        orig = probes[j][1]
        for (kernel, g0), (_, g1) in zip(grids_of[j], launches):
            for axis in (1, 2):
                if axis < len(g0) and axis < len(g1) and g0[axis] > 0 and g1[axis] == 2 * g0[axis]:
                    # the axis is proportional to the variable: past the limit from this value on
                    start = GRID_LIMITS[axis] * int(orig[doubled]) // g0[axis] + 1
                    key = (kernel, axis, doubled)
                    if key not in grows or start < grows[key][0]:
                        others = ", ".join(f"{k}={v}" for k, v in orig.items() if k != doubled)
                        grows[key] = (start, f"{kernel}: grid axis {axis} grows with {doubled} ({g0[axis]} at "
                                             f"{label}, {doubled}={orig[doubled]}): above the limit "
                                             f"{GRID_LIMITS[axis]} from {doubled} = {start} ({others}), where the "
                                             "launch fails")
    return found + [t for _, t in sorted(grows.values())]


def _cuda_grids(manifest, shape):
    """The contract's one launch at `shape` as _grids describes launches (its blocks)."""
    g = load_contract(manifest).launch(shape)["grid"]
    return [(manifest.entry, {}, g[0] * g[1] * g[2])]


def _threads_per_program(op, shape):
    """A CUDA launch's threads per block (the contract's `block`), None when it gives none."""
    block = op.launch(shape).get("block")
    if not isinstance(block, list) or not block or \
            not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block):
        return None
    return int(np.prod(block, dtype=np.int64))


def _recorded_threads(rec):
    """A Triton launch's threads per program where the launcher passed num_warps (every launch the
    same), None otherwise: the compile's num_warps then says."""
    launched = rec.get("launched") if isinstance(rec, dict) else None
    warps = {l.get("num_warps") for l in launched or [] if isinstance(l, dict)}
    if len(warps) != 1:
        return None
    w = warps.pop()
    return 32 * w if isinstance(w, int) and not isinstance(w, bool) and 0 < w <= 64 else None


def _cuda_notes(extras, factor, floor_bytes):
    """What the emulation's counts mean, and what they leave out."""
    lane = sum(Fraction(o.get("lane_bytes", 0)) for o in extras) / max(1, len(extras)) * factor
    notes = ["CUDA: global loads and stores per warp instruction (lanes of a warp that access the same address "
             "in one instruction count once, as the GPU coalesces them; per thread they would be "
             f"{round(lane)} bytes, {float(lane) / floor_bytes if floor_bytes else 0.0:.2f} x the floor), special "
             "functions and flops per thread"]
    if not all(o.get("flops_counted", True) for o in extras):
        notes.append("flops and float divisions not counted (0): the source does not build with the emulation's "
                     "counting float")
    return notes


# the command ------------------------------------------------------------------------------------------

def _record_diff(bench_grids, rec, varied):
    """How a recorded launcher call specialises otherwise than the bench's (None: the same)."""
    if not isinstance(rec, dict):
        return "the recorder's answer is missing"
    if rec.get("exception"):
        e = rec["exception"] if isinstance(rec["exception"], dict) else {}
        return f"the launcher raised {str(e.get('type'))[:80]}"
    try:
        return _constexpr_note(bench_grids, _grids(rec.get("launched"), "a reduced shape"), varied)
    except ProfileError as e:
        return str(e)


def _scales_grid(bench_grids, recs, var, shapes, bench):
    """Whether each recorded launch of a kidiom reduction runs exactly the bench's programs scaled as
    `var` is (the grid grows with it, and with nothing it leaves alone)."""
    total = sum(g[2] for g in bench_grids)
    for shape, rec in zip(shapes, recs):
        try:
            programs = sum(g[2] for g in _grids(rec.get("launched") if isinstance(rec, dict) else None, "a shape"))
        except ProfileError:
            return False
        if programs < 1 or programs * bench[var] != total * shape[var]:
            return False
    return True


def _cost(manifest, plan, recs):
    """Programs (prefill: program-chunks) a plan's counted calls would interpret."""
    ch = _chunked(manifest)
    total = 0
    for shape, rec in zip(plan["shapes"], recs):
        try:
            programs = sum(g[2] for g in _grids(rec.get("launched") if isinstance(rec, dict) else None, "a shape"))
        except ProfileError:
            return float("inf")
        total += programs * (-(-shape[ch[0]] // ch[1]) if ch is not None and ch[0] in shape else 1)
    return total


def profile_kernel(manifest, source=None, bench=None, exact=False, deadline=None):
    """The work profile of `source` (None: the manifest's) at the bench shape `bench` (None: the
    manifest's), counted at the most reduced shape of `reductions` at which the launcher passes
    the bench's constexprs (recorded in the worker on shape-only tensors) or, with `exact`, at
    `bench` itself. Returns the wire body ({shape, counted, totals, special, floor,
    traffic_ratio, launches, lines, device, mode, sandbox}); raises ProfileError when it cannot
    be made and workers.WorkerTimeout past `deadline`."""
    from .check import _arglist, _arrays
    deadline = deadline if deadline is not None else time.monotonic() + 600
    op = load_contract(manifest)
    bench = {k: int(v) for k, v in (bench or manifest.shapes["bench"]).items()}
    plans = [{"shapes": [dict(bench)], "chunks": None, "note": None}] if exact else \
        [counted_plan(manifest, bench, r) for r in reductions(manifest, bench)]
    if not exact and len(plans) == 1:
        # the contract reduces nothing: kidiom's own reductions, each counted at r and checked at 2r
        plans = [{"shapes": [dict(bench, **{k: r}), dict(bench, **{k: 2 * r})], "chunks": None, "var": k,
                  "note": f"{k} reduced by kidiom: the grid shrinks with it exactly, and twice {k} counts exactly "
                          "twice the work"}
                 for k, r in default_reductions(manifest, bench)] + plans
    src_path = Path(source) if source else manifest.source_path
    text = _source_lines(src_path)
    flag = True if op.optional else None
    spec = {"candidate": KernelSpec.of(manifest, source)}
    cuda = manifest.language == "cuda"
    notes = []
    with Workers("cpu", True, deadline) as ws:
        cand = ws.start("candidate", spec, trusted=False)
        # a second counted shape (prefill's chunk fit) runs beside the first, in a worker of its own
        workers = [cand] + [ws.start(f"candidate-{i + 1}", spec, trusted=False)
                            for i in range(1, max(len(pl["shapes"]) for pl in plans))]
        arglists = [_arglist(op, bench, flag)] + [_arglist(op, sh, flag) for pl in plans for sh in pl["shapes"]]
        probes = limit_probes(manifest)
        probe_args = [_arglist(op, sh, flag) for _, sh, _ in probes]
        # CUDA: the launch is the contract's (launch(shape)); Triton: recorded on shape-only tensors
        rec_rid = None if cuda else \
            cand.submit("candidate", op.args, {"inputs": [], "inouts": [], "outputs": {},
                                               "record": arglists + probe_args},
                        [], label="the launcher at the bench, the reduced and the launch-limit shapes "
                                  "(shape-only tensors)")
        for w in workers:
            info = w.wait_ready()
            if info is None:
                if (w.fatal or {}).get("needs_gpu"):
                    raise ProfileSkipped(str(w.fatal["needs_gpu"]))
                why = (w.fatal or {}).get("failed") or "the worker did not start"
                raise ProfileError(str(why))
        info = cand.info
        linear_plans = []   # kidiom's own reductions that qualify, most reduced first
        if cuda:
            # no constexprs; the contract's reductions keep what its launch depends on: the most reduced
            bench_grids, plan = _cuda_grids(manifest, bench), plans[0]
            probe_grids = [[(manifest.entry, op.launch(sh)["grid"])] for _, sh, _ in probes]
        else:
            recorded = cand.result(rec_rid)
            sets = recorded.get("sets") if isinstance(recorded, dict) else None
            if isinstance(sets, list) and len(sets) == len(arglists) + len(probes):
                probe_grids = [_recorded_grids(r) for r in sets[len(arglists):]]
                sets = sets[:len(arglists)]
            else:
                probe_grids = [None] * len(probes)
            if not isinstance(sets, list) or len(sets) != len(arglists) or not isinstance(sets[0], dict):
                raise ProfileError("the launcher could not be recorded at the bench shape: "
                                   f"{recorded.get('failed', '?')}")
            if sets[0].get("exception"):
                e = sets[0]["exception"] if isinstance(sets[0]["exception"], dict) else {}
                raise ProfileError(f"the launcher raised {str(e.get('type'))[:80]} at the bench shape (shape-only "
                                   f"tensors): {str(e.get('message'))[:300]}")
            bench_grids = _grids(sets[0].get("launched"), "the bench shape")
            # the most reduced shape that specialises as the bench shape does
            plan, first_diff, i = None, None, 1
            j = 0   # index among the contract's plans (kidiom's own come first in `plans`)
            for pl in plans:
                recs, i = sets[i:i + len(pl["shapes"])], i + len(pl["shapes"])
                if "var" in pl:   # kidiom's own: only where the grid scales exactly with the variable
                    if _scales_grid(bench_grids, recs, pl["var"], pl["shapes"], bench) and \
                            _cost(manifest, pl, recs) <= int((manifest.raw.get("profile") or {}).get("budget", BUDGET)) \
                            and not [d for d in (_record_diff(bench_grids, r, {pl["var"]}) for r in recs) if d]:
                        linear_plans.append(pl)
                    continue
                k, j = j, j + 1
                diffs = [d for d in (_record_diff(bench_grids, r, _varied(bench, pl["shapes"])) for r in recs) if d]
                if k and _cost(manifest, pl, recs) > int((manifest.raw.get("profile") or {}).get("budget", BUDGET)):
                    first_diff = first_diff or (diffs[0] if diffs else "the smallest that does is over the CPU budget")
                    break   # the larger reductions cost more still: counted most reduced, with a note
                if not diffs:
                    plan = pl
                    if k:
                        notes.append("reduced only as far as the launcher passes the bench shape's constexprs")
                    break
                first_diff = first_diff or diffs[0]
            if plan is None:
                plan = next(pl for pl in plans if "var" not in pl)
                notes.append(f"not uniform: no reduced shape specialises as the bench shape does ({first_diff})")

        def count(plan):
            """The counted calls of `plan`: (reports, facts, extras), one per shape."""
            rids = []
            for i, shape in enumerate(plan["shapes"]):
                w = workers[-1 - i] if len(plan["shapes"]) == len(workers) else workers[0]
                x = op.make_inputs(shape, np.random.default_rng([SEED, i]))
                if cuda:   # the emulation counts in the order "profile"; the seed names its report
                    token = secrets.randbits(48)
                    lay = dict(op.layout(x), programs={"order": "profile", "seed": token})
                    report = f"work/{CUDA_REPORT.format(token=token)}"
                else:
                    lay = dict(op.layout(x), profile={"files": [w.kernels["candidate"]["file"]]})
                    report = None
                rid = w.submit("candidate", op.args, lay, [_arrays(op, x)], label=f"counted call {i + 1}")
                rids.append((w, rid, report or f"out/{rid}/r0_profile.json"))
            reports, facts, extras = [], [], []
            for i, (w, rid, report) in enumerate(rids):
                res = w.result(rid)
                label = f"counted call {i + 1} ({', '.join(f'{k}={v}' for k, v in plan['shapes'][i].items())})"
                if not isinstance(res.get("sets"), list) or not res["sets"]:
                    raise ProfileError(f"{label}: {res.get('failed', 'no result')}")
                facts.append(_call_facts(res["sets"][0], manifest.entry, label))
                obj = read_report(w.scratch, report)
                reports.append(validate_report(obj, len(text)))
                extras.append(obj)
                w.release(rid)
            return reports, facts, extras

        reports = None
        if linear_plans:
            lp = linear_plans[0]
            reports, facts, extras = count(lp)
            if _linear(reports):
                # counted at the reduced shape; its double only proved the programs uniform
                plan, reports, facts, extras = dict(lp, shapes=lp["shapes"][:1]), reports[:1], facts[:1], extras[:1]
            else:
                notes.append(f"not uniform in {lp['var']}: twice it is not twice the work, counted as the contract "
                             "says")
                reports = None
        if reports is None:
            reports, facts, extras = count(plan)
        sandbox = dict(cand.sandbox)
    programs = facts[-1]["programs"]
    if any(f["programs"] != programs for f in facts):
        raise ProfileError("the counted calls launched different grids at different T")
    programs_total = sum(g[2] for g in bench_grids)
    if programs < 1:
        raise ProfileError("the counted call ran no programs")
    factor = Fraction(programs_total, programs)
    lines, special, negative = _scale_counts(reports, plan["chunks"], factor)
    launches = max(1, round(_extrapolate([f["launches"] for f in facts], plan["chunks"])))
    totals = {f: sum(row[i] for row in lines.values()) for i, f in enumerate(FIELDS)}
    floor = {"bytes": float(manifest.floor_bytes(bench)), "flops": float(manifest.floor_flops(bench))}
    moved = totals["load_bytes"] + totals["store_bytes"]
    if floor["bytes"] > 0 and moved < 0.99 * floor["bytes"]:
        raise ProfileError(f"implausible counts: {moved} bytes moved, below the floor's {floor['bytes']:.0f} that "
                           "every correct kernel moves (the worker's counts do not describe the kernel)")
    counted_shape = plan["shapes"][-1]
    varied = _varied(bench, plan["shapes"])
    if plan["note"]:
        notes.insert(0, plan["note"])
    if counted_shape != bench or plan["chunks"]:
        notes.insert(0, f"programs of the grid scaled by {programs_total} / {programs} "
                        f"({', '.join(sorted(varied - {'T'})) or 'nothing'} reduced)")
    for f in facts:
        diff = _constexpr_note(bench_grids, f["grids"], varied)
        if diff and not any(n.startswith("not uniform") for n in notes):
            notes.append(f"not uniform: the counted call specialises differently ({diff})")
            break
    if negative:
        notes.append("not uniform: a count shrinks with T (clamped at 0)")
    if len({f["launches"] for f in facts}) > 1:
        notes.append("launches depend on T (extrapolated)")
    if cuda:
        notes += _cuda_notes(extras, factor, floor["bytes"])
    out_lines = []
    for line in sorted(lines):
        row = lines[line]
        if line == 0:
            if any(row):
                notes.append("some work was made outside the kernel source's lines (counted in the totals, not "
                             "in lines)")
            continue
        if not any(row):
            continue
        entry = {"line": line, "text": text[line - 1].strip()[:TEXT_CHARS]}
        entry.update(zip(FIELDS, row))
        out_lines.append(entry)
    exact_run = plan["chunks"] is None and counted_shape == bench
    threads = _threads_per_program(op, bench) if cuda else _recorded_threads(sets[0])
    checked = sum(1 for (_, _, d), g in zip(probes, probe_grids) if d is None and g is not None)
    return {
        "launch_limits": {"shapes": checked, "findings": launch_limit_findings(probes, probe_grids, probe_args)},
        "shape": bench,
        "counted": {"shape": counted_shape, "programs": programs, "programs_total": programs_total,
                    "scale": float(factor), "exact": exact_run,
                    "note": "; ".join(notes) if notes else "counted whole"},
        "totals": totals,
        "special": dict(sorted(special.items())),
        "floor": floor,
        "traffic_ratio": moved / floor["bytes"] if floor["bytes"] > 0 else 0.0,
        "launches": launches,
        # what the device model's occupancy and bytes in flight need (None: the compile says)
        "threads_per_program": threads,
        "lines": out_lines,
        "device": str((info if isinstance(info, dict) else {}).get("device", "cpu (triton interpreter)")),
        "mode": "emulation" if cuda else "interpreter-tf32",
        "sandbox": sandbox,
    }


# Profiles, cached by every input they are made from (`_cache_key`): one kernel's profile, asked
# for again by the next validation or test, costs reading a file, not a counted run.
# 1: the first; 2: kidiom's own reductions (`default_reductions`)
PROFILE_CACHE_VERSION = 3   # 3: threads_per_program
HARNESS = Path(__file__).resolve().parent.parent


class Unkeyable(Exception):
    """The profile's inputs cannot all be named: it is counted, not cached."""


# A contract's folder larger than this is not read into the key (the profile is then not cached).
FOLDER_FILES, FOLDER_BYTES = 256, 8 << 20


def _inputs(manifest, source):
    """The files a profile is made from, by names that do not depend on where they lie: every file
    of the harness (the worker runs copies of them), the files beside the contract (it may read
    them), the modules this process loaded from outside the Python installation once the contract
    is loaded (the contract and what it imports), the manifest and the kernel."""
    named = {f"harness/{p.relative_to(HARNESS)}": p for p in HARNESS.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    folder = Path(manifest.contract_path).resolve().parent
    beside = [p for p in folder.iterdir() if p.is_file()]
    if len(beside) > FOLDER_FILES or sum(p.stat().st_size for p in beside) > FOLDER_BYTES:
        raise Unkeyable(f"the contract's folder {folder} is too large to key")
    named.update({f"contract-folder/{p.name}": p for p in beside})
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str) or not os.path.isfile(f):
            continue
        p = Path(f).resolve()
        if not any(p.is_relative_to(pre) for pre in prefixes) and not p.is_relative_to(HARNESS):
            # by name and content: two modules of one name both count, wherever they were loaded from
            named[f"module/{p.name}/{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"] = p
    named["manifest"] = Path(manifest.path)
    named["source"] = Path(source or manifest.source_path)
    return named


def _cache_key(manifest, source, bench=None, exact=False):
    """The profile's key: its version, every input file (`_inputs`), the bench shape, Python's,
    numpy's and Triton's versions, Triton's settings in the environment and, for a CUDA kernel,
    the host compiler that builds its emulation."""
    from ..cachedir import files_digest
    from ..wire import versions
    from . import check  # noqa: F401 - profile_kernel's own import, loaded before the key on every path
    load_contract(manifest)   # its imports join the modules read by _inputs
    h = hashlib.sha256(f"profile {PROFILE_CACHE_VERSION} {manifest.name} exact={bool(exact)}".encode())
    h.update(json.dumps([versions(), bench or manifest.shapes["bench"],
                         sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_"))],
                        sort_keys=True).encode())
    if manifest.language == "cuda":
        from ..host.build import compiler_version
        h.update(compiler_version().encode())
    files_digest(h, _inputs(manifest, source))
    from ..project import project_digest
    h.update(project_digest(manifest, source).encode())
    return h.hexdigest()


def run_profile(args, out, manifest):
    """`profile` for cli.py: fills the wire object `out`, returns the exit code."""
    from ..wire import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED, versions
    from .worker_client import WorkerTimeout
    out["versions"] = versions()
    out["shape"] = dict(manifest.shapes["bench"])
    if manifest.language not in ("triton", "cuda"):
        out.update(status="skipped", reason=f"profile: a {manifest.language} kernel has no work profile",
                   device="none (not run: no counting for it)", mode="host")
        return EXIT_SKIPPED
    cuda = manifest.language == "cuda"
    if args.source is not None and manifest.language == "triton":
        # the interpreter would run the baseline's own program: its counts are the baseline's,
        # which the caller has (check.interpreter_identical; parsed, never imported)
        from .check import interpreter_identical
        same = interpreter_identical(manifest.source_path, args.source)
        if same is not None:
            out.update(status="ok", same_program=same, device="none (not run: the baseline's program)",
                       mode="interpreter-tf32")
            return EXIT_OK
    from ..cachedir import read_entry, write_entry
    try:
        key = _cache_key(manifest, args.source)
    except (OSError, subprocess.SubprocessError, Unkeyable):   # a file gone, no compiler, a folder too
        key = None                                              # large: counted, not cached
    body = read_entry("profile", key) if key else None
    if body is not None and isinstance(body.get("totals"), dict) and isinstance(body.get("lines"), list):
        out.update(body)
        out["status"] = "ok"
        return EXIT_OK
    try:
        body = profile_kernel(manifest, args.source, deadline=args.deadline)
        out.update(body)
    except WorkerTimeout as e:
        out.update(status="error", error=f"timed out: {e}")
        return EXIT_ERROR
    except ProfileSkipped as e:
        out.update(status="skipped", reason=f"profile: {e}", device="none (not run: the kernel cannot run here)",
                   mode="emulation")
        return EXIT_SKIPPED
    except ProfileError as e:
        out.update(status="error", error=str(e), device="cpu (CUDA emulation)" if cuda else "cpu (triton interpreter)",
                   mode="emulation" if cuda else "interpreter-tf32")
        return EXIT_ERROR
    if key:
        write_entry("profile", key, body)
    out["status"] = "ok"
    return EXIT_OK
