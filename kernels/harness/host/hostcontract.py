"""Host contracts: what a pybind11/C++ host module must do, as data beside it (docs/CONTRACTS.md,
"Host (C++) contracts").

Like kernels/harness/contract.py for device kernels: the contract module is imported here, in the
checker's process, by file path, never in the worker that loads the candidate. Every call into it
goes through `HostContract`, which validates what comes back, so that a broken contract (it
raises, lacks a function, returns a malformed case, an expected value of the wrong size, a NaN)
is ONE line naming the file and the function (`ContractError`): the harness answers status
"error", never a verdict about the module.
"""
import re
from pathlib import Path

import numpy as np

from ..contract import ContractError, _one_line, load_module_contract
from .cases import Arr, Case, Service

__all__ = ["HostContract", "load_host_contract"]

REQUIRED = ("FUNCTIONS", "FAMILIES", "cases")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")   # array names become file names in the scratch directory


def load_host_contract(manifest):
    """The host manifest's contract, validated."""
    return load_module_contract(manifest, HostContract)


class HostContract:
    """A validated host contract module. The harness calls only these methods."""

    def __init__(self, path, mod):
        self.path, self.mod = Path(path), mod
        missing = [n for n in REQUIRED if not hasattr(mod, n)]
        if missing:
            raise ContractError(f"contract {path}: {', '.join(missing)} missing (a host contract needs "
                                f"{', '.join(REQUIRED)})")
        self.functions = self._names("FUNCTIONS")
        self.families = self._names("FAMILIES")
        self.gate_families = self._names("GATE_FAMILIES", self.families)
        bad = [f for f in self.gate_families if f not in self.families]
        if bad:
            raise ContractError(f"contract {path}: GATE_FAMILIES names {', '.join(bad)}, not in FAMILIES")
        for f in ("cases", "bad_cases", "bench_cases", "service"):
            if hasattr(mod, f) and not callable(getattr(mod, f)):
                raise ContractError(f"contract {path}: {f} must be a function")
        self.name = getattr(mod, "OP", None) or self.path.stem

    def _names(self, attr, default=None):
        v = getattr(self.mod, attr, default)
        if isinstance(v, str) or not v or not all(isinstance(n, str) and n for n in v):
            raise ContractError(f"contract {self.path}: {attr} must be a non-empty list of names")
        return tuple(v)

    def fail(self, fn, why):
        return ContractError(f"contract {self.path}: {fn}(): {_one_line(why)}")

    def has(self, fn):
        return callable(getattr(self.mod, fn, None))

    def _call(self, fn, *args):
        f = getattr(self.mod, fn, None)
        if f is None or not callable(f):
            raise ContractError(f"contract {self.path}: {fn}() is missing")
        try:
            return f(*args)
        except ContractError:
            raise
        except NotImplementedError as e:
            raise ContractError(f"contract {self.path}: {fn}() is not written yet "
                                f"({_one_line(e, 200) or 'NotImplementedError'})") from None
        except Exception as e:  # noqa: BLE001 - the user's code: any failure is the contract's
            raise self.fail(fn, f"raised {type(e).__name__}: {e}") from None

    # cases --------------------------------------------------------------------------------------

    def cases(self, family, shape, seed, rng, params, exact):
        return self._cases("cases", exact, family, dict(shape), seed, rng, params)

    def bad_cases(self, shape, seed, rng, params, exact):
        if not self.has("bad_cases"):
            return []
        got = self._cases("bad_cases", exact, dict(shape), seed, rng, params)
        for c in got:
            if not c.expect_exc:
                raise self.fail("bad_cases", f"case {c.id!r} has no expect_exc (the exception it must raise)")
        return got

    def bench_cases(self, shape, seed, params, exact):
        if not self.has("bench_cases"):
            return []
        return self._cases("bench_cases", exact, dict(shape), seed, params)

    def _cases(self, fn, exact, *args):
        got = self._call(fn, *args)
        if isinstance(got, Case):
            got = [got]
        try:
            got = list(got)   # a generator runs here: its failure is the contract's too
        except TypeError:
            raise self.fail(fn, f"returned {type(got).__name__}, not a list of cases") from None
        except Exception as e:  # noqa: BLE001 - the user's code
            raise self.fail(fn, f"raised {type(e).__name__}: {e}") from None
        for c in got:
            self._validate_case(fn, c, exact)
        return got

    def _validate_case(self, fn, c, exact):
        if not isinstance(c, Case):
            raise self.fail(fn, f"returned a {type(c).__name__}, not a Case (kernels.harness.host.cases)")
        where = f"case {c.id!r}"
        if not isinstance(c.arrays, list) or not all(isinstance(a, Arr) for a in c.arrays):
            raise self.fail(fn, f"{where}: arrays must be a list of Arr")
        names = [a.name for a in c.arrays]
        if len(set(names)) != len(names) or not all(isinstance(n, str) and _NAME.match(n) for n in names):
            raise self.fail(fn, f"{where}: array names must be distinct plain names, got {names}")
        arrays = {a.name: a for a in c.arrays}
        spec = c.spec if isinstance(c.spec, dict) else {}
        kind = spec.get("kind")
        if kind == "call":
            calls = [(spec.get("fn"), spec.get("args"))]
        elif kind == "threads":
            calls = [(spec.get("fn"), a) for a in spec.get("threads") or [None]]
            if not isinstance(spec.get("repeat"), int) or spec["repeat"] < 1:
                raise self.fail(fn, f"{where}: a threads case needs repeat >= 1")
        elif kind == "phases":
            calls = []
            for ph in spec.get("phases") or []:
                for th in ph.get("threads") or []:
                    for call in th:
                        calls.append((call.get("fn"), call.get("args")))
                        if call.get("digest") is not None:
                            self._check_arg(fn, where, call["digest"], arrays)
            if not calls:
                raise self.fail(fn, f"{where}: a phases case makes no call")
        else:
            raise self.fail(fn, f"{where}: spec kind must be call, threads or phases, got {kind!r}")
        for f, args in calls:
            if f not in self.functions:
                raise self.fail(fn, f"{where}: calls {f!r}, not one of FUNCTIONS {list(self.functions)}")
            if not isinstance(args, list):
                raise self.fail(fn, f"{where}: a call's args must be a list")
            for a in args:
                self._check_arg(fn, where, a, arrays)
        if not isinstance(c.outputs, dict) or any(v not in arrays for v in c.outputs.values()):
            raise self.fail(fn, f"{where}: outputs must map names to its arrays' names")
        if c.expect_exc is not None:
            if (not isinstance(c.expect_exc, (tuple, list)) or len(c.expect_exc) != 2
                    or not isinstance(c.expect_exc[0], str) or not all(isinstance(m, str) for m in c.expect_exc[1])):
                raise self.fail(fn, f"{where}: expect_exc must be (exception class name, [message substrings])")
            return
        for out, name in c.outputs.items():
            a = arrays[name]
            e = a.expected
            if e is None:
                raise self.fail(fn, f"{where}: output {out} ({name}) has no expected value")
            if e.size != a.n:
                raise self.fail(fn, f"{where}: {out}: expected {e.size} elements, the array has {a.n}")
            if exact and e.dtype != a.flat.dtype:
                raise self.fail(fn, f"{where}: {out}: expected is {e.dtype}, the array {a.flat.dtype} (exact "
                                "bytes: the same dtype)")
            if e.dtype.kind == "f" and not np.all(np.isfinite(e)):
                raise self.fail(fn, f"{where}: {out}: {int(e.size - np.isfinite(e).sum())} non-finite expected values")
        r = c.expect_result
        if r is not None:
            vals = r if kind == "threads" else [r]
            if kind == "threads" and (not isinstance(r, list) or len(r) != len(spec["threads"])):
                raise self.fail(fn, f"{where}: expect_result must be one value per thread")
            if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
                raise self.fail(fn, f"{where}: expect_result must be an int (per thread: a list of ints)")

    def _check_arg(self, fn, where, a, arrays):
        if not isinstance(a, dict):
            raise self.fail(fn, f"{where}: an argument must be a dict (Arr.arg(), {{'none': True}}, scalar(v))")
        if a.get("none") or "value" in a:
            if "value" in a and not isinstance(a["value"], (bool, int, float)):
                raise self.fail(fn, f"{where}: scalar argument {a['value']!r} is not a number")
            return
        if a.get("array") not in arrays:
            raise self.fail(fn, f"{where}: an argument names array {a.get('array')!r}, not one of the case's")
        arr = arrays[a["array"]]
        start, count = a.get("start", 0), a.get("count", arr.flat.size - a.get("start", 0))
        if not (isinstance(start, int) and isinstance(count, int) and 0 <= start and count >= 0
                and start + count <= arr.flat.size):
            raise self.fail(fn, f"{where}: argument view [{start}, +{count}) lies outside array {arr.name}")

    # the service bench ----------------------------------------------------------------------------

    def service(self, shape, threads):
        """The validated service workload (cases.Service) at the bench shape."""
        svc = self._call("service", dict(shape), int(threads))
        if not isinstance(svc, Service):
            raise self.fail("service", f"returned {type(svc).__name__}, not a Service (kernels.harness.host.cases)")
        st, ix = svc.state, svc.index
        if not (isinstance(st, np.ndarray) and st.ndim == 2 and st.dtype == np.uint8 and st.size):
            raise self.fail("service", "state must be a non-empty 2-D uint8 array (rows x row bytes)")
        if not (isinstance(ix, np.ndarray) and ix.ndim == 2 and ix.dtype == np.int64):
            raise self.fail("service", "index must be a 2-D int64 array")
        rows = st.shape[0]
        if not isinstance(svc.threads, list) or len(svc.threads) != threads:
            raise self.fail("service", f"threads must hold one cycle per transfer thread ({threads})")
        for t, cycle in enumerate(svc.threads):
            if not cycle or not all(isinstance(step, list) and step for step in cycle):
                raise self.fail("service", f"thread {t}: a cycle is a non-empty list of non-empty steps")
            for step in cycle:
                for call in step:
                    if not isinstance(call, dict) or call.get("fn") not in self.functions:
                        raise self.fail("service", f"thread {t}: a call must name one of FUNCTIONS, got {call!r}"[:300])
                    for a in call.get("args") or []:
                        if isinstance(a, dict) and "index" in a:
                            ok = isinstance(a["index"], int) and 0 <= a["index"] < ix.shape[0]
                        else:
                            r = a.get("rows") if isinstance(a, dict) else None
                            ok = (a.get("state") in ("ro", "rw") and isinstance(r, list) and len(r) == 2
                                  and 0 <= r[0] < r[1] <= rows)
                        if not ok:
                            raise self.fail("service", f"thread {t}: argument {a!r} is not a state region or an index "
                                            f"row within bounds")
        if not isinstance(svc.regions, dict) or not svc.regions:
            raise self.fail("service", "regions must name the state's regions to verify")
        for name, (r0, n) in svc.regions.items():
            if not (0 <= r0 and n >= 0 and r0 + n <= rows):
                raise self.fail("service", f"region {name!r} ({r0}, {n}) lies outside the state's {rows} rows")
        pk = svc.peak or {}
        if not (isinstance(pk.get("bytes"), int) and pk["bytes"] > 0 and isinstance(pk.get("reps"), int)
                and isinstance(pk.get("rows"), list) and len(pk["rows"]) == 2):
            raise self.fail("service", "peak must be {rows: [r0, r1], bytes, reps}")
        if not callable(svc.final):
            raise self.fail("service", "final must be a function of the steps each thread completed")
        return svc

    def final(self, svc, steps):
        """The reference state after thread t completed steps[t] steps."""
        try:
            got = svc.final(list(steps))
        except Exception as e:  # noqa: BLE001 - the user's code
            raise self.fail("service.final", f"raised {type(e).__name__}: {e}") from None
        if not isinstance(got, np.ndarray) or got.shape != svc.state.shape or got.dtype != svc.state.dtype:
            g = f"{got.dtype}{list(got.shape)}" if isinstance(got, np.ndarray) else type(got).__name__
            raise self.fail("service.final", f"returned {g}, the state is {svc.state.dtype}{list(svc.state.shape)}")
        return got
