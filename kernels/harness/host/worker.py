"""Worker process of the host-kernel harness (kernels/harness/host/; worker_client.py starts it): the only process that
loads a candidate module.

    python -I -X faulthandler worker.py check plan.json
    python -I -X faulthandler worker.py serve plan.json

Runs in its own scratch directory (its cwd), started by the harness in a sandbox. Reads the plan
and the input arrays from that directory and writes what it saw back into it; it never sees
the reference or any expected value: judging is the harness's job. Run as a script in isolated
mode, it imports only the standard library, numpy and the modules the plan names (kernels/ is
not on its sys.path).

Everything it writes goes to `out/` (the sandbox lets it write only there and in `work/`).
check: `out/progress.jsonl` gets `{"start": i}` before case i and `{"done": i, ...}` after it (one
unbuffered write each, so a crash leaves the case that was running); the case's arrays, as they
are after the call, go to `out/<i>_<name>.npy`.
serve: one module's service windows (the bench runs one worker per variant and window, so the
baseline and the candidate never share a process): `out/progress.jsonl` gets `{"phase": ...}`
lines; `out/result.json` the raw window and sha256 digests of the state the calls produced (the
harness knows what they must be; the worker does not).
"""
import bisect
import collections
import gc
import hashlib
import importlib.util
import json
import mmap
import os
import queue
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


def _run_threads(body, n):
    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _any_overlap(intervals):
    """Whether any two of the (start, end) intervals share an instant."""
    end = None
    for a, b in sorted(intervals):
        if end is not None and a < end:
            return True
        end = b if end is None else max(end, b)
    return False


class _GilProbe:
    """A thread that reads the clock each time it holds the GIL, about every 0.1 ms while it runs.
    A reading inside a call's span means the call let other Python run: it released the GIL, so
    its calls can overlap another thread's, and a phase in which none did is worth running again.

    While it runs, the interpreter's switch interval is a second: a thread waiting for the GIL
    takes it only when its holder lets go (a call that releases it, a barrier, a sleep), not at
    the holder's next bytecode once 5 ms have passed. A span is clocked in Python, so a forced
    switch between the clock and the call, or between the return and the clock, would put a
    reading inside the span of a call that holds the GIL (on a loaded machine, often)."""

    SWITCH_INTERVAL = 1.0

    def __init__(self):
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = None

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(time.perf_counter())
            time.sleep(1e-4)

    def __enter__(self):
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(self.SWITCH_INTERVAL)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._interval)

    def inside(self, spans):
        """Whether a reading fell strictly inside any of the (start, end) spans."""
        samples = self.samples
        for a, b in spans:
            i = bisect.bisect_right(samples, a)
            if i < len(samples) and samples[i] < b:
                return True
        return False


# how many times more runs a concurrent phase gets once its calls are seen to release the GIL:
# on a loaded machine a released thread may not be scheduled before the other's call ends
RELEASED_AGAIN = 8


def run_phases(mod, case, arrays, again=0):
    """Phases in order. A phase is one list of calls per thread; with several threads they start
    together at a barrier, and with `rounds` every thread's r-th call waits for all threads to
    finish their (r-1)-th (so calls of different threads are released together, round after round).
    A call with `digest` has what it wrote hashed by its thread right after it returns, before its
    next call can overwrite it; the harness knows what the digest must be.

    Released together is not running together: on a loaded machine the scheduler may run one
    thread's call to its end before the other starts. A concurrent phase in which no two threads'
    calls overlapped in time runs again, up to `again` times (the plan's `phase_again`: check's
    runs; the bench's quick gate makes none), or RELEASED_AGAIN times that once a call is seen to
    release the GIL (_GilProbe), every run's calls judged (each
    call writes what it always writes, and differently from the call before it, so a call skipped
    in any run shows); `overlaps` says how many rounds overlapped in each phase."""
    calls, overlaps = [], []
    t0 = time.perf_counter()
    released = False   # some call of a concurrent phase let other Python run (_GilProbe)
    for phase in case["phases"]:
        per_thread = [[(c, getattr(mod, c["fn"]), [make_arg(arrays, a) for a in c["args"]]) for c in cl]
                      for cl in phase["threads"]]
        n = len(per_thread)
        rounds = bool(phase.get("rounds"))
        runs = 1 + (again * RELEASED_AGAIN if n > 1 and rounds else 0)
        for attempt in range(runs):
            out = [[] for _ in per_thread]
            spans = [[] for _ in per_thread]
            barrier = threading.Barrier(n)

            def body(t):
                for i, (c, fn, args) in enumerate(per_thread[t]):
                    if n > 1 and (i == 0 or rounds):
                        barrier.wait()
                    s0 = time.perf_counter()
                    try:
                        r, exc = fn(*args), None
                    except Exception as e:  # noqa: BLE001 - judged by the harness
                        r, exc = None, describe_exception(e)
                    spans[t].append((s0, time.perf_counter()))
                    rec = {"label": c["label"], "exception": exc, "result": _result(r)}
                    if c.get("digest"):
                        rec["digest"] = _digest(arrays, c["digest"])
                    out[t].append(rec)

            if n == 1:
                body(0)
            elif not rounds or not again:
                _run_threads(body, n)
            else:
                with _GilProbe() as probe:
                    _run_threads(body, n)
                released = released or probe.inside([sp for s in spans for sp in s])
            calls += [c for cl in out for c in cl]
            if n == 1 or not rounds:
                break
            together = sum(1 for r in range(min(len(s) for s in spans)) if _any_overlap([s[r] for s in spans]))
            overlaps.append({"threads": n, "run": attempt + 1, "rounds_overlapped": together,
                             "gil_released": released})
            # calls that hold the GIL cannot overlap: `again` runs as before; calls that release it
            # get RELEASED_AGAIN times as many to find an overlap
            if together or (attempt >= again and not released):
                break
    return {"seconds": time.perf_counter() - t0, "calls": calls, "overlaps": overlaps}


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
        if case["kind"] == "phases":
            res = run_phases(mod, case, arrays, again=int(plan.get("phase_again", 0)))
        else:
            res = (run_threads if case["kind"] == "threads" else run_call)(mod, case, arrays)
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


def _digests(mem, index, index_name, regions):
    """sha256 of each region of the state (`regions`: name -> (first row, rows)) and of the index."""
    d = {name: hashlib.sha256(np.ascontiguousarray(mem[r0:r0 + nr])).hexdigest() for name, (r0, nr) in regions.items()}
    d[index_name] = hashlib.sha256(np.ascontiguousarray(index)).hexdigest()
    return d


def _service_window(steps, svc, units, mem, init):
    """One window of the service (docs/CONTRACTS.md, "The service bench"): the prefill -> decode
    handoff it stands for. `requests` requests are in flight at any time. A new request first needs
    its KV transfer: it waits in a queue until a transfer thread takes it and runs that thread's next
    step of the contract's workload (its calls, in order). Then it joins the decode batch, which the
    scheduler thread serves one step at a time (fixed pure-Python work, then a wait of `forward_us`
    for the device, as a scheduler waits for a forward pass); after `decode_steps` steps it is done,
    and a new request arrives in its place. Requests done within the measured part of the window
    (after `warmup_s`) give requests/s and their latencies (arrival to done)."""
    T = len(steps)
    rw, _ = mem
    np.copyto(rw, init)             # every window starts from the same state
    pending, ready, stop = queue.SimpleQueue(), collections.deque(), threading.Event()
    barrier = threading.Barrier(T + 1)
    records = [{} for _ in range(T)]

    def transfer(t):
        cycle, spans, i = steps[t], [], 0
        barrier.wait()
        try:
            while not stop.is_set():
                try:
                    rid = pending.get(timeout=0.005)
                except queue.Empty:
                    continue
                t0 = time.perf_counter()
                for fn, args in cycle[i % len(cycle)]:
                    fn(*args)
                spans.append((t0, time.perf_counter()))
                i += 1
                ready.append(rid)
        except Exception as e:  # noqa: BLE001 - the candidate raised on the bench's input: judged by the harness
            records[t]["error"] = describe_exception(e)
        records[t]["pairs"] = i
        records[t]["spans"] = spans

    C, D = int(svc["requests"]), int(svc["decode_steps"])
    forward = float(svc["forward_us"]) * 1e-6
    warm, W = float(svc["warmup_s"]), float(svc["window_s"])
    threads = [threading.Thread(target=transfer, args=(t,)) for t in range(T)]
    for th in threads:
        th.start()
    gc.collect()
    gc.disable()
    barrier.wait()
    t_start = time.perf_counter()
    w0, w1 = t_start + warm, t_start + warm + W
    arrival, batch, latencies = {}, {}, []
    for rid in range(C):
        arrival[rid] = t_start
        pending.put(rid)
    next_id, steps_done, tokens = C, 0, 0
    d, lst = {}, []
    now = t_start
    while now < w1:
        while ready:
            batch[ready.popleft()] = D
        _step(units, d, lst)
        time.sleep(forward)
        now = time.perf_counter()
        if now >= w0:
            steps_done += 1
            tokens += len(batch)
        for rid in list(batch):
            batch[rid] -= 1
            if batch[rid] == 0:
                del batch[rid]
                t_arr = arrival.pop(rid)
                if now >= w0:
                    latencies.append((now - t_arr) * 1e6)
                arrival[next_id] = now
                pending.put(next_id)
                next_id += 1
    stop.set()
    for th in threads:
        th.join()
    gc.enable()
    in_window, pair_us = 0.0, []
    for rec in records:
        for a, b in rec["spans"]:
            overlap = min(b, now) - max(a, w0)
            if overlap > 0:
                in_window += overlap / (b - a) if b > a else 1.0
            if a >= w0 and b <= now:
                pair_us.append((b - a) * 1e6)
    out = {"requests": len(latencies), "loaded_s": now - w0, "latency_us": latencies, "loaded_steps": steps_done,
           "tokens": tokens, "pairs_in_window": in_window, "pair_us": pair_us,
           "pairs": [rec["pairs"] for rec in records]}
    errors = [rec["error"] for rec in records if "error" in rec]
    if errors:
        out["errors"] = errors
    return out


def _alone_window(seconds, units, forward):
    """The scheduler's steps alone (no request needs a transfer), for its throughput beside the service's."""
    d, lst = {}, []
    steps = 0
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        _step(units, d, lst)
        time.sleep(forward)
        steps += 1
        t = time.perf_counter()
        if t >= end:
            gc.enable()
            return steps, t - t0


def serve(plan):
    """The service bench's windows with one module, in a process of their own: the baseline and the
    candidate never share a process (nothing one loads can reach the other's measurement)."""
    svc = plan["service"]
    mod = _load_or_exit(plan["name"], plan["module"], f"kidiom_{plan['variant']}")
    log({"loaded": plan["variant"]})
    work = plan["workload"]
    init = np.load("state.npy")                 # [rows, row bytes] uint8: the calls' memory
    index = np.load("index.npy", mmap_mode="r")   # [k, n] int64, mapped read-only: a write faults
    rw, ro, readonly = _ring_memory(init.shape[0], init.shape[1])
    steps = [_service_args(mod, cycle, rw, ro, index) for cycle in work["threads"]]
    log({"phase": "peak"})
    pk = work["peak"]
    peak = _peak(init[pk["rows"][0]:pk["rows"][1]], int(pk["bytes"]), reps=int(pk["reps"]))
    units = svc.get("units")
    if not units:
        log({"phase": "calibrate"})
        units, _ = _calibrate(float(svc["step_us"]))
    forward = float(svc["forward_us"]) * 1e-6
    log({"phase": "alone"})
    a_steps, a_s = _alone_window(float(svc.get("alone_s", svc["window_s"])), units, forward)
    log({"phase": "service"})
    res = _service_window(steps, svc, units, (rw, ro), init)
    res.update(alone_steps=a_steps, alone_s=a_s,
               digests=_digests(rw, index, work.get("index_name", "index"), work["regions"]))
    result = {"peak": peak, "units": units, "switch_interval_s": sys.getswitchinterval(),
              "threads": len(steps), "inputs_readonly": readonly, "window": res,
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
        elif mode == "serve":
            serve(plan)
        else:
            raise ValueError(f"unknown mode {mode}")
    except Exception:  # noqa: BLE001 - exceptions of the candidate's calls are caught where they happen
        log({"worker_error": traceback.format_exc()[-3000:]})
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(EXIT_WORKER_BUG)


if __name__ == "__main__":
    main(sys.argv)
