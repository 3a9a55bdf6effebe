"""Host C++ kernels (`language = "cpp"`, e.g. kernels/kv_transfer/): compile, check, bench, driven
by the manifest's host contract (hostcontract.py; docs/CONTRACTS.md, "Host (C++) contracts"): this
module keeps nothing specific to an operation.

The harness process never imports a candidate module. Each run of candidate code happens in a
worker (worker.py, run from a copy in its scratch directory; worker_client.py starts it) in the
sandbox of kernels/harness/sandbox/: its own session (process group, killed at the deadline), a scrubbed environment,
cwd = a fresh scratch directory, resource limits, no network and its own PID namespace
(`unshare`) where the machine allows, no capabilities, and a Landlock file-system policy (writes
only beneath the scratch directory's out/ and work/); `sandbox` in the output says what applied.

check: the contract makes every case's inputs and expected values from fresh seeds (its families
at every cpu shape, its bad inputs with the exceptions they must raise, its concurrent cases); the
harness writes the inputs to the scratch directory (.npy, each array inside a flat buffer with
sentinel padding before and after), the worker calls the module and writes the arrays back, and
the harness judges them (exact bytes when every tolerance of the manifest is 0, else within it).
A crash of the candidate fails the case it happened in (named with the signal) and the remaining
cases continue in a fresh worker; a hang is an error. With a compiler that supports
-fsanitize=thread, the concurrent cases run again on a TSan build.

check also runs the contract's `bench_cases` (the bench's sizes, alone and from several threads at
once, every call judged on its own).

bench: the service bench (worker.serve and stats.py): requests/s and request latency of a service
loop whose requests each need the contract's transfer workload before their decode steps. Every
window runs in a fresh worker that loads one module (the baseline's or the candidate's, never
both), the variants interleaved round by round; each returns raw figures and digests of the state
its window ended in; each call's output is a later call's input, so that state is right only if
every call was, and the harness checks it against the contract's reference replay before computing
anything. The baseline's requests/s is kept per machine (`host-history/`): a run whose baseline is
far below its own history is flagged, never accepted.
"""
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import sandbox
from ..wire import git_commit
from . import build as hostbuild, stats as hoststats
from .hostcontract import load_host_contract
from .worker_client import HostTimeout, module_broke_worker, run_worker

__all__ = ["run_host_command", "make_cases", "HostTimeout"]

DEVICE = "cpu (host)"
MODE = "host"

MAX_CRASHES = 3        # crashed workers before the remaining cases are given up
STOP_AFTER_FAILED = 3  # check: failed cases after which the rest are not run (the verdict is made)


def _tail(text, n=1500):
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


# cases --------------------------------------------------------------------------------------------

def _params(manifest):
    """What a contract's case builders get: the manifest's [check] and [service] tables."""
    return {"check": dict(manifest.raw.get("check", {})), "service": dict(manifest.raw.get("service", {}))}


def exact(manifest):
    """Judged by exact bytes (every tolerance 0), else within the manifest's tolerance."""
    return all(float(manifest.tolerance.get(k, 0.0)) == 0.0 for k in ("rel_l2", "slice_rel_l2", "max_abs_rel"))


def make_cases(manifest, seeds, families=None, shapes=None, with_bad=True):
    """The check's cases over the manifest's cpu shapes x seeds (families: a subset of the contract's
    FAMILIES): per seed, the contract's bad-input cases (at the first shape) first, so the worker must
    stay usable after raising, then every family at every shape, each from its own RNG."""
    c = load_host_contract(manifest)
    shapes = shapes if shapes is not None else manifest.shapes["cpu"]
    families = families or c.families
    params, ex = _params(manifest), exact(manifest)
    cases = []
    for seed in seeds:
        if with_bad and shapes:
            cases += c.bad_cases(shapes[0], seed, np.random.default_rng([seed, 999]), params, ex)
        for si, shape in enumerate(shapes):
            for fam in families:
                rng = np.random.default_rng([seed, si, c.families.index(fam)])
                cases += c.cases(fam, shape, seed, rng, params, ex)
    return cases


def bench_size_cases(manifest, seed):
    """The contract's cases at the bench's sizes (`bench_cases`): what a module keys on size shows."""
    shape = manifest.shapes.get("bench")
    if not shape:
        return []
    return load_host_contract(manifest).bench_cases(shape, seed, _params(manifest), exact(manifest))


def _write_inputs(cases, scratch):
    """The worker's plan: case specs and input files (never the expected values)."""
    specs = []
    for i, c in enumerate(cases):
        files = {}
        for a in c.arrays:
            f = f"in/{i}_{a.name}.npy"
            np.save(scratch / f, a.flat)
            files[a.name] = f
        specs.append(dict(c.spec, arrays=files))
    return specs


# judging ----------------------------------------------------------------------------------------

def byte_metrics(got, expect, page_bytes):
    """Exact-bytes comparison in the wire format's metric shape, plus mismatched_bytes."""
    B = max(1, int(page_bytes))
    if got.shape == expect.shape and np.array_equal(got, expect):   # the usual case, cheap on a large pool
        worst = {"index": [0], "rel_l2": 0.0} if expect.size and expect.size % B == 0 else {"index": None, "rel_l2": 0.0}
        return {"rel_l2": 0.0, "max_abs": 0.0, "max_abs_rel": 0.0, "worst_slice": worst, "nonfinite": 0,
                "mismatched_bytes": 0}
    g = got.astype(np.float64)
    e = expect.astype(np.float64)
    d = g - e
    ref_norm = max(float(np.linalg.norm(e)), 1e-30)
    ref_max = max(float(np.abs(e).max()) if e.size else 0.0, 1e-30)
    worst = {"index": None, "rel_l2": 0.0}
    B = max(1, int(page_bytes))
    if e.size and e.size % B == 0:
        dp, ep = d.reshape(-1, B), e.reshape(-1, B)
        errs = np.linalg.norm(dp, axis=1) / np.maximum(np.linalg.norm(ep, axis=1), 1e-30)
        k = int(np.argmax(errs))
        worst = {"index": [k], "rel_l2": float(errs[k])}
    return {"rel_l2": float(np.linalg.norm(d) / ref_norm), "max_abs": float(np.abs(d).max()) if d.size else 0.0,
            "max_abs_rel": (float(np.abs(d).max()) if d.size else 0.0) / ref_max, "worst_slice": worst,
            "nonfinite": 0, "mismatched_bytes": int(np.count_nonzero(got != expect))}


def _first_diff(got, expect, page_bytes):
    i = int(np.flatnonzero(got != expect)[0])
    where = f"byte {i}" + (f" (page {i // page_bytes})" if page_bytes > 1 else "")
    return f"first at {where}: got {int(got[i])}, expected {int(expect[i])}"


def _page_calls_text(case, got, expect):
    """Which calls wrote the wrong pages (a case whose `page_calls` names one writer per page)."""
    if not case.page_calls or case.page_bytes < 1 or got.size % case.page_bytes:
        return ""
    B = case.page_bytes
    bad = np.flatnonzero((got.reshape(-1, B) != expect.reshape(-1, B)).any(axis=1))
    calls = sorted({case.page_calls.get(int(p), "no call (a page no call writes)") for p in bad})
    more = f" and {len(calls) - 4} more" if len(calls) > 4 else ""
    return f"; {len(bad)} wrong pages, written by: {'; '.join(calls[:4])}{more}"


def value_metrics(got, expect, page):
    """Within-tolerance comparison (a manifest with a non-zero tolerance): the wire format's metrics,
    the worst slice over runs of `page` elements."""
    g, e = got.astype(np.float64), expect.astype(np.float64)
    fin = np.isfinite(g)
    d = np.where(fin, g - e, 0.0)
    ref_norm = max(float(np.linalg.norm(e)), 1e-30)
    ref_max = max(float(np.abs(e).max()) if e.size else 0.0, 1e-30)
    worst = {"index": None, "rel_l2": 0.0}
    P = max(1, int(page))
    if e.size and e.size % P == 0:
        errs = np.linalg.norm(d.reshape(-1, P), axis=1) / np.maximum(np.linalg.norm(e.reshape(-1, P), axis=1), 1e-30)
        k = int(np.argmax(errs))
        worst = {"index": [k], "rel_l2": float(errs[k])}
    max_abs = float(np.abs(d).max()) if d.size else 0.0
    return {"rel_l2": float(np.linalg.norm(d) / ref_norm), "max_abs": max_abs, "max_abs_rel": max_abs / ref_max,
            "worst_slice": worst, "nonfinite": int(g.size - fin.sum())}


def _beyond(m, tol):
    """The tolerances a metric record exceeds, in words."""
    out = [f"{k} {m[k]:.3g} > {float(tol[k]):.3g}" for k in ("rel_l2", "max_abs_rel") if m[k] > float(tol.get(k, 0))]
    if m["worst_slice"]["rel_l2"] > float(tol.get("slice_rel_l2", 0)):
        out.append(f"worst slice {m['worst_slice']['index']} rel_l2 {m['worst_slice']['rel_l2']:.3g} > "
                   f"{float(tol['slice_rel_l2']):.3g}")
    if m["nonfinite"]:
        out.append(f"{m['nonfinite']} non-finite values")
    return out


def judge(case, res, scratch, index, tolerance=None):
    """(case record for the output, failures) of one case the worker finished. `tolerance`: the
    manifest's, when not every one is 0 (else exact bytes)."""
    fails, outputs, padding, intact = [], {}, {}, {}
    exc = res.get("exception")
    kind = case.spec["kind"]
    if kind == "threads":
        excs = [e for e in res.get("exceptions", []) if e]
    elif kind == "phases":   # each exception named with its call
        excs = [dict(c["exception"], call=c["label"]) for c in res.get("calls", []) if c.get("exception")]
    else:
        excs = [exc] if exc else []
    if case.expect_exc:
        cls, must = case.expect_exc
        if not exc:
            fails.append(f"expected {cls}, the call returned normally")
        elif cls not in exc["mro"]:
            fails.append(f"expected {cls}, got {exc['type']}: {exc['message']}")
        else:
            missing = [m for m in must if m not in exc["message"]]
            if missing:
                fails.append(f"{cls} message {exc['message']!r} does not name {', '.join(missing)}")
    else:
        for e in excs:
            fails.append(f"{e['call'] + ': ' if 'call' in e else ''}raised {e['type']}: {e['message']}")
        what = case.digest_what
        for c in res.get("calls", []) if case.expect_digests else []:
            want = case.expect_digests.get(c["label"])
            if want and not c.get("exception") and c.get("digest") != want:
                fails.append(f"{c['label']}: wrote bytes that differ from the reference (sha256 of {what}, taken "
                             "by its thread as the call returned)")
    written = {v: k for k, v in case.outputs.items()}
    for a in case.arrays:
        try:
            got = sandbox.load_result(scratch, f"out/{index}_{a.name}.npy")
        except (OSError, ValueError):
            fails.append(f"{a.name}: the worker wrote no result")
            continue
        if got.shape != a.flat.shape or got.dtype != a.flat.dtype:
            fails.append(f"{a.name}: came back as {got.dtype}{list(got.shape)}")
            continue
        head_ok = bool(np.array_equal(got[:a.pad], a.flat[:a.pad]))
        tail_ok = bool(np.array_equal(got[a.pad + a.n:], a.flat[a.pad + a.n:]))
        padding[a.name] = head_ok and tail_ok
        if not padding[a.name]:
            side = "before and after" if not (head_ok or tail_ok) else ("before" if not head_ok else "after")
            fails.append(f"{a.name}: sentinel padding {side} the buffer was overwritten (out-of-bounds write)")
        region = got[a.pad:a.pad + a.n]
        if a.name in written and not case.expect_exc and tolerance is not None:
            name = written[a.name]
            m = value_metrics(region, a.expected, case.page_bytes)
            outputs[name] = m
            beyond = _beyond(m, tolerance)
            if beyond:
                fails.append(f"{name}: beyond the tolerance: {'; '.join(beyond)}")
        elif a.name in written and not case.expect_exc:
            name = written[a.name]
            m = byte_metrics(region.view(np.uint8), a.expected.view(np.uint8), case.page_bytes)
            outputs[name] = m
            if m["mismatched_bytes"]:
                fails.append(f"{name}: {m['mismatched_bytes']} of {a.n} bytes differ from the reference, "
                             f"{_first_diff(region.view(np.uint8), a.expected.view(np.uint8), case.page_bytes)}"
                             + _page_calls_text(case, region.view(np.uint8), a.expected.view(np.uint8)))
        else:
            same = bool(np.array_equal(region, a.data))
            intact[a.name] = same
            if not same:
                what = "written by a rejected call" if case.expect_exc else "modified by the call (an input)"
                k = int(np.count_nonzero(region != a.data))
                fails.append(f"{a.name}: {k} elements {what}")
    if case.expect_result is not None and not case.expect_exc:
        if case.spec["kind"] == "threads":
            for t, (got, want) in enumerate(zip(res.get("results", []), case.expect_result)):
                if got != [want] and not excs:
                    fails.append(f"{case.result_name}: thread {t} got {got}, expected [{want}]")
            outputs[case.result_name] = {"mismatched_threads": sum(
                1 for got, want in zip(res.get("results", []), case.expect_result) if got != [want])}
        else:
            got = res.get("result")
            want = int(case.expect_result)
            m = {}
            if 0 <= want < 2 ** 64:   # the exact-bytes metrics of a 64-bit value
                ok_int = isinstance(got, int) and 0 <= got < 2 ** 64
                gb = np.array([got if ok_int else 0], np.uint64).view(np.uint8)
                wb = np.array([want], np.uint64).view(np.uint8)
                m = byte_metrics(gb, wb, 8)
            m.update(value=got, expected=want)
            outputs[case.result_name] = m
            if got != want:
                fails.append(f"{case.result_name}: got {got}, expected {want}")
    rec = {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": not fails, "outputs": outputs,
           "padding": padding, "inputs_intact": intact, "failures": fails, "seconds": round(res.get("seconds", 0), 6)}
    if case.expect_exc:
        rec["exception"] = {"expected": case.expect_exc[0], "got": exc["type"] if exc else None,
                            "message": exc["message"] if exc else None}
    if res.get("overlaps"):   # concurrent phases: the rounds whose calls ran at the same time, per run
        rec["overlaps"] = res["overlaps"]
    return rec, fails


def _not_run_record(case, why):
    return {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": False, "outputs": {}, "padding": {},
            "inputs_intact": {}, "failures": [why], "seconds": 0.0}


def _tolerance(manifest):
    return None if exact(manifest) else dict(manifest.tolerance)


PHASE_AGAIN = 8   # check: further runs of a concurrent phase in which no two threads' calls overlapped


def run_cases(so_path, module_name, cases, deadline, tsan_preload=None, tsan_log=None, no_aslr=False,
              what="candidate", tolerance=None, phase_again=0, stop_after=None):
    """Run `cases` on the module at `so_path` in sandboxed workers; judge them. A concurrent
    phase whose threads' calls never overlapped runs again, up to `phase_again` times (worker.run_phases).
    With `stop_after`, cases are judged as they finish and the worker is stopped once that many
    have failed: the rest could not turn the check into a pass, and a candidate whose calls are
    slow would otherwise spend its whole time limit being rejected.

    Returns (case records, failures, info {workers, crashes, sandbox, stderr}). A crash fails
    the case that was running and the rest continue in a fresh worker; raises HostTimeout on a
    hang. With `tsan_preload`, the runs are under ThreadSanitizer."""
    scratch = Path(tempfile.mkdtemp(prefix="kidiom-host-"))
    try:
        (scratch / "in").mkdir()
        (scratch / "out").mkdir()
        mod_dir = scratch / "module"
        mod_dir.mkdir()
        shutil.copy2(so_path, mod_dir / Path(so_path).name)
        specs = _write_inputs(cases, scratch)
        plan = {"module": {"name": module_name, "path": f"module/{Path(so_path).name}"}, "cases": specs, "start": 0,
                "phase_again": int(phase_again)}
        records, failures = [None] * len(cases), []
        crashes, workers, sandbox, stderr, completed = 0, 0, {}, "", 0
        judged = {}   # case index -> (record, failures), judged once whether live or after the run

        def judged_case(i, ev):
            if i not in judged:
                judged[i] = judge(cases[i], ev, scratch, i, tolerance)
            return judged[i]

        def n_failed():
            return sum(1 for _, f in judged.values() if f)

        def failed_enough(ev):
            i = ev.get("done") if isinstance(ev, dict) else None
            if not isinstance(i, int) or not 0 <= i < len(cases):
                return False
            judged_case(i, ev)
            return n_failed() >= stop_after

        start = 0
        while start < len(cases):
            plan["start"] = start
            wr = run_worker("check", scratch, plan, deadline, tsan_preload=tsan_preload, tsan_log=tsan_log,
                            no_aslr=no_aslr, stop=failed_enough if stop_after else None)
            workers += 1
            sandbox, stderr = wr.sandbox, wr.stderr
            running = None
            for ev in wr.progress:
                if "start" in ev:
                    running = ev["start"]
                elif "done" in ev:
                    i = ev["done"]
                    rec, fails = judged_case(i, ev)
                    records[i] = rec
                    completed += 1
                    failures += [f"{cases[i].label}: {f}" for f in fails]
                    running = None
            if wr.stopped:
                rest = [i for i, r in enumerate(records) if r is None]
                why = f"not run: the {what} had already failed {n_failed()} cases"
                for i in rest:
                    records[i] = _not_run_record(cases[i], why)
                if rest:
                    failures.append(f"{len(rest)} cases {why}")
                break
            if wr.timed_out:
                where = f" in case {cases[running].label}" if running is not None else ""
                raise HostTimeout(f"{what} timed out after {wr.seconds:.1f} s{where} (worker killed)")
            death = module_broke_worker(wr) or wr.death()
            load_error = next((ev["load_error"] for ev in wr.progress if "load_error" in ev), None)
            if load_error:
                death = f"failed to import the module ({load_error})"
            last_done = max((ev["done"] for ev in wr.progress if "done" in ev), default=start - 1)
            if running is None and not death:
                if last_done != len(cases) - 1:
                    raise RuntimeError(f"worker stopped early without an error: {_tail(wr.stderr)}")
                break
            if running is None:
                # died outside any case: loading the module, between cases, or at exit
                if last_done == len(cases) - 1:
                    failures.append(f"{what} process {death} at exit, after the last case")
                    break
                where = "before running a case" if last_done < start else f"after case {cases[last_done].label}"
                why = f"{what} process {death} {where}: {_tail(wr.stderr, 800)}"
                for i in range(last_done + 1, len(cases)):
                    records[i] = _not_run_record(cases[i], why)
                failures.append(why)
                break
            death = death or "exited with code 0 in the middle of the case"
            why = f"{what} process {death}"
            rec = _not_run_record(cases[running], why)
            rec["stderr"] = _tail(wr.stderr, 800)
            records[running] = rec
            failures.append(f"{cases[running].label}: {why}")
            crashes += 1
            start = running + 1
            if crashes >= MAX_CRASHES and start < len(cases):
                why = f"not run: the {what} crashed {crashes} times"
                for i in range(start, len(cases)):
                    records[i] = _not_run_record(cases[i], why)
                failures.append(f"{len(cases) - start} cases not run: the {what} crashed {crashes} times")
                break
        return records, failures, {"workers": workers, "crashes": crashes, "sandbox": sandbox, "completed": completed,
                                   "stderr": _tail(stderr, 800), "scratch": str(scratch)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ThreadSanitizer ----------------------------------------------------------------------------------

_TSAN_MAPPING = ("unexpected memory mapping", "FATAL: ThreadSanitizer", "ThreadSanitizer: failed to",
                 "cannot allocate memory in static TLS")


def run_tsan(manifest, source, seeds, deadline):
    """The concurrent cases on a -fsanitize=thread build of the candidate, under the toolchain's
    libtsan (LD_PRELOAD: Python itself is not instrumented). Returns (tsan record, failures)."""
    t0 = time.monotonic()
    lib, why = hostbuild.tsan_runtime()
    if not lib:
        return {"ran": False, "reason": why, "races": 0, "seconds": 0.0}, []
    try:
        so, info = hostbuild.build(manifest, source, variant="tsan")
    except hostbuild.BuildError as e:
        return {"ran": False, "reason": f"the compiler cannot build with -fsanitize=thread: {str(e)[-300:]}",
                "races": 0, "seconds": round(time.monotonic() - t0, 3)}, []
    # the contract's concurrent cases (several threads calling at once)
    cases = [c for c in make_cases(manifest, seeds[:1], with_bad=False) if c.spec["kind"] == "threads"]
    if not cases:
        return {"ran": False, "reason": "the contract has no concurrent cases", "races": 0, "seconds": 0.0}, []
    attempts = []
    for no_aslr in (False, True):
        if no_aslr and not shutil.which("setarch"):
            break
        logdir = Path(tempfile.mkdtemp(prefix="kidiom-tsan-"))
        try:
            records, failures, winfo = run_cases(so, manifest.entry, cases, deadline, tsan_preload=lib,
                                                 tsan_log=logdir / "tsan", no_aslr=no_aslr,
                                                 what="candidate (TSan build)", tolerance=_tolerance(manifest))
            logs = "".join(p.read_text(errors="replace") for p in sorted(logdir.glob("tsan*")))
        except HostTimeout as e:
            return {"ran": False, "reason": f"timed out under ThreadSanitizer: {e}", "races": 0,
                    "seconds": round(time.monotonic() - t0, 3)}, []
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        text = logs + "\n" + winfo.get("stderr", "")
        if winfo["completed"] == 0:
            # nothing ran: the runtime could not start here (e.g. "unexpected memory mapping" under
            # high ASLR entropy: retried without ASLR); not the candidate's failure
            why = next((s for s in _TSAN_MAPPING if s in text), None)
            attempts.append(f"{why}: {_tail(text, 300)}" if why else "; ".join(failures)[:400])
            continue
        races, loader, other = _tsan_reports(logs, Path(so).name, hostbuild.source_functions(
            (Path(source) if source else manifest.source_path).read_text()))
        rec = {"ran": True, "races": len(races), "other_reports": other, "loader_races": len(loader),
               "cases": len(cases),
               "aslr_disabled": no_aslr, "rlimits": winfo["sandbox"].get("rlimits"), "build": info,
               "seconds": round(time.monotonic() - t0, 3)}
        if races:
            rec["reports"] = [_tail(r, 1500) for r in races[:3]]
        if loader:
            # kept for the reviewer, not held against the candidate (see `_LOADER`)
            rec["loader_reports"] = [_race_summary(r) for r in loader[:3]]
        fails = [f"tsan: {f}" for f in failures]
        fails += [f"tsan: data race in the candidate ({len(races)} report(s)): {_race_summary(r)}" for r in races[:3]]
        return rec, fails
    return {"ran": False, "reason": "ThreadSanitizer cannot run on this machine: " + " | ".join(attempts),
            "races": 0, "seconds": round(time.monotonic() - t0, 3)}, []


# One frame of a TSan stack: `#3 function location (module+0xoffset)`, sometimes `(BuildId: …)` after.
_FRAME = re.compile(r"^\s*#\d+\s+(?P<func>.*?)\s+(?P<loc>\S+)\s+\((?P<module>[^()\s]+)\+0x[0-9a-fA-F]+\)"
                    r"(?:\s+\(BuildId: [0-9a-fA-F]+\))?\s*$")
# The header of one of the two conflicting accesses ("Previous atomic write of size 4 at … by thread T3:").
_ACCESS = re.compile(r"^\s*(?:Previous\s+)?(?:atomic\s+)?(?:read|write)\b.*\bof size \d+ at ", re.IGNORECASE)
_SANITIZER_RUNTIME = re.compile(r"^lib[a-z]san\.so")
# glibc's dynamic loader: it frees and reuses thread-local storage under its own locks, which TSan cannot
# see (ld.so is not instrumented), so a race one side of which is the loader's bookkeeping says nothing
# about the candidate (e.g. `_dl_deallocate_tls` freeing a finished thread's TLS block).
_LOADER = re.compile(r"^ld(-linux[^/]*)?\.so|^ld-[^/]*\.so")


def _access_stacks(block):
    """The frames (func, location, module) of each conflicting access in one report."""
    stacks, cur = [], None
    for line in block.splitlines():
        if _ACCESS.match(line):
            cur = []
            stacks.append(cur)
            continue
        m = _FRAME.match(line)
        if m and cur is not None:
            cur.append((m["func"], m["loc"], m["module"]))
        elif cur is not None and not m:
            cur = None   # a blank line or the next section ends this stack
    return stacks


def _in_loader(stack):
    """Whether an access is made by the dynamic loader: its first frame past the sanitizer's interceptors."""
    for func, loc, module in stack:
        if _SANITIZER_RUNTIME.match(module):
            continue
        return bool(_LOADER.match(module)) or "/elf/dl-" in loc or "rtld" in loc
    return False


def _tsan_reports(logs, so_name, functions):
    """(data races that are the candidate's, races in the dynamic loader's bookkeeping, number of other
    reports). A race is the candidate's when one of its two accesses runs code of the candidate's module
    (or a function its source defines) and neither is the loader's own synchronisation."""
    blocks = re.split(r"(?m)^==================\s*$", logs)
    races, loader, other = [], [], 0
    for b in blocks:
        if "WARNING: ThreadSanitizer" not in b:
            continue
        if "data race" not in b:
            other += 1
            continue
        stacks = _access_stacks(b)
        ours = any(module == so_name or hostbuild.base_name(func) in functions
                   for stack in stacks for func, _, module in stack)
        if any(_in_loader(s) for s in stacks):
            loader.append(b.strip())
        elif ours:
            races.append(b.strip())
        else:
            other += 1
    return races, loader, other


def _race_summary(report):
    m = re.search(r"SUMMARY: ThreadSanitizer: (.*)", report)
    return m.group(1).strip() if m else report.splitlines()[0]


# commands -----------------------------------------------------------------------------------------

def versions():
    import numpy
    v = {"python": platform.python_version(), "numpy": numpy.__version__}
    try:
        v["pybind11"] = hostbuild.pybind11_version()
    except Exception:  # noqa: BLE001
        pass
    try:
        v["compiler"] = hostbuild.compiler_version()
    except Exception:  # noqa: BLE001
        pass
    return v


def compile_command(manifest, args):
    src = Path(args.source) if args.source else manifest.source_path
    so, info = hostbuild.build(manifest, args.source)
    out = {"status": "ok", "device": "none (ahead-of-time)", "arch": f"host-{platform.machine()}",
           "shape": manifest.shapes["bench"], "language": manifest.language, "resources": {}, "host": info}
    mix, why = hostbuild.instruction_mix(so, src.read_text())
    if mix:
        out["instructions"] = mix
    else:
        out["notes"] = [why]
    if getattr(args, "keep", None):
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy2(so, Path(args.keep) / Path(so).name)
        if shutil.which("objdump"):
            dis = subprocess.run(["objdump", "-d", "-C", "-w", "--no-show-raw-insn", str(so)], capture_output=True,
                                 text=True, timeout=120).stdout
            (Path(args.keep) / (manifest.entry + ".dis")).write_text(dis)
        out["kept"] = args.keep
    return out, 0


def check_command(manifest, args, deadline):
    base = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    nseeds = 1 if args.quick else max(1, args.seeds)
    seeds = [base + i for i in range(nseeds)]
    # the contract's cases first: a contract that cannot be used is an error before any build
    # the bench's sizes once (the first seed): what they catch is keyed on size, not on the data
    cases = make_cases(manifest, seeds) + bench_size_cases(manifest, seeds[0])
    so, info = hostbuild.build(manifest, args.source)
    records, failures, winfo = run_cases(so, manifest.entry, cases, deadline, tolerance=_tolerance(manifest),
                                         phase_again=PHASE_AGAIN, stop_after=STOP_AFTER_FAILED)
    out = {"seeds": seeds, "host": info, "sandbox": dict(winfo["sandbox"], workers=winfo["workers"],
                                                         crashes=winfo["crashes"])}
    if args.no_tsan:
        tsan, tfails = {"ran": False, "reason": "--no-tsan", "races": 0, "seconds": 0.0}, []
    elif failures:
        # a race found now could not change the verdict: the check has failed already
        tsan, tfails = {"ran": False, "reason": "the cases failed: a race could not change the verdict", "races": 0,
                        "seconds": 0.0}, []
    else:
        tsan, tfails = run_tsan(manifest, args.source, seeds, deadline)
    failures += tfails
    out.update(cases=records, failures=failures, passed=not failures, tsan=tsan, tolerance=manifest.tolerance,
               status="passed" if not failures else "failed")
    return out, 0 if not failures else 1


# bench --------------------------------------------------------------------------------------------

SERVICE_DEFAULTS = {"threads": 1, "window_s": 0.4, "warmup_s": 0.1, "alone_s": 0.15, "rounds": 7, "warmup": 1,
                    "step_us": 80, "forward_us": 100, "requests": 8, "decode_steps": 40}


def service_params(manifest, args):
    svc = dict(SERVICE_DEFAULTS)
    svc.update(manifest.raw.get("service", {}))
    rounds = args.rounds if args.rounds is not None else args.iters
    if rounds is not None:
        svc["rounds"] = rounds
    for k, a in (("warmup", "warmup"), ("window_s", "window"), ("threads", "threads")):
        if getattr(args, a, None) is not None:
            svc[k] = getattr(args, a)
    if (svc["rounds"] < 1 or svc["threads"] < 1 or svc["window_s"] <= 0 or svc["warmup_s"] < 0
            or svc["requests"] < 1 or svc["decode_steps"] < 1 or svc["forward_us"] < 0 or svc["step_us"] <= 0):
        raise ValueError(f"bad service parameters {svc}")
    return svc


def _region_text(names):
    """The regions of the service state that differ, in words (which call went wrong is not known:
    a wrong byte moves on through later calls)."""
    return ", ".join(n.replace("_", " ") for n in names)


def bench_gate_cases(manifest, seed=12345):
    """The bench's quick exact check of the candidate: the contract's GATE_FAMILIES at two cpu shapes,
    and the bench's own sizes and argument forms."""
    c = load_host_contract(manifest)
    cases = make_cases(manifest, [seed], families=list(c.gate_families), shapes=manifest.shapes["cpu"][:2],
                       with_bad=False)
    return cases + bench_size_cases(manifest, seed)


def _serve_in_worker(manifest, svc, work, variant, so, deadline, inputs):
    """One service window of one variant in a fresh sandboxed worker (worker.serve): (raw result,
    the WorkerRun, None), or (None, the WorkerRun, {reason, stderr}) when the worker failed. A fresh
    process per window: the baseline and the candidate never share one, so nothing a module does
    when it loads or runs can reach the other's measurement."""
    scratch = Path(tempfile.mkdtemp(prefix=f"kidiom-serve-{variant}-"))
    try:
        for name in ("state.npy", "index.npy"):   # written once per bench; a link each (read-only to the worker)
            try:
                os.link(inputs / name, scratch / name)
            except OSError:
                shutil.copyfile(inputs / name, scratch / name)
        (scratch / "module").mkdir()
        shutil.copy2(so, scratch / "module" / Path(so).name)
        plan = {"name": manifest.entry, "module": f"module/{Path(so).name}", "variant": variant, "service": svc,
                "workload": {"threads": work.threads, "regions": {k: list(v) for k, v in work.regions.items()},
                             "peak": work.peak, "index_name": work.index_name}}
        wr = run_worker("serve", scratch, plan, deadline)
        phase = next((ev["phase"] for ev in reversed(wr.progress) if "phase" in ev), "startup")
        where = f"the {variant}'s window ({phase})"
        if wr.timed_out:
            raise HostTimeout(f"bench timed out after {wr.seconds:.1f} s in {where} (worker killed)")
        death = module_broke_worker(wr) or wr.death()
        load_error = next((ev["load_error"] for ev in wr.progress if "load_error" in ev), None)
        if load_error:
            death = f"failed to import a module ({load_error})"
        if death or not (scratch / "out" / "result.json").exists():
            reason = f"bench worker {death or 'wrote no result'} in {where}"
            if wr.signal in ("SIGSEGV", "SIGBUS") and phase == "service":
                reason += (" (the calls get their inputs, the state regions they read and the index rows, through "
                           "read-only mappings: a call that writes an input faults)")
            return None, wr, {"reason": reason, "stderr": _tail(wr.stderr, 1500)}
        raw = json.loads((scratch / "out" / "result.json").read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return raw, wr, None


def _expected_digests(contract, work, steps):
    """sha256 per region of the reference state after thread t completed steps[t] steps, and of the index."""
    state = contract.final(work, steps)
    d = {name: hashlib.sha256(np.ascontiguousarray(state[r0:r0 + n])).hexdigest()
         for name, (r0, n) in work.regions.items()}
    d[work.index_name] = hashlib.sha256(np.ascontiguousarray(work.index)).hexdigest()
    return d


def _verify_windows(samples, svc, contract, work):
    """(mismatches, windows, calls): every window's final state against the reference."""
    # Every call the bench timed, verified: the state at the end of each window (its regions and
    # the index) against the contract's reference replay of exactly the steps each thread completed.
    cache, mismatches, windows, calls = {}, [], 0, 0
    for s in samples:
        for v, d in s["variants"].items():
            key = tuple(d["pairs"])
            if key not in cache:
                cache[key] = _expected_digests(contract, work, d["pairs"])
            windows += 1
            calls += sum(len(work.threads[t][i % len(work.threads[t])])
                         for t, n in enumerate(d["pairs"]) for i in range(n))
            where = (f"{v} warm-up round {s['round'] + svc['warmup']}" if s["warmup"] else f"{v} round {s['round']}")
            for e in d.get("errors", []):
                mismatches.append(f"{where}: a call raised {e['type']} on the bench's input: "
                                  f"{e['message']}")
            bad = [k for k, h in cache[key].items() if d["digests"].get(k) != h]
            if bad:
                mismatches.append(f"{where}: after {sum(d['pairs'])} {work.step}s the "
                                  f"state differs from the reference replay in: {_region_text(bad)}: a call in "
                                  "this window skipped, shortened, misplaced or deferred part of its copy, or "
                                  "wrote an input (each call's output is a later call's input, so any call shows "
                                  "here, not only the last)")
            if sum(d["pairs"]) == 0:
                mismatches.append(f"{where}: no transfer completed in the window")
    return mismatches, windows, calls


def _machine():
    """What a baseline's history is kept per: this machine (host name, CPU model, CPUs) and Python."""
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"host": platform.node(), "cpu": model, "cpus": cpus, "python": platform.python_version()}


def _history_file(manifest, base_so, svc, shape, where=None):
    """Where the baseline's requests/s of earlier benches are kept: a file per key (baseline build,
    its bytes; worker; service parameters; bench shape; machine) in `where` (`kidiom validate`
    passes a directory it fills from its catalog and reads back into it), else in
    `$KIDIOM_HOST_HISTORY`, else in kidiom's cache (`host-history/`)."""
    from ..cachedir import content_cache
    h = hashlib.sha256()
    h.update(Path(base_so).read_bytes())
    h.update((Path(__file__).resolve().parent / "worker.py").read_bytes())
    params = {k: v for k, v in svc.items() if k not in ("rounds", "warmup", "units")}
    h.update(json.dumps([manifest.entry, params, shape, _machine()], sort_keys=True).encode())
    where = where or os.environ.get("KIDIOM_HOST_HISTORY")
    return (Path(where) if where else content_cache("host-history")) / f"{h.hexdigest()[:32]}.json"


def _read_history(path):
    try:
        data = json.loads(path.read_text())
        return [float(x) for x in data.get("requests_per_s", [])
                if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]
    except (OSError, ValueError, AttributeError):
        return []


def _append_history(path, value, kernel, keep=20):
    """Appends one run's baseline figure (atomic rename; a lost race loses one figure, never the
    file), with what it was measured on: {key, kernel, machine, requests_per_s}."""
    try:
        hist = (_read_history(path) + [float(value)])[-keep:]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": path.stem, "kernel": kernel, "machine": _machine(), "requests_per_s": hist}))
        os.replace(tmp, path)
    except OSError:
        pass   # the history is a check on later runs, never this run's result


def bench_command(manifest, args, deadline):
    """bench: the correctness gate, then the contract's service workload (worker.serve), one fresh
    worker per variant and window, the variants interleaved round by round; every window verified,
    then the statistics (stats.py) and the baseline against its own history on this machine."""
    svc = service_params(manifest, args)
    shape = manifest.shapes["bench"]
    contract = load_host_contract(manifest)
    work = contract.service(shape, svc["threads"])
    gate = bench_gate_cases(manifest)
    cand_so, cand_info = hostbuild.build(manifest, args.source)
    base_so, base_info = hostbuild.build(manifest, args.baseline)
    out = {"device": DEVICE, "mode": MODE, "metric": "service-requests", "shape": shape,
           "rounds": svc["rounds"], "warmup": svc["warmup"], "service": svc,
           "host": {"baseline": base_info, "candidate": cand_info}}
    # a speedup is never reported on a red gate
    _, gate_fails, _ = run_cases(cand_so, manifest.entry, gate, deadline, tolerance=_tolerance(manifest))
    if gate_fails:
        out.update(status="failed", reason="candidate fails the correctness gate; no speed measured",
                   failures=gate_fails)
        return out, 1
    sos = {"baseline": base_so, "candidate": cand_so}
    samples, peaks, cpus, readonly, sandbox_info = [], [], None, None, None
    units = None
    inputs = Path(tempfile.mkdtemp(prefix="kidiom-serve-inputs-"))
    try:
        np.save(inputs / "state.npy", work.state)
        np.save(inputs / "index.npy", work.index)
        for f in inputs.iterdir():
            f.chmod(0o444)
        for r in range(svc["warmup"] + svc["rounds"]):
            order = ["baseline", "candidate"] if r % 2 == 0 else ["candidate", "baseline"]
            entry = {"round": r - svc["warmup"], "warmup": r < svc["warmup"], "order": order, "variants": {}}
            for v in order:
                raw, wr, failure = _serve_in_worker(manifest, dict(svc, units=units), work, v, sos[v], deadline,
                                                    inputs)
                if failure:
                    out.update(status="failed", **failure)
                    return out, 1
                units = units or raw["units"]   # the first window calibrates the scheduler's step; all share it
                peaks.append(raw["peak"])
                cpus, readonly, sandbox_info = raw.get("cpus"), raw.get("inputs_readonly"), wr.sandbox
                entry["variants"][v] = raw["window"]
            samples.append(entry)
    finally:
        shutil.rmtree(inputs, ignore_errors=True)
    out["sandbox"] = sandbox_info
    mismatches, windows, calls = _verify_windows(samples, svc, contract, work)
    # "checksums": the wire format's name for the bench's verification record (validator/src/wire.rs)
    out["checksums"] = {"verified": not mismatches, "windows": windows, "calls": calls, "every_call": True,
                        "scheme": "each window's final state (every region the contract names) and index "
                                  "against the contract's reference replay of every call",
                        "inputs_readonly": readonly}
    if mismatches:
        out.update(status="failed", reason="transfers did not produce the reference bytes (every timed call is "
                   "verified)", failures=mismatches)
        return out, 1
    measured = [s for s in samples if not s["warmup"]]
    out["order"] = [v for s in measured for v in s["order"]]
    out["processes"] = "one per variant and window"
    bytes_per_call = float(manifest.floor_bytes(shape))
    per_step = len(work.threads[0][0])
    peak = max(p["best_gbps"] for p in peaks)
    stats = hoststats.summarize([s["variants"] for s in measured], bytes_per_call, peak, svc["threads"],
                                cpus=cpus, calls_per_step=per_step, step=work.step)
    hist_path = _history_file(manifest, base_so, svc, shape, getattr(args, "history_dir", None))
    history = _read_history(hist_path)
    base_rps = stats["results"]["baseline"]["requests_per_s"]
    far = hoststats.history_check(base_rps, history, stats["noise_floor"])
    flags = stats["flags"] + ([far] if far else [])
    if not far:
        _append_history(hist_path, base_rps, manifest.name)
    out.update(status="ok", results=stats["results"], speedup=stats["speedup"], speedups=stats["speedups"],
               noise_floor=stats["noise_floor"], significant=stats["significant"],
               latency_ratio=stats["latency_ratio"], flags=flags,
               history={"baseline_requests_per_s": history, "runs": len(history), "key": hist_path.stem,
                        "kept": not far},
               floor={"bytes": bytes_per_call, "peak_gbps": peak,
                      "peak_median_gbps": _median([p["median_gbps"] for p in peaks]),
                      "time_at_peak_us": bytes_per_call / (peak * 1e9) * 1e6},
               scheduler={"step_us": svc["step_us"], "units": units, "forward_us": svc["forward_us"],
                          "requests": svc["requests"], "decode_steps": svc["decode_steps"]})
    return out, 0


def _median(xs):
    return hoststats.percentile(xs, 50)


def run_host_command(args, out, manifest, deadline):
    """Dispatch of compile/check/bench for a `language = "cpp"` manifest; fills `out`, returns
    the exit code."""
    out["versions"] = versions()
    load_host_contract(manifest)   # a contract that cannot be used is an error before any build
    if args.command == "compile":
        res, code = compile_command(manifest, args)
        out.update(res)
        return code
    out["device"] = DEVICE
    out["mode"] = MODE
    out["commit"] = git_commit()
    try:
        if args.command == "check":
            res, code = check_command(manifest, args, deadline)
        elif args.command == "bench":
            res, code = bench_command(manifest, args, deadline)
        else:
            raise ValueError(f"unknown command {args.command}")
    except HostTimeout as e:
        out.update(status="error", error=str(e))
        return 2
    out.update(res)
    return code
