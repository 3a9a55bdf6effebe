"""Worker process of the host-kernel harness (kernels/harness/host/; worker_client.py starts it): the only process that
loads a candidate module.

    python -I -X faulthandler worker.py check plan.json
    python -I -X faulthandler worker.py bench plan.json

Runs in its own scratch directory (its cwd), started by the harness in a sandbox. Reads the plan
and the input arrays from that directory and writes what it saw back into it; it never sees
the reference or any expected value: judging is the harness's job. Run as a script in isolated
mode, it imports only the standard library, numpy and the modules the plan names (kernels/ is
not on its sys.path).

Everything it writes goes to `out/` (the sandbox lets it write only there and in `work/`).
check: `out/progress.jsonl` gets `{"start": i}` before case i and `{"done": i, ...}` after it (one
unbuffered write each, so a crash leaves the case that was running); the case's arrays, as they
are after the call, go to `out/<i>_<name>.npy`.
bench: `out/progress.jsonl` gets `{"phase": ...}` lines; `out/result.json` the raw samples and,
per loaded window, sha256 digests of the state the calls produced (the harness knows what they
must be; the worker does not).
"""
import gc
import hashlib
import importlib.util
import json
import mmap
import os
import sys
import threading
import time
import traceback

import numpy as np

_PROGRESS = None


def log(record):
    global _PROGRESS
    if _PROGRESS is None:
        _PROGRESS = os.open(os.path.join("out", "progress.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_PROGRESS, (json.dumps(record) + "\n").encode())


def load_module(name, path, key):
    """Import the extension module `name` from `path` as `key.name` (its PyInit_<name> is found
    by the last component). Distinct qualified names matter: pybind11 >= 3 caches modules by
    spec name, so the baseline and the candidate of one module name need different ones to
    both live in one process."""
    spec = importlib.util.spec_from_file_location(f"{key}.{name}", path)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def describe_exception(e):
    return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "message": str(e)[:500]}


# check ------------------------------------------------------------------------------------------

def make_arg(arrays, spec):
    """One argument: a view of a flat array (start, count), optionally reinterpreted, reshaped,
    sliced, read-only, or wrapped in a memoryview; None; or a scalar (`value`)."""
    if spec.get("none"):
        return None
    if "value" in spec:
        return spec["value"]
    a = arrays[spec["array"]]
    start = spec.get("start", 0)
    count = spec.get("count", a.size - start)
    a = a[start:start + count]
    if spec.get("view_dtype"):
        a = a.view(np.dtype(spec["view_dtype"]))
    if spec.get("shape") is not None:
        a = a.reshape(spec["shape"])
    if spec.get("slices"):
        a = a[tuple(slice(*s) for s in spec["slices"])]
    if spec.get("readonly"):
        a = a.view()
        a.flags.writeable = False
    if spec.get("wrap") == "memoryview":
        a = memoryview(a)
    return a


def _result(r):
    return int(r) if isinstance(r, (int, np.integer)) and not isinstance(r, bool) else (None if r is None else repr(r))


def run_call(mod, case, arrays):
    fn = getattr(mod, case["fn"])
    args = [make_arg(arrays, a) for a in case["args"]]
    t0 = time.perf_counter()
    try:
        r, exc = fn(*args), None
    except Exception as e:  # noqa: BLE001 - reported, judged by the harness
        r, exc = None, describe_exception(e)
    return {"seconds": time.perf_counter() - t0, "exception": exc, "result": _result(r)}


def run_threads(mod, case, arrays):
    """Each thread calls fn on its own arguments `repeat` times, all starting together."""
    fn = getattr(mod, case["fn"])
    per_thread = [[make_arg(arrays, a) for a in args] for args in case["threads"]]
    n = len(per_thread)
    barrier = threading.Barrier(n)
    results = [set() for _ in range(n)]
    excs = [None] * n

    def body(t):
        barrier.wait()
        for _ in range(case["repeat"]):
            try:
                results[t].add(_result(fn(*per_thread[t])))
            except Exception as e:  # noqa: BLE001
                excs[t] = describe_exception(e)
                return

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"seconds": time.perf_counter() - t0, "exceptions": excs,
            "results": [sorted(r, key=lambda x: (x is None, x if x is not None else 0)) for r in results]}


def _digest(arrays, spec):
    """sha256 of what a call wrote: a region of an array, or some of its pages (`rows`)."""
    a = arrays[spec["array"]]
    start = spec.get("start", 0)
    v = a[start:start + spec.get("count", a.size - start)]
    if spec.get("rows") is not None:
        v = np.ascontiguousarray(v.reshape(-1, spec["page_bytes"])[spec["rows"]])
    return hashlib.sha256(v).hexdigest()


def run_phases(mod, case, arrays):
    """Phases in order. A phase is one list of calls per thread; with several threads they start
    together at a barrier, and with `rounds` every thread's r-th call waits for all threads to
    finish their (r-1)-th (so calls of different threads are released together, round after round).
    A call with `digest` has what it wrote hashed by its thread right after it returns, before its
    next call can overwrite it; the harness knows what the digest must be."""
    calls = []
    t0 = time.perf_counter()
    for phase in case["phases"]:
        per_thread = [[(c, getattr(mod, c["fn"]), [make_arg(arrays, a) for a in c["args"]]) for c in cl]
                      for cl in phase["threads"]]
        n = len(per_thread)
        out = [[] for _ in per_thread]
        barrier = threading.Barrier(n)
        rounds = bool(phase.get("rounds"))

        def body(t):
            for i, (c, fn, args) in enumerate(per_thread[t]):
                if n > 1 and (i == 0 or rounds):
                    barrier.wait()
                try:
                    r, exc = fn(*args), None
                except Exception as e:  # noqa: BLE001 - judged by the harness
                    r, exc = None, describe_exception(e)
                rec = {"label": c["label"], "exception": exc, "result": _result(r)}
                if c.get("digest"):
                    rec["digest"] = _digest(arrays, c["digest"])
                out[t].append(rec)

        if n == 1:
            body(0)
        else:
            threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        calls += [c for cl in out for c in cl]
    return {"seconds": time.perf_counter() - t0, "calls": calls}


EXIT_WORKER_BUG = 70    # the worker's own machinery failed: a harness error, not the candidate's
EXIT_LOAD_FAILED = 71   # the module raised while being imported: the candidate's failure


def _load_or_exit(name, path, key):
    try:
        mod = load_module(name, path, key)
    except Exception as e:  # noqa: BLE001
        log({"load_error": f"{key}: {type(e).__name__}: {e}"[:2000]})
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(EXIT_LOAD_FAILED)
    if os.path.realpath(getattr(mod, "__file__", "") or "") != os.path.realpath(path):
        raise RuntimeError(f"loading {path} returned another module ({getattr(mod, '__file__', None)})")
    return mod


def check(plan):
    mod = _load_or_exit(plan["module"]["name"], plan["module"]["path"], "kidiom_candidate")
    # from here the module's native code shares this process: a failure of the worker's own
    # machinery is the module's doing (commands.run_cases)
    log({"loaded": plan["module"]["name"]})
    os.makedirs("out", exist_ok=True)
    for i in range(plan.get("start", 0), len(plan["cases"])):
        case = plan["cases"][i]
        arrays = {name: np.load(f) for name, f in case["arrays"].items()}
        log({"start": i})
        run = {"threads": run_threads, "phases": run_phases}.get(case["kind"], run_call)
        res = run(mod, case, arrays)
        for name, a in arrays.items():
            np.save(os.path.join("out", f"{i}_{name}.npy"), a)
        log(dict(res, done=i))


# bench ------------------------------------------------------------------------------------------

def _step(units, d, lst):
    """One scheduler step: fixed pure-Python work (dict and list traffic, like a batch scheduler)."""
    for i in range(units):
        k = i & 63
        d[k] = d.get(k, 0) + i
        lst.append(k)
    lst.clear()


def _sched_window(seconds, units):
    d, lst = {}, []
    steps = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        _step(units, d, lst)
        steps += 1
        t = time.perf_counter()
        if t >= end:
            return steps, t - t0, t0, t


def _calibrate(step_us):
    units = 100
    for _ in range(3):
        n = 200
        t0 = time.perf_counter()
        d, lst = {}, []
        for _ in range(n):
            _step(units, d, lst)
        per = (time.perf_counter() - t0) / n
        units = max(1, round(units * step_us * 1e-6 / per))
    d, lst = {}, []
    t0 = time.perf_counter()
    for _ in range(200):
        _step(units, d, lst)
    return units, (time.perf_counter() - t0) / 200 * 1e6


def _peak(src, nbytes, reps):
    """Plain copy bandwidth (numpy copyto) of `nbytes` chunks taken in turn from `src`:
    bytes read + written per second, best and median of `reps` copies."""
    flat = src.reshape(-1)
    chunks = max(1, flat.size // nbytes)
    dst = np.empty(nbytes, np.uint8)
    times = []
    for r in range(reps):
        k = r % chunks
        t0 = time.perf_counter()
        np.copyto(dst, flat[k * nbytes:(k + 1) * nbytes])
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"best_gbps": 2 * nbytes / times[0] / 1e9, "median_gbps": 2 * nbytes / times[len(times) // 2] / 1e9,
            "copies": reps, "bytes": nbytes}


def _ring_memory(rows, B):
    """The bench's state (`rows` rows of B bytes: the contract's service state) as two mappings of
    one shared-memory object: (writable view, read-only view, how). The calls get their inputs
    through the read-only view, so a call that writes a region it reads
    faults (SIGSEGV), whatever the flags it is handed; without memfd the inputs are only flagged
    read-only (`how` says so)."""
    size = rows * B
    try:
        fd = os.memfd_create("kidiom-bench-ring", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            rw = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            ro = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        return (np.frombuffer(rw, np.uint8).reshape(rows, B), np.frombuffer(ro, np.uint8).reshape(rows, B),
                "read-only mapping (memfd): a write to a call's input faults")
    except (AttributeError, OSError, ValueError) as e:
        a = np.zeros((rows, B), np.uint8)
        v = a.view()
        v.flags.writeable = False
        return a, v, f"not enforced (flagged read-only only): memfd/mmap unavailable: {e}"


def _service_args(mod, cycle, rw, ro, index):
    """A thread's cycle with every call's function and arguments resolved once, before the window:
    [[(fn, args)]] per step. A state argument is a view of the writable or the read-only mapping
    (rows r0:r1, flat when asked); an index argument a row of the read-only index."""
    def arg(a):
        if "index" in a:
            return index[a["index"]]
        r0, r1 = a["rows"]
        v = (rw if a["state"] == "rw" else ro)[r0:r1]
        return v.reshape(-1) if a.get("flat") else v
    return [[(getattr(mod, c["fn"]), [arg(a) for a in c["args"]]) for c in step] for step in cycle]


def _transfer(steps, barrier, stop, record):
    """Step i runs the calls of steps[i % len(steps)] in order, until the window ends. Each call's
    output is a later call's input (the contract's workload), so the state at the end of the window
    is right only if every call was."""
    spans = []
    i, n = 0, len(steps)
    barrier.wait()
    try:
        while not stop.is_set():
            calls = steps[i % n]
            t0 = time.perf_counter()
            for fn, args in calls:
                fn(*args)
            spans.append((t0, time.perf_counter()))
            i += 1
    except Exception as e:  # noqa: BLE001 - the candidate raised on the bench's input: judged by the harness
        record["error"] = describe_exception(e)
    record["pairs"] = i
    record["spans"] = spans


def _digests(mem, index, index_name, regions):
    """sha256 of each region of the state (`regions`: name -> (first row, rows)) and of the index."""
    d = {name: hashlib.sha256(np.ascontiguousarray(mem[r0:r0 + nr])).hexdigest() for name, (r0, nr) in regions.items()}
    d[index_name] = hashlib.sha256(np.ascontiguousarray(index)).hexdigest()
    return d


def bench(plan):
    svc = plan["service"]
    T, W = int(svc["threads"]), float(svc["window_s"])
    mods = {v: _load_or_exit(plan["name"], path, f"kidiom_{v}") for v, path in plan["modules"].items()}
    work = plan["workload"]
    init = np.load("state.npy")                 # [rows, row bytes] uint8: the calls' memory
    index = np.load("index.npy", mmap_mode="r")   # [k, n] int64, mapped read-only: a write faults
    B = init.shape[1]
    regions = work["regions"]
    index_name = work.get("index_name", "index")
    mem, readonly = {}, None
    for v in mods:
        rw, ro, readonly = _ring_memory(init.shape[0], B)
        mem[v] = (rw, ro)
    steps = {v: [_service_args(mods[v], cycle, mem[v][0], mem[v][1], index) for cycle in work["threads"]]
             for v in mods}
    log({"phase": "peak"})
    pk = work["peak"]
    peak = _peak(init[pk["rows"][0]:pk["rows"][1]], int(pk["bytes"]), reps=int(pk["reps"]))
    log({"phase": "calibrate"})
    units, step_us = _calibrate(float(svc["step_us"]))
    names = list(mods)
    samples = []
    rounds, warmup = int(svc["rounds"]), int(svc["warmup"])
    for r in range(warmup + rounds):
        order = names if r % 2 == 0 else names[::-1]
        entry = {"round": r - warmup, "warmup": r < warmup, "order": order, "variants": {}}
        for v in order:
            log({"phase": f"round {r - warmup} {v} alone"})
            gc.collect()
            gc.disable()
            a_steps, a_s, _, _ = _sched_window(W, units)
            gc.enable()
            log({"phase": f"round {r - warmup} {v} loaded"})
            rw, ro = mem[v]
            np.copyto(rw, init)     # every window starts from the same state
            gc.collect()
            gc.disable()
            stop = threading.Event()
            barrier = threading.Barrier(T + 1)
            records = [{} for _ in range(T)]
            threads = [threading.Thread(target=_transfer, args=(steps[v][t], barrier, stop, records[t]))
                       for t in range(T)]
            for th in threads:
                th.start()
            barrier.wait()
            l_steps, l_s, w0, w1 = _sched_window(W, units)
            stop.set()
            for th in threads:
                th.join()
            gc.enable()
            in_window, pair_us = 0.0, []
            for rec in records:
                for a, b in rec["spans"]:
                    overlap = min(b, w1) - max(a, w0)
                    if overlap > 0:
                        in_window += overlap / (b - a) if b > a else 1.0
                    if a >= w0 and b <= w1:
                        pair_us.append((b - a) * 1e6)
            entry["variants"][v] = {
                "alone_steps": a_steps, "alone_s": a_s, "loaded_steps": l_steps, "loaded_s": l_s,
                "pairs_in_window": in_window, "pair_us": pair_us,
                "pairs": [rec["pairs"] for rec in records],
                "digests": _digests(rw, index, index_name, regions),
            }
            errors = [rec["error"] for rec in records if "error" in rec]
            if errors:
                entry["variants"][v]["errors"] = errors
        samples.append(entry)
    result = {"peak": peak, "units": units, "step_us": step_us, "switch_interval_s": sys.getswitchinterval(),
              "threads": T, "inputs_readonly": readonly, "samples": samples,
              "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    with open(os.path.join("out", "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.rename(os.path.join("out", "result.json.tmp"), os.path.join("out", "result.json"))
    log({"phase": "done"})


def main(argv):
    mode, plan_path = argv[1], argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    try:
        if mode == "check":
            check(plan)
        elif mode == "bench":
            bench(plan)
        else:
            raise ValueError(f"unknown mode {mode}")
    except Exception:  # noqa: BLE001 - exceptions of the candidate's calls are caught where they happen
        log({"worker_error": traceback.format_exc()[-3000:]})
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(EXIT_WORKER_BUG)


if __name__ == "__main__":
    main(sys.argv)
