"""Work counting of a Triton kernel under the interpreter, per source line (SPEC section 8,
"Work profile and prediction"; the harness side is profile.py).

Runs in the check's worker (a copy in `rt/kidiom_rt/`, like interp.py): while `start()` is in
effect, every operation the interpreter executes for a kernel is counted against the line of the
kernel source that made it, the innermost Python frame whose file is one of the profiled sources
(a `@triton.jit` helper counts at its own lines; line 0 collects what no source line made):

- load / store bytes: active (unmasked) lanes x element size of every global load and store,
  seen at interp.py's load/store/atomic hook (`ACCESS_OBSERVERS`); an atomic counts as both.
- re-read bytes: of the loaded lanes, those at an address the same program already loaded with
  no store to it since (a cache would have served them), duplicates within one load included.
  The set of loaded addresses is per program: it starts empty when the program changes (the
  interpreter's `grid_idx`, a fresh tuple per program).
- special calls, per element and by function: exp, exp2, log, log2, sqrt, rsqrt, sin, cos, erf,
  div (a floating-point division of tensors or scalars, `tl.fdiv`, `div_rn`); `tl.sigmoid`
  (Triton's `1 / (1 + exp(-x))`) counts as one `sigmoid` per element, its exp and division not
  again.
- flops, per element: floating-point add, sub, mul (1), fma (2); `tl.sum` of n elements n-1 adds,
  `tl.cumsum` / `tl.cumprod` n-1 per scanned row (reductions with another combine function are
  counted through the combine function's own operations). Comparisons, selects, negations,
  conversions and integer arithmetic are not flops.
- dot MACs: `tl.dot(a[M, K], b[K, N])`: M * N * K (batched: times the batch).
- repeat calls (redundant computation, issue #24): of the special calls, those whose evaluation
  this same program already made earlier in the call: the same function on the same argument.
  An evaluation is keyed by (function, and per operand: dtype, shape and a 128-bit BLAKE2b digest
  of the argument array's bytes; a division keys both operands, `tl.sigmoid` its exp's argument),
  the whole array, never per element (masked lanes that happen to be equal are not redundancy);
  a repeat adds the evaluation's element count, at the line of the repeated evaluation. The set
  of keys is per program (emptied when the program changes, as the loaded addresses are).
- uniform calls: of the special calls, those whose key another program of the same launch
  evaluated first (the key remembered per launch, emptied at the launch's `set_grid_dim`, with
  the program that first made it): work every program of a grid axis computes identically, that
  could be done once. An evaluation may be both repeat and uniform; each is at most the line's
  special calls. Only digests are kept, at most `MAX_KEYS` per program and per launch (past
  that, no new key is remembered: the counts are then lower bounds).

The counters are the builder's methods (Triton 3.9's `InterpreterBuilder.create_fadd` and so on,
which `triton.language.semantic` calls), the reductions' `ReduceOps.sum` and `ScanOps.cumsum` /
`cumprod`, each wrapped once (`install()`, idempotent); outside `start()`/`finish()` they only
check a flag; `set_grid_dim` is wrapped too (a launch begins). The counts are the candidate's own
process's: the harness validates what comes back (profile.py) and never trusts it further than
counts.

The report (`finish`, `cuda_report`): JSON `{format: 2, lines: {line: {FIELDS..., special: {kind:
n}}}, programs}` (docs/HARNESS.md, "profile"); format 1 is the same without `repeat_calls` and
`uniform_calls`.
"""
import hashlib
import json
import sys

import numpy as np

__all__ = ["start", "finish", "install", "cuda_report", "SPECIAL_KINDS", "FIELDS"]

FIELDS = ("load_bytes", "store_bytes", "reread_bytes", "special_calls", "flops", "dot_macs", "repeat_calls",
          "uniform_calls")
LOAD, STORE, REREAD, SPECIAL, FLOPS, MACS, REPEAT, UNIFORM = range(8)
FORMAT = 2
MAX_KEYS = 1 << 18   # evaluation keys remembered per program and per launch (16-byte digests)
SPECIAL_KINDS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "div", "sigmoid")
# compound functions of triton.language counted as one special call per element (what they call
# inside is not counted again as special)
COMPOUND = {"sigmoid": "sigmoid"}


class _Counts:
    def __init__(self):
        self.active = False
        self.files = frozenset()
        self.lines = {}      # line -> [ints in FIELDS' order]
        self.special = {}    # line -> {kind: n}
        self.program = None  # the grid_idx object of the program whose loads `seen` holds
        self.programs = 0
        self.seen = np.empty(0, np.uint64)
        self.evaluated = set()   # keys of the special evaluations of the current program
        self.first = {}          # key -> the program (its number) that first evaluated it in this launch

    def reset(self, files):
        self.files = frozenset(str(f) for f in files)
        self.lines, self.special = {}, {}
        self.program, self.programs = None, 0
        self.seen = np.empty(0, np.uint64)
        self.evaluated, self.first = set(), {}

    def launch(self):
        """A launch begins (the interpreter's set_grid_dim): programs of another launch share nothing."""
        self.first = {}

    # where ------------------------------------------------------------------------------------
    def where(self):
        """(line, compound): the innermost frame in a profiled source, and the compound function
        of triton.language (sigmoid) the operation runs inside, if any."""
        f = sys._getframe(2)
        compound = None
        files = self.files
        while f is not None:
            code = f.f_code
            if code.co_filename in files:
                return f.f_lineno, compound
            if code.co_name in COMPOUND and "triton" in code.co_filename:
                compound = COMPOUND[code.co_name]
            f = f.f_back
        return 0, compound

    def add(self, line, field, n):
        row = self.lines.get(line)
        if row is None:
            row = self.lines[line] = [0] * len(FIELDS)
        row[field] += int(n)

    def add_special(self, line, kind, n, operands=()):
        self.add(line, SPECIAL, n)
        d = self.special.setdefault(line, {})
        d[kind] = d.get(kind, 0) + int(n)
        if operands:
            self.redundancy(line, kind, n, operands)

    def redundancy(self, line, kind, n, operands):
        """Repeat and uniform counts of one evaluation of `kind` on `operands` (the builder's input
        handles), keyed by a digest of the whole arrays."""
        h = hashlib.blake2b(kind.encode(), digest_size=16)
        for x in operands:
            d = np.asarray(x.data)
            h.update(f"|{d.dtype.str}{d.shape}|".encode())
            h.update(np.ascontiguousarray(d).data)
        key = h.digest()
        self._program_of()
        me = self.programs
        if key in self.evaluated:
            self.add(line, REPEAT, n)
        elif len(self.evaluated) < MAX_KEYS:
            self.evaluated.add(key)
        first = self.first.get(key)
        if first is None:
            if len(self.first) < MAX_KEYS:
                self.first[key] = me
        elif first != me:
            self.add(line, UNIFORM, n)

    # memory -----------------------------------------------------------------------------------
    def _program_of(self):
        idx = getattr(_BUILDER[0], "grid_idx", None)
        if idx is not self.program:
            self.program = idx
            self.programs += 1
            self.seen = np.empty(0, np.uint64)
            self.evaluated = set()

    def access(self, kind, addrs, itemsize):
        """interp.py's observer: `kind` load | store | atomic, the active lanes' addresses."""
        if not self.active:
            return
        line, _ = self.where()
        addrs = np.asarray(addrs).astype(np.uint64, copy=False).ravel()
        n = int(addrs.size)
        if n == 0:
            return
        self._program_of()
        if kind in ("load", "atomic"):
            self.add(line, LOAD, n * itemsize)
        if kind in ("store", "atomic"):
            self.add(line, STORE, n * itemsize)
        if kind == "load":
            u = np.unique(addrs)
            again = n - int(u.size)
            if self.seen.size:
                pos = np.minimum(np.searchsorted(self.seen, u), self.seen.size - 1)
                hit = self.seen[pos] == u
                again += int(np.count_nonzero(hit))
                new = u[~hit]
            else:
                new = u
            if again:
                self.add(line, REREAD, again * itemsize)
            if new.size:
                self.seen = np.union1d(self.seen, new)
        elif self.seen.size:
            # a store (or an atomic) makes the next load of those addresses a fresh one
            self.seen = self.seen[~np.isin(self.seen, addrs)]

    # arithmetic -------------------------------------------------------------------------------
    def arith(self, result, kind, per_element, operands=()):
        if not self.active:
            return
        data = getattr(result, "data", None)
        if data is None or getattr(data, "dtype", None) is None or data.dtype.kind != "f":
            return
        n = int(np.size(data))
        line, compound = self.where()
        operands = tuple(x for x in operands if getattr(x, "data", None) is not None)
        if kind == "flops":
            self.add(line, FLOPS, n * per_element)
        elif compound is not None:
            # inside tl.sigmoid: one evaluation per element, at its exp (keyed by the exp's
            # argument, -x); its division is part of it
            if kind == "exp":
                self.add_special(line, compound, n, operands)
        else:
            self.add_special(line, kind, n, operands)

    def dot(self, a, b):
        if not self.active:
            return
        ad, bd = np.asarray(a.data), np.asarray(b.data)
        if ad.ndim < 2 or bd.ndim < 2:
            return
        line, _ = self.where()
        self.add(line, MACS, int(ad.size) * int(bd.shape[-1]))

    def reduction(self, data, axis):
        """n-1 operations per reduced row."""
        if not self.active:
            return
        data = np.asarray(data)
        if data.dtype.kind != "f" or data.size == 0:
            return
        rows = 1 if axis is None else data.size // max(1, data.shape[axis])
        line, _ = self.where()
        self.add(line, FLOPS, int(data.size) - rows)

    # report -----------------------------------------------------------------------------------
    def report(self):
        lines = {}
        for line, row in sorted(self.lines.items()):
            entry = dict(zip(FIELDS, row))
            entry["special"] = dict(self.special.get(line, {}))
            lines[str(line)] = entry
        return {"format": FORMAT, "lines": lines, "programs": self.programs}


COUNTS = _Counts()
_INSTALLED = [False]
_BUILDER = [None]   # the interpreter's builder: its grid_idx names the running program

# builder method -> (kind, per element)
_ARITH = {
    "create_fadd": ("flops", 1), "create_fsub": ("flops", 1), "create_fmul": ("flops", 1),
    "create_fma": ("flops", 2),
    "create_fdiv": ("div", 1), "create_precise_divf": ("div", 1), "create_approx_divf": ("div", 1),
    "create_exp": ("exp", 1), "create_exp2": ("exp2", 1), "create_log": ("log", 1), "create_log2": ("log2", 1),
    "create_sqrt": ("sqrt", 1), "create_precise_sqrt": ("sqrt", 1), "create_rsqrt": ("rsqrt", 1),
    "create_sin": ("sin", 1), "create_cos": ("cos", 1), "create_erf": ("erf", 1),
}


def _wrap_arith(orig, kind, per):
    def wrapped(self, *args, **kwargs):
        r = orig(self, *args, **kwargs)
        if COUNTS.active:
            # the input handles key a special evaluation (repeat / uniform calls)
            COUNTS.arith(r, kind, per, args if kind != "flops" else ())
        return r
    wrapped.__wrapped__ = orig
    return wrapped


def _wrap_dot(orig):
    def create_dot(self, a, b, *args, **kwargs):
        if COUNTS.active:
            COUNTS.dot(a, b)
        return orig(self, a, b, *args, **kwargs)
    create_dot.__wrapped__ = orig
    return create_dot


def _wrap_grid_dim(orig):
    def set_grid_dim(self, *args, **kwargs):
        if COUNTS.active:
            COUNTS.launch()
        return orig(self, *args, **kwargs)
    set_grid_dim.__wrapped__ = orig
    return set_grid_dim


def _wrap_reduce(orig):
    def wrapped(self, input, *args, **kwargs):
        if COUNTS.active:
            COUNTS.reduction(input.handle.data, self.axis)
        return orig(self, input, *args, **kwargs)
    wrapped.__wrapped__ = orig
    return wrapped


def _wrap_scan(orig):
    def wrapped(self, input, *args, **kwargs):
        if COUNTS.active:
            for t in (input if isinstance(input, (list, tuple)) else [input]):
                COUNTS.reduction(t.handle.data, self.axis)
        return orig(self, input, *args, **kwargs)
    wrapped.__wrapped__ = orig
    return wrapped


def install():
    """Wrap the interpreter's builder, reductions and scans, and observe interp.py's memory hook
    (idempotent). Call after interp.py's own patches (TF32 dots, bounds check)."""
    if _INSTALLED[0]:
        return
    from triton.runtime import interpreter as ti
    from . import interp
    B = ti.InterpreterBuilder
    for name, (kind, per) in _ARITH.items():
        if hasattr(B, name):
            setattr(B, name, _wrap_arith(getattr(B, name), kind, per))
    B.create_dot = _wrap_dot(B.create_dot)
    B.set_grid_dim = _wrap_grid_dim(B.set_grid_dim)
    if hasattr(ti, "ReduceOps") and hasattr(ti.ReduceOps, "sum"):
        ti.ReduceOps.sum = _wrap_reduce(ti.ReduceOps.sum)
    if hasattr(ti, "ScanOps"):
        for name in ("cumsum", "cumprod"):
            if hasattr(ti.ScanOps, name):
                setattr(ti.ScanOps, name, _wrap_scan(getattr(ti.ScanOps, name)))
    _BUILDER[0] = ti.interpreter_builder
    interp.ACCESS_OBSERVERS.append(COUNTS.access)
    _INSTALLED[0] = True


def start(files):
    """Count from zero, against the lines of `files` (the kernel sources)."""
    install()
    COUNTS.reset(files or ())
    COUNTS.active = True


def finish(path):
    """Stop counting and write the report to `path` (JSON); returns `path`."""
    COUNTS.active = False
    with open(path, "w") as f:
        json.dump(COUNTS.report(), f)
    return path


def cuda_report(path, lines, special, programs, flops_counted, lane_bytes):
    """Write the CUDA emulation's counts (the launcher's, kernels/harness/cuda/emulation.py: {line: [8
    ints in FIELDS' order]}, {line: {kind: n}}, the blocks run) as a report of this format, with
    `flops_counted` (false: the source did not build with the counting float, flops and float
    divisions are not counted) and `lane_bytes` (global bytes every lane moved, uncoalesced)."""
    out = {}
    for line, row in sorted(lines.items()):
        entry = dict(zip(FIELDS, (int(x) for x in row)))
        entry["special"] = {k: int(n) for k, n in special.get(line, {}).items() if n}
        out[str(line)] = entry
    with open(path, "w") as f:
        json.dump({"format": FORMAT, "lines": out, "programs": int(programs), "flops_counted": bool(flops_counted),
                   "lane_bytes": int(lane_bytes)}, f)
    return path
