"""Contract modules: what a kernel must compute, as data next to its manifest (docs/CONTRACTS.md).

A contract module is the user's trusted numpy code. It is imported here, in the checker's process
(by file path, never through the package tree), and never in the worker that runs the candidate:
the worker only ever sees argument names, shapes, scalars and launch configurations that this
module computed. Every call into the contract goes through `Contract`, which validates what comes
back, so that a broken contract (it raises, lacks a function, returns a wrong shape or dtype, a
NaN reference) is ONE line naming the file and the function (`ContractError`): the harness then
answers status "error", never a verdict about the kernel.
"""
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np

__all__ = ["Contract", "ContractError", "load_contract", "shipped_contracts", "SHAPE_KEY"]

KERNELS_DIR = Path(__file__).resolve().parent.parent

REQUIRED = ("ARGS", "INPUTS", "INOUTS", "OUTPUTS", "tensors", "make_inputs", "reference")
# Inputs dicts carry their shape under this key (the harness needs it for the outputs' shapes and
# a CUDA launch); it is stripped before the contract's own functions see the dict.
SHAPE_KEY = "__shape__"
# Outputs and in/out tensors travel as float32 (the worker's NaN poison and sentinel tails), except
# the in/outs a contract names in STORED: a precision variant's stored state (its bits and scales,
# kernels/kda/decode_state_contract.py), which only the precision gate judges (cli.py refuses
# check, bench, spec and profile on a variant manifest).
RESULT_DTYPES = ("float32",)


def as_numpy(v):
    """A contract may compute with torch (CPU tensors, its launcher's own language): its tensors
    come back as numpy arrays (bf16 and fp16 widened to float32, which holds them exactly); any
    other value as it is. torch is never imported here: a contract that uses it already has."""
    if type(v).__module__.split(".")[0] != "torch" or not hasattr(v, "detach"):
        return v
    t = v.detach().cpu()
    if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
        t = t.float()
    return t.numpy()


class ContractError(Exception):
    """A contract that cannot be used: one line, naming the file and the function."""


def _one_line(s, n=300):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def shipped_contracts():
    """{OP: path} of the contract modules kidiom ships (kernels/*/*contract*.py declaring `OP =
    "..."`): format-1 manifests name their contract by `op`. Read as text, not imported."""
    out = {}
    for p in sorted(KERNELS_DIR.glob("*/*contract*.py")):
        m = re.search(r'^OP\s*=\s*["\']([\w.\-]+)["\']', p.read_text(errors="replace"), re.M)
        if m:
            out.setdefault(m.group(1), p)
    return out


def _import(path):
    name = f"kidiom_contract_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ContractError(f"contract {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    # a contract may import helpers next to it (its own reference module)
    added = str(path.parent) not in sys.path
    if added:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - the user's module: any failure is its own
        raise ContractError(f"contract {path}: import raised {type(e).__name__}: {_one_line(e)}") from None
    finally:
        if added:
            sys.path.remove(str(path.parent))
    sys.modules[name] = mod
    return mod


_cache = {}


def load_module_contract(manifest, kind):
    """The manifest's contract module (format 2: its `contract` file; format 1: the shipped module
    whose OP is the manifest's `op`) wrapped and validated by `kind(path, module)`, once per file
    version."""
    path = manifest.contract_path
    if path is None:
        raise ContractError(f"manifest {manifest.path}: no contract module implements op {manifest.op!r} "
                            f"(known: {', '.join(sorted(shipped_contracts())) or 'none'})")
    path = Path(path).resolve()
    if not path.is_file():
        raise ContractError(f"contract {path}: no such file (manifest {manifest.path})")
    key = (kind, str(path), path.stat().st_mtime_ns)
    if key not in _cache:
        _cache[key] = kind(path, _import(path))
    return _cache[key]


def load_contract(manifest):
    """The manifest's kernel contract, validated."""
    return load_module_contract(manifest, Contract)


def _names(mod, path, attr, required=True):
    v = getattr(mod, attr, None if required else ())
    if v is None:
        raise ContractError(f"contract {path}: {attr} is missing")
    if isinstance(v, str) or not all(isinstance(n, str) for n in v):
        raise ContractError(f"contract {path}: {attr} must be a list of argument names")
    return tuple(v)


class Contract:
    """A validated contract module. The harness calls only these methods."""

    def __init__(self, path, mod):
        self.path, self.mod = Path(path), mod
        missing = [n for n in REQUIRED if not hasattr(mod, n)]
        if missing:
            raise ContractError(f"contract {path}: {', '.join(missing)} missing (required: {', '.join(REQUIRED)})")
        self.args = _names(mod, path, "ARGS")
        self.inputs = _names(mod, path, "INPUTS")
        self.inouts = _names(mod, path, "INOUTS")
        self.outputs = _names(mod, path, "OUTPUTS")
        self.optional = _names(mod, path, "OPTIONAL", required=False)
        self.variants = _names(mod, path, "VARIANTS", required=False)
        # outputs the launcher allocates and returns (`return o, final_state`), in the order it
        # returns them: not among ARGS; the others are allocated by the harness and passed in. None
        # holds the place of a returned value that is not one (`return out, final_state` where
        # `out` is a parameter: RETURNS = [None, "final_state"])
        raw = getattr(mod, "RETURNS", ())
        if isinstance(raw, str) or not all(n is None or isinstance(n, str) for n in raw):
            raise ContractError(f"contract {path}: RETURNS must be a list of output names (None: a place skipped)")
        self.return_places = tuple(raw)
        self.returns = tuple(n for n in raw if n is not None)
        self.name = getattr(mod, "OP", None) or self.path.stem
        roles = self.inputs + self.inouts + self.outputs
        bad = [n for n in self.returns if n not in self.outputs or n in self.args]
        if bad or len(set(self.returns)) != len(self.returns):
            raise ContractError(f"contract {path}: RETURNS names {', '.join(bad) or 'an output twice'}: each must be "
                                "one of OUTPUTS, once, and not among ARGS (the launcher allocates and returns it)")
        unpassed = [n for n in self.outputs + self.inouts if n not in self.args and n not in self.returns]
        if unpassed:
            raise ContractError(f"contract {path}: {', '.join(unpassed)} not among ARGS or RETURNS: an output is "
                                "either a parameter of the launcher (ARGS: the harness allocates it and passes it "
                                "in) or what the launcher returns (RETURNS, in the order it returns them); an in/out "
                                "tensor is always a parameter")
        if len(set(roles)) != len(roles) or set(roles) != set(self.args) | set(self.returns) \
                or len(set(self.args)) != len(self.args):
            raise ContractError(f"contract {path}: INPUTS, INOUTS and OUTPUTS must name every ARGS and RETURNS "
                                "name once")
        bad = [n for n in self.optional if n not in self.inputs]
        if bad:
            raise ContractError(f"contract {path}: OPTIONAL names {', '.join(bad)}, which are not INPUTS")
        for f in ("tensors", "make_inputs", "reference", "slices", "written", "smaller", "counted", "launch", "sequence"):
            if hasattr(mod, f) and not callable(getattr(mod, f)):
                raise ContractError(f"contract {path}: {f} must be a function")
        self.fixed = _names(mod, path, "FIXED", required=False)
        bad = [n for n in self.fixed if n not in self.inputs]
        if bad:
            raise ContractError(f"contract {path}: FIXED names {', '.join(bad)}, which are not INPUTS")
        self.stored = _names(mod, path, "STORED", required=False)
        bad = [n for n in self.stored if n not in self.inouts]
        if bad:
            raise ContractError(f"contract {path}: STORED names {', '.join(bad)}, which are not INOUTS")
        self.slice_axes = dict(getattr(mod, "SLICE_AXES", {}) or {})
        self.ranges = self._ranges(getattr(mod, "RANGES", None) or {})
        self.results = self.outputs + self.inouts
        self._tensors = {}

    def _ranges(self, r):
        """RANGES {input: (lo, hi)}: the values each input takes in production, ends included (the
        check's second call draws over all of it, `extremes`). Whether a name is a float tensor
        depends on `tensors(shape)`: `extremes` checks that."""
        where = f"contract {self.path}: RANGES"
        if not isinstance(r, dict):
            raise ContractError(f"{where} must be a dict {{input name: (lo, hi)}}, got {type(r).__name__}")
        out = {}
        for n, v in r.items():
            if n not in self.inputs + self.inouts or n in self.stored:
                raise ContractError(f"{where} names {n!r}, which is not an INPUTS or INOUTS name"
                                    + (" (it is STORED: bits, not values)" if n in self.stored else ""))
            pair = tuple(v) if isinstance(v, (tuple, list)) else ()
            if len(pair) != 2 or not all(isinstance(b, (int, float, np.integer, np.floating)) and
                                         not isinstance(b, (bool, np.bool_)) for b in pair):
                raise ContractError(f"{where}[{n!r}] must be a pair of numbers (lo, hi), got {v!r}")
            lo, hi = float(pair[0]), float(pair[1])
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ContractError(f"{where}[{n!r}] = {v!r}: both ends must be finite")
            if lo > hi:
                raise ContractError(f"{where}[{n!r}] = {v!r}: lo > hi")
            out[n] = (lo, hi)
        return out

    # calling the user's code ----------------------------------------------------------------------

    def fail(self, fn, why):
        return ContractError(f"contract {self.path}: {fn}(): {_one_line(why)}")

    def _call(self, fn, *args):
        f = getattr(self.mod, fn, None)
        if f is None or not callable(f):
            raise ContractError(f"contract {self.path}: {fn}() is missing")
        try:
            return f(*args)
        except ContractError:
            raise
        except NotImplementedError as e:
            # a skeleton `kidiom init` wrote: say what is left to write, not that it "raised"
            left = _one_line(e, 200) or "NotImplementedError"
            raise ContractError(f"contract {self.path}: {fn}() is not written yet ({left})") from None
        except Exception as e:  # noqa: BLE001 - the user's code: any failure is the contract's
            raise self.fail(fn, f"raised {type(e).__name__}: {e}") from None

    def has(self, fn):
        return callable(getattr(self.mod, fn, None))

    # shapes -----------------------------------------------------------------------------------------

    def tensors(self, shape):
        """{name: (shape tuple, dtype name)} for tensors, {name: value} for scalars: every ARGS and
        RETURNS name."""
        key = tuple(sorted(shape.items()))
        if key in self._tensors:
            return self._tensors[key]
        t = self._call("tensors", dict(shape))
        if not isinstance(t, dict):
            raise self.fail("tensors", f"returned {type(t).__name__}, not a dict")
        missing = [n for n in self.args + self.returns if n not in t]
        if missing:
            raise self.fail("tensors", f"lacks {', '.join(missing)} at {dict(shape)}")
        out = {}
        for n in self.args + self.returns:
            v = t[n]
            if isinstance(v, (tuple, list)) and len(v) == 2 and isinstance(v[0], (tuple, list)):
                try:
                    dims, dt = tuple(int(d) for d in v[0]), np.dtype(v[1]).name
                except (TypeError, ValueError) as e:
                    raise self.fail("tensors", f"{n}: {e}") from None
                if any(d < 0 for d in dims):
                    raise self.fail("tensors", f"{n}: negative size in {dims}")
                if n in self.results and n not in self.stored and dt not in RESULT_DTYPES:
                    raise self.fail("tensors", f"{n}: outputs and in/out tensors must be float32, not {dt}")
                out[n] = (dims, dt)
            elif isinstance(v, (bool, int, float, str)) or v is None:
                # a str too: upstream launchers take modes by name (`reduction: str = 'batchmean'`)
                if n in self.results:
                    raise self.fail("tensors", f"{n} is an output or in/out: it must be a tensor (shape, dtype)")
                out[n] = v
            else:
                raise self.fail("tensors", f"{n}: expected (shape, dtype), a number or a str, got {type(v).__name__}")
        self._tensors[key] = out
        return out

    def flags(self, x):
        """The mode flags of inputs `x` that the checks vary: its bool scalar INPUTS, less FIXED."""
        return [n for n in self.inputs if n not in self.fixed and isinstance(x.get(n), (bool, np.bool_))]

    def is_tensor(self, name, shape):
        return isinstance(self.tensors(shape)[name], tuple)

    def smaller(self, shape):
        """Shapes of the same specialisation, most reduced first, `shape` itself last."""
        if not self.has("smaller"):
            return [dict(shape)]
        return self._shapes("smaller", shape)

    def _shapes(self, fn, shape):
        got = self._call(fn, dict(shape))
        try:
            shapes = [dict(s) for s in got]
        except (TypeError, ValueError):
            raise self.fail(fn, "must return a list of shapes (dicts)") from None
        except Exception as e:  # noqa: BLE001 - a generator fails here
            raise self.fail(fn, f"raised {type(e).__name__}: {e}") from None
        for s in shapes:
            if set(s) != set(shape) or not all(isinstance(v, int) and v > 0 for v in s.values()):
                raise self.fail(fn, f"{s}: a shape has the variables of {dict(shape)}, positive integers")
        shapes = [s for s in shapes if s != dict(shape)]
        return shapes + [dict(shape)]

    def counted(self, shape):
        """Shapes `profile` may count at instead of `shape` (the contract's `counted`, else `smaller`)."""
        if not self.has("counted"):
            return self.smaller(shape)
        return self._shapes("counted", shape)

    def launch(self, shape):
        """CUDA: {grid: [x, y, z], block: [x, y, z], params: [name | {int: v} | {float: v}]}."""
        got = self._call("launch", dict(shape))
        if not isinstance(got, dict):
            raise self.fail("launch", "must return {grid, block, params}")
        out = {}
        for k in ("grid", "block"):
            v = got.get(k)
            v = [v] if isinstance(v, int) else v
            if not (isinstance(v, (list, tuple)) and 1 <= len(v) <= 3 and
                    all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in v)):
                raise self.fail("launch", f"{k} must be 1 to 3 positive integers, got {got.get(k)!r}")
            out[k] = list(v) + [1] * (3 - len(v))
        params = []
        tensors = self.tensors(shape)
        for p in got.get("params") or []:
            if isinstance(p, str):
                if p not in tensors:
                    raise self.fail("launch", f"param {p!r} is not an argument name")
                if isinstance(tensors[p], tuple):
                    params.append({"ptr": p})
                else:
                    params.append({"float" if isinstance(tensors[p], float) else "int": tensors[p]})
            elif isinstance(p, dict) and len(p) == 1 and next(iter(p)) in ("int", "float"):
                kind, v = next(iter(p.items()))
                if not isinstance(v, (int, float)) or isinstance(v, bool) or (kind == "int" and not isinstance(v, int)):
                    raise self.fail("launch", f"param {p!r}: not a {kind}")
                params.append({kind: v})
            else:
                raise self.fail("launch", f"param {p!r}: an argument name, {{'int': v}} or {{'float': v}}")
        if not params:
            raise self.fail("launch", "params is empty")
        out["params"] = params
        return out

    # values -----------------------------------------------------------------------------------------

    def make_inputs(self, shape, rng, variant=None, without=()):
        """INPUTS and INOUTS at `shape` (validated against `tensors`); `without`: OPTIONAL inputs
        set to None (the case without them)."""
        if variant is not None and variant not in self.variants:
            raise self.fail("make_inputs", f"variant {variant!r} is not in VARIANTS {list(self.variants)}")
        x = self._call("make_inputs", dict(shape), rng, variant)
        if not isinstance(x, dict):
            raise self.fail("make_inputs", f"returned {type(x).__name__}, not a dict")
        x = {n: as_numpy(x.get(n)) for n in self.inputs + self.inouts}
        for n in without:
            x[n] = None
        self._validate_inputs("make_inputs", x, shape)
        x[SHAPE_KEY] = dict(shape)
        return x

    def _validate_inputs(self, fn, x, shape):
        t = self.tensors(shape)
        for n in self.inputs + self.inouts:
            v = x.get(n)
            if v is None:
                if n in self.optional or t[n] is None:
                    continue
                raise self.fail(fn, f"{n} is missing (only OPTIONAL inputs may be None)")
            if isinstance(t[n], tuple):
                dims, dt = t[n]
                if not isinstance(v, np.ndarray) or v.shape != dims or v.dtype.name != dt:
                    got = f"{v.dtype.name}{list(v.shape)}" if isinstance(v, np.ndarray) else type(v).__name__
                    raise self.fail(fn, f"{n}: got {got}, tensors() says {dt}{list(dims)}")
            elif not isinstance(v, (int, float, bool, str, np.number, np.bool_)):
                # a bool is a scalar too: the mode flags upstream launchers take (`use_gate: bool`), and
                # a str (`reduction: str = 'batchmean'`)
                raise self.fail(fn, f"{n}: a scalar, got {type(v).__name__}")

    def extremes(self, x, rng, share=8):
        """A copy of the inputs `x` with every RANGES input drawn over its whole declared range:
        uniform in [lo, hi], then 1/`share` of its elements exactly lo and as many exactly hi (each
        end at least once where there are two elements), positions from `rng`. Realistic draws
        alone never reach where a clamp or a cheaper formula goes wrong. Other inputs are the same
        objects; an OPTIONAL input left out (None) stays out."""
        t, out = self.tensors(x[SHAPE_KEY]), dict(x)
        for n, (lo, hi) in self.ranges.items():
            if not (isinstance(t[n], tuple) and np.dtype(t[n][1]).kind == "f"):
                got = f"a tensor of {t[n][1]}" if isinstance(t[n], tuple) else f"a scalar ({t[n]!r})"
                raise ContractError(f"contract {self.path}: RANGES names {n!r}, {got}: only float tensors "
                                    "have values to draw over a range")
            if x.get(n) is None:
                continue
            dt = x[n].dtype
            lo_, hi_ = dt.type(lo), dt.type(hi)   # the ends as the tensor holds them, kept inside
            lo_ = np.nextafter(lo_, dt.type(np.inf)) if float(lo_) < lo else lo_   # float(): not in dt
            hi_ = np.nextafter(hi_, dt.type(-np.inf)) if float(hi_) > hi else hi_
            if lo_ > hi_:
                raise ContractError(f"contract {self.path}: RANGES[{n!r}] = {(lo, hi)}: no {dt} value lies in it")
            a = np.clip(rng.uniform(lo, hi, x[n].shape).astype(dt), lo_, hi_)
            flat = a.reshape(-1)
            pos = rng.permutation(flat.size)
            k = max(1, flat.size // share) if flat.size >= 2 else 0
            flat[pos[:k]], flat[pos[k:2 * k]] = lo_, hi_
            if flat.size == 1:
                flat[0] = lo_ if rng.random() < 0.5 else hi_
            out[n] = a
        return out

    @property
    def carry(self):
        """CARRY {output: input}: a call's output that is the next call's input (drift)."""
        c = getattr(self.mod, "CARRY", None) or {}
        if not isinstance(c, dict) or any(k not in self.outputs or v not in self.inputs for k, v in c.items()):
            raise ContractError(f"contract {self.path}: CARRY maps OUTPUTS names to INPUTS names")
        return dict(c)

    def sequence(self, shape, steps, rng, variant=None):
        """Inputs of `steps` calls that continue one another (the drift): the contract's
        `sequence(shape, steps, rng)`, else independent `make_inputs` of `variant`. In/out tensors
        and CARRY inputs matter in the first call only (later ones get what the last left)."""
        if not self.has("sequence"):
            return [self.make_inputs(shape, rng, variant) for _ in range(steps)]
        xs = self._call("sequence", dict(shape), steps, rng)
        if not isinstance(xs, list) or len(xs) != steps or not all(isinstance(x, dict) for x in xs):
            raise self.fail("sequence", f"must return a list of {steps} dicts of inputs")
        out = []
        for t, x in enumerate(xs):
            x = {n: as_numpy(x.get(n)) for n in self.inputs + self.inouts}
            check = x if t == 0 else dict(out[0], **{n: v for n, v in x.items() if v is not None})
            self._validate_inputs("sequence", check, shape)
            x[SHAPE_KEY] = dict(shape)
            out.append(x)
        return out

    def shape_of(self, x):
        return x[SHAPE_KEY]

    def strip(self, x):
        return {n: v for n, v in x.items() if n != SHAPE_KEY}

    def reference(self, x):
        """float64 results {name: array} for every OUTPUTS and INOUTS name, finite, of their shapes."""
        shape = x[SHAPE_KEY]
        got = self._call("reference", self.strip(x))
        if not isinstance(got, dict):
            raise self.fail("reference", f"returned {type(got).__name__}, not a dict")
        out = {}
        t = self.tensors(shape)
        for n in self.results:
            if n not in got:
                raise self.fail("reference", f"lacks {n}")
            try:
                a = np.asarray(as_numpy(got[n]), dtype=np.float64)
            except (TypeError, ValueError, RuntimeError) as e:
                raise self.fail("reference", f"{n}: not an array of numbers ({e})") from None
            if a.shape != t[n][0]:
                raise self.fail("reference", f"{n}: shape {list(a.shape)}, tensors() says {list(t[n][0])}")
            if not np.all(np.isfinite(a)):
                raise self.fail("reference", f"{n}: {int(a.size - np.isfinite(a).sum())} non-finite values")
            out[n] = a
        return out

    def written(self, name, x):
        """Where the call writes the in/out `name` (bool mask; everywhere by default)."""
        full = np.ones(np.shape(x[name]), dtype=bool)
        if not self.has("written"):
            return full
        m = self._call("written", name, self.strip(x))
        m = np.asarray(m)
        if m.shape != full.shape or m.dtype != bool:
            raise self.fail("written", f"{name}: a bool mask of shape {list(full.shape)}, got {m.dtype}{list(m.shape)}")
        return m

    def slices(self, name, a):
        """(index, sub-array) pairs of the worst-slice error (default: per leading index)."""
        if self.slice_lead(name) is None:
            got = self._call("slices", name, a)
            try:
                items = list(got)   # a generator runs here: its failure is the contract's too
            except Exception as e:  # noqa: BLE001
                raise self.fail("slices", f"raised {type(e).__name__}: {e}") from None
            for item in items:
                yield self._slice(name, item)
        else:
            for idx in np.ndindex(a.shape[: self.slice_lead(name)]):
                yield idx, a[idx]

    def _slice(self, name, item):
        """One (index, sub-array) pair of `slices`, the index as a tuple of ints (a bare int, as a
        1-D slicing writes it, is one index)."""
        try:
            idx, sub = item
        except (TypeError, ValueError):
            raise self.fail("slices", f"{name}: {type(item).__name__} is not an (index, sub-array) pair") from None
        try:
            idx = (int(idx),) if np.ndim(idx) == 0 else tuple(int(i) for i in idx)
        except (TypeError, ValueError):
            raise self.fail("slices", f"{name}: index {idx!r} is not an int or a tuple of ints") from None
        if not isinstance(sub, np.ndarray):
            raise self.fail("slices", f"{name}: the slice at {idx} is a {type(sub).__name__}, not a part of the array")
        return idx, sub

    def slice_lead(self, name):
        """Leading axes that define a slice (SLICE_AXES, default 1), or None when `slices` does
        (SLICE_AXES first: it is computed on all slices at once)."""
        if name in self.slice_axes:
            return int(self.slice_axes[name])
        return None if self.has("slices") else 1

    # what the worker is told --------------------------------------------------------------------

    def layout(self, x):
        """The request's description of a call on `x`: tensor inputs present, in/outs, outputs
        with shapes, scalars, and (a contract with `launch`: CUDA) the launch."""
        shape = x[SHAPE_KEY]
        t = self.tensors(shape)
        lay = {"inputs": [n for n in self.inputs if isinstance(t[n], tuple) and x.get(n) is not None],
               "inouts": list(self.inouts),
               "outputs": {n: list(t[n][0]) for n in self.outputs},
               "returns": list(self.return_places),
               "scalars": {n: (x[n].item() if isinstance(x.get(n), (np.number, np.bool_)) else x.get(n))
                           for n in self.inputs if not isinstance(t[n], tuple)}}
        if self.has("launch"):
            lay["launch"] = self.launch(shape)
        return lay

    def result_shape(self, name, x):
        return self.tensors(x[SHAPE_KEY])[name][0]

    def arrays(self, x):
        """The tensors a call sends: present INPUTS and INOUTS arrays."""
        return {n: v for n, v in x.items() if n != SHAPE_KEY and isinstance(v, np.ndarray)}

    def relation(self, fn):
        return getattr(self.mod, fn, None)
