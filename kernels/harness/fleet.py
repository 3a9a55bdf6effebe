"""The harness across a Ray cluster: `python -m kernels.harness fleet`.

    python -m kernels.harness fleet [--address ADDR] [--grace S]   # jobs on stdin, results on stdout
    python -m kernels.harness fleet --head [--num-cpus N] [--num-gpus N]  # a local head on 127.0.0.1

The validator keeps one driver per run and writes one job per line; the driver answers one line
per job, in completion order, matched by `id` (docs/RAY.md has the whole format). A job is
self-contained: the files it needs travel with it (content-addressed, each blob sent once per
driver), so a node needs Python with the harness's dependencies and Ray, never a checkout. The
mining run (`kidiom mine --executor ray`) keeps one too, run from this harness, and sends
`command` jobs: `kidiom shard` with a shard's files, the kidiom binary among them.

Why the details are as they are:
- The task functions below are pickled by value (`register_pickle_by_value`): workers cannot
  import this package, and must not use a stale copy of it.
- Ray's own task retries are off; the driver resubmits a task whose worker or node died, once,
  so that attempts are counted and every attempt gets the whole deadline.
- The driver admits at most as many tasks of a kind as the cluster has slots for, so a task's
  deadline starts when it can start, not while it waits behind others in Ray's queue.
- A deadline is kept twice: the task kills its subprocess's process group at `deadline_s` after it
  started; the driver cancels (force) a task with no answer `grace_s` later (a hung worker).
- Only the result lines go to stdout: Ray and anything else that prints are sent to stderr.
- A blob of CACHE_MIN bytes or more (a shipped kidiom binary) is kept on each node by its id, so it
  crosses to a node once, not once per task: such a task gets the blob's ObjectRef, not its bytes,
  and fetches it only when its node lacks it.
"""
import argparse
import base64
import hashlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

PROTOCOL = 1
STDERR_TAIL = 4000
CACHE_MIN = 1 << 20
CACHE_DAYS = 1.0
CACHE_KEEP = 4          # the most recently used blobs kept on a node (a rebuilt kidiom is a new blob)
# `python -c _SHIM PPID SIGNAL ARGV...` runs ARGV after asking the kernel to send it SIGNAL when
# its parent dies: a worker killed mid-task must not leave its harness running, nor a test that
# dies its Ray head (which stops cleanly on SIGTERM).
_SHIM = ("import ctypes, os, sys\n"
         "ctypes.CDLL(None).prctl(1, int(sys.argv[2]), 0, 0, 0)\n"
         "os.getppid() == int(sys.argv[1]) or os._exit(70)\n"
         "os.execvp(sys.argv[3], sys.argv[3:])\n")


# ---------------------------------------------------------------- worker side (pickled by value)

def git_blob_id(data):
    """Git's blob id of `data` (the validator names file contents the same way)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def harness_version(root):
    """The id of the harness package under `root` (`<root>/kernels/harness`): the blob id of its
    sorted `path blob-id` listing, as the validator computes it from the files it ships."""
    pkg = Path(root) / "kernels" / "harness"
    if not pkg.is_dir():
        return None
    lines = []
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith("."):
            lines.append(f"{p.relative_to(root).as_posix()} {git_blob_id(p.read_bytes())}\n")
    return git_blob_id("".join(lines).encode())


def kernels_tree(root, prefix="tree"):
    """The kernels package under `root` as the validator ships it (its baseline tree, without the
    tests and caches), each file at `prefix/kernels/...`: for the tests and benchmarks that stand in
    for the validator."""
    out = {}
    for p in sorted((Path(root) / "kernels").rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and "__pycache__" not in rel.parts and rel.parts[1] != "tests" and not p.name.startswith("."):
            out[f"{prefix}/{rel.as_posix()}"] = p.read_bytes()
    return out


def _where():
    """Which node and GPU ran this task."""
    node, node_id, gpu = socket.gethostname(), None, None
    try:
        import ray
        ctx = ray.get_runtime_context()
        node_id = ctx.get_node_id()
        node = f"{node} ({ray.util.get_node_ip_address()})"
        ids = ctx.get_accelerator_ids().get("GPU") or []
        gpu = ",".join(str(i) for i in ids) or None
    except Exception:
        pass
    return {"node": node, "node_id": node_id, "gpu": gpu}


def _node_env():
    """The worker's environment without what Ray set for its own tasks after it started: Ray
    forces OMP_NUM_THREADS to the task's CPUs, and BLAS's thread count changes the rounding of the
    harness's reductions, so a task would not compute what the harness computes on that machine.
    Ray's GPU assignment (CUDA_VISIBLE_DEVICES) is kept."""
    env = dict(os.environ)
    try:
        with open("/proc/self/environ", "rb") as f:
            initial = {kv.split(b"=", 1)[0].decode(errors="replace") for kv in f.read().split(b"\0") if kv}
    except OSError:
        return env
    if "OMP_NUM_THREADS" not in initial:
        env.pop("OMP_NUM_THREADS", None)
    return env


def _tail(text, n=STDERR_TAIL):
    return text if len(text) <= n else "..." + text[-n:]


def _run(argv, cwd, env, deadline_s):
    """Runs argv in its own process group, killed at the deadline; (rc, stdout, stderr, timed_out)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-c", _SHIM, str(os.getpid()), "9", *argv], cwd=cwd, env=env,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout=max(0.1, deadline_s))
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)   # also what the command left behind in its group
        except OSError:
            pass
        p.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return (None if timed_out else p.returncode), stdout, stderr, timed_out


def _sweep():
    """Removes the scratch directories of workers that died (killed mid-task, or cancelled at a
    deadline: their own clean-up never ran). A directory is named after its worker's pid. Cached
    blobs unused for CACHE_DAYS go too, and all but the CACHE_KEEP most recently used."""
    import shutil
    for d in Path(tempfile.gettempdir()).glob("kidiom-fleet-*-*"):
        try:
            os.kill(int(d.name.split("-")[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (ValueError, IndexError, OSError):
            pass
    entries = []
    for f in _cache_dir().glob("*"):
        try:
            mtime = f.stat().st_mtime
            if f.suffix == ".tmp":
                if time.time() - mtime > 3600:     # a killed task's; a live one's is being written
                    f.unlink()
                continue
            entries.append((mtime, f))
        except OSError:
            pass
    entries.sort(reverse=True)
    for i, (mtime, f) in enumerate(entries):
        if i >= CACHE_KEEP or time.time() - mtime > CACHE_DAYS * 86400:
            try:
                f.unlink()      # a task that linked it keeps its copy
            except OSError:
                pass


def _cache_dir():
    # not `kidiom-fleet-*-*`: those are scratch directories named after their worker's pid
    return Path(tempfile.gettempdir(), f"kidiom-fleetcache-{os.getuid()}")


def _link_cached(blob_id, box, dst):
    """Puts the node's copy of a large blob at `dst`: a hard link (read-only and executable
    already), else a copy. Fetched again if another task's sweep removed it meanwhile."""
    import shutil
    for attempt in (1, 2):
        src = _cached(blob_id, box)
        try:
            os.link(src, dst)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise
        except OSError:
            shutil.copyfile(src, dst)
            dst.chmod(0o755)
            return


def _cached(blob_id, box):
    """The node's copy of a large blob (read-only, by id), fetched through `box` ([ObjectRef]) if
    the node has none yet. Written under a temporary name and renamed: concurrent tasks and a
    killed one leave a whole file or none."""
    d = _cache_dir()
    d.mkdir(mode=0o700, exist_ok=True)
    path = d / blob_id
    try:
        os.utime(path)         # in use: kept by the sweep
        return path
    except FileNotFoundError:
        pass
    import ray
    data = ray.get(box[0])
    if git_blob_id(data) != blob_id:
        raise ValueError(f"blob {blob_id}: the object store gave other content")
    tmp = d / f"{blob_id}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    tmp.chmod(0o555)
    os.replace(tmp, path)
    return path


def run_task(spec, *contents):
    """One job on a worker: writes its files into a scratch directory, runs it, removes them."""
    import shutil
    started = time.time()
    res = {"rc": None, "stdout": "", "stderr_tail": "", "timed_out": False, "error": None,
           "harness_version": None, "pid": os.getpid(), **_where()}
    _sweep()
    base = tempfile.mkdtemp(prefix=f"kidiom-fleet-{os.getpid()}-")
    try:
        cached = spec.get("cached") or {}
        for rel, data in zip(spec["paths"], contents):
            dst = Path(base, rel)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if rel in cached:
                _link_cached(cached[rel], data, dst)
                continue
            dst.write_bytes(data)
            if rel in spec.get("executable", ()):
                dst.chmod(0o755)
        cwd = os.path.join(base, spec.get("cwd") or "")
        argv = [a.replace("{base}", base) for a in spec.get("argv", [])]
        env = {**_node_env(), **spec.get("env", {})}
        kind = spec["kind"]
        if kind == "harness":
            res["harness_version"] = harness_version(cwd)
            want = spec.get("harness_version")
            if want and want != res["harness_version"]:
                res["error"] = f"harness version mismatch: job {want}, written {res['harness_version']}"
                return res
            argv = [sys.executable, "-m", "kernels.harness", *argv]
        if kind == "sleep":
            # stand-in work of recorded length (scaling simulations, tests of the driver)
            time.sleep(float(spec.get("seconds", 0)))
            res.update(rc=0, stdout=spec.get("stdout", ""))
        else:
            rc, stdout, stderr, timed_out = _run(argv, cwd, env, float(spec["deadline_s"]))
            res.update(rc=rc, stdout=stdout, stderr_tail=_tail(stderr), timed_out=timed_out)
            if timed_out:
                res["error"] = f"deadline: killed after {spec['deadline_s']:g} s"
    finally:
        shutil.rmtree(base, ignore_errors=True)
        res["seconds"] = round(time.time() - started, 3)
        res["started"] = started
    return res


# ---------------------------------------------------------------- driver

class BadJob(ValueError):
    pass


def _safe_rel(p):
    q = Path(p)
    if q.is_absolute() or ".." in q.parts or not q.parts:
        raise BadJob(f"file path {p!r} must be relative, without '..'")
    return q.as_posix()


class Driver:
    """Reads jobs, runs them as Ray tasks, writes results. One per validation run."""

    def __init__(self, ray, out, events, grace_s=30.0):
        self.ray, self.out, self.events, self.grace_s = ray, out, events, grace_s
        self.blobs = {}            # blob id -> (ObjectRef, size)
        self.queue = deque()       # admitted later: (job, spec, refs, kind, opts, queued_at)
        self.inflight = {}         # ObjectRef -> entry dict
        self.by_id = {}            # job id -> ObjectRef of its current attempt
        self.capacity, self.capacity_at = {}, 0.0
        self.task = ray.remote(run_task)

    # -- output
    def emit(self, obj):
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    def fail(self, job_id, error, **more):
        self.emit({"id": job_id, "status": "error", "rc": None, "stdout": "", "stderr_tail": "",
                   "timed_out": False, "node": None, "gpu": None, "seconds": 0.0, "attempts": 0,
                   "failures": [], "error": error, **more})

    # -- input
    def handle(self, line):
        try:
            msg = json.loads(line)
        except ValueError as e:
            self.fail(None, f"not JSON: {e}")
            return
        if not isinstance(msg, dict):
            self.fail(None, "a job is a JSON object")
            return
        if "cancel" in msg:
            self.cancel(msg["cancel"])
            return
        try:
            self.submit(msg)
        except BadJob as e:
            self.fail(msg.get("id"), f"bad job: {e}")
        except Exception as e:       # any malformed field: answered, and the driver goes on
            self.fail(msg.get("id"), f"bad job: {type(e).__name__}: {e}")

    def submit(self, job):
        if "id" not in job:
            raise BadJob("no id")
        if job["id"] in self.by_id or any(q[0]["id"] == job["id"] for q in self.queue):
            raise BadJob(f"id {job['id']!r} is already running")
        kind = job.get("kind", "harness")
        if kind not in ("harness", "command", "sleep"):
            raise BadJob(f"unknown kind {kind!r}")
        for blob_id, body in (job.get("blobs") or {}).items():
            if blob_id not in self.blobs:
                if "path" in body:
                    # a file of the machine kidiom runs on, which is this one
                    data = Path(body["path"]).read_bytes()
                elif "base64" in body:
                    data = base64.b64decode(body["base64"])
                else:
                    data = body["text"].encode()
                if git_blob_id(data) != blob_id:
                    raise BadJob(f"blob {blob_id} does not match its content")
                self.blobs[blob_id] = (self.ray.put(data), len(data))
        paths, refs, cached = [], [], {}
        for rel, blob_id in sorted((job.get("files") or {}).items()):
            if blob_id not in self.blobs:
                raise BadJob(f"unknown blob {blob_id} for {rel}")
            rel = _safe_rel(rel)
            ref, size = self.blobs[blob_id]
            paths.append(rel)
            if size >= CACHE_MIN:
                # boxed: Ray resolves a task's ObjectRef arguments, not refs inside a list
                refs.append([ref])
                cached[rel] = blob_id
            else:
                refs.append(ref)
        if kind != "sleep" and not job.get("argv"):
            raise BadJob("no argv")
        try:
            deadline = float(job.get("deadline_s", 1800))
        except (TypeError, ValueError):
            raise BadJob("deadline_s must be a number") from None
        spec = {"kind": kind, "paths": paths, "argv": [str(a) for a in job.get("argv", [])],
                "cwd": _safe_rel(job["cwd"]) if job.get("cwd") else "", "env": job.get("env") or {},
                "deadline_s": deadline, "harness_version": job.get("harness_version"),
                "seconds": job.get("seconds", 0), "stdout": job.get("stdout", ""),
                "executable": [_safe_rel(p) for p in job.get("executable", [])], "cached": cached}
        res = job.get("resources") or {}
        gpus = float(res.get("num_gpus", 1 if job.get("gpu") else 0))
        opts = {"num_cpus": float(res.get("num_cpus", 1)), "num_gpus": gpus, "max_retries": 0}
        if res.get("resources"):
            opts["resources"] = res["resources"]
        klass = "GPU" if gpus > 0 else "CPU"
        self.queue.append((job, spec, refs, klass, opts, time.time()))

    def cancel(self, job_id):
        for q in list(self.queue):
            if q[0]["id"] == job_id:
                self.queue.remove(q)
        ref = self.by_id.pop(job_id, None)
        if ref is not None:
            self.inflight.pop(ref, None)
            self._kill(ref)
        self.emit({"id": job_id, "status": "cancelled", "rc": None, "stdout": "", "stderr_tail": "",
                   "timed_out": False, "node": None, "gpu": None, "seconds": 0.0, "attempts": 0,
                   "failures": [], "error": "cancelled"})

    def _kill(self, ref):
        try:
            self.ray.cancel(ref, force=True)
        except Exception:
            pass

    # -- scheduling
    def slots(self, klass, opts):
        now = time.time()
        if now - self.capacity_at > 5.0:
            try:
                self.capacity = self.ray.cluster_resources()
            except Exception:
                pass
            self.capacity_at = now
        need = opts["num_gpus"] if klass == "GPU" else opts["num_cpus"]
        total = float(self.capacity.get(klass, 0))
        # at least one, so a cluster that scales up on demand sees the demand
        return max(1, int(total / need)) if need > 0 else 1 << 30

    def admit(self):
        running = {"CPU": 0, "GPU": 0}
        for e in self.inflight.values():
            running[e["klass"]] += 1
        waiting = deque()
        while self.queue:
            job, spec, refs, klass, opts, queued_at = q = self.queue.popleft()
            if running[klass] >= self.slots(klass, opts):
                waiting.append(q)
                continue
            running[klass] += 1
            self.start({"job": job, "spec": spec, "refs": refs, "klass": klass, "opts": opts,
                        "queued": time.time() - queued_at, "attempts": 0, "failures": [],
                        "first_start": time.time()})
        self.queue = waiting

    def start(self, e):
        e["attempts"] += 1
        e["started"] = time.time()
        ref = self.task.options(**e["opts"]).remote(e["spec"], *e["refs"])
        self.inflight[ref] = e
        self.by_id[e["job"]["id"]] = ref
        # the loop sleeps on one queue: input lines and ended tasks wake it, nothing is polled
        ref.future().add_done_callback(lambda _, ref=ref: self.events.put(("done", ref)))

    def collect(self, ref):
        """The answer of a task that ended (the event its future posted)."""
        e = self.inflight.pop(ref, None)
        if e is None:       # cancelled, or past its deadline: answered already
            return
        try:
            res = self.ray.get(ref)
        except self.ray.exceptions.TaskCancelledError:
            return
        except self.ray.exceptions.RayTaskError as err:   # our task raised: no retry
            res = {"error": f"task failed: {_tail(str(err), 1500)}"}
        except self.ray.exceptions.RayError as err:         # the worker or its node died
            first = (str(err).strip().splitlines() or [""])[0]
            e["failures"].append(f"attempt {e['attempts']}: {type(err).__name__}: {_tail(first, 300)}")
            if e["attempts"] < 2:
                self.start(e)
                return
            res = {"error": "worker died twice: " + "; ".join(e["failures"])}
        self.by_id.pop(e["job"]["id"], None)
        self.finish(e, res)

    def finish(self, e, res):
        out = {"id": e["job"]["id"], "status": "error" if res.get("error") else "ok",
               "rc": res.get("rc"), "stdout": res.get("stdout", ""), "stderr_tail": res.get("stderr_tail", ""),
               "timed_out": bool(res.get("timed_out")), "node": res.get("node"), "node_id": res.get("node_id"),
               "gpu": res.get("gpu"), "seconds": res.get("seconds", 0.0),
               "wall": round(time.time() - e["first_start"], 3), "queued": round(e["queued"], 3),
               "dispatch": round(res["started"] - e["started"], 4) if "started" in res else None,
               "attempts": e["attempts"], "failures": e["failures"], "error": res.get("error"),
               "harness_version": res.get("harness_version")}
        self.emit(out)

    def expire(self):
        now = time.time()
        for ref, e in list(self.inflight.items()):
            limit = e["spec"]["deadline_s"] + self.grace_s
            if now - e["started"] > limit:
                self.inflight.pop(ref)
                self.by_id.pop(e["job"]["id"], None)
                self._kill(ref)
                self.finish(e, {"timed_out": True,
                                "error": f"deadline: no answer {limit:g} s after the task started; cancelled"})

    def busy(self):
        return bool(self.inflight or self.queue)

    def run(self):
        """Serves the events (`("line", text)`, `("eof", None)`, `("done", ref)`) until the input
        has ended and every job has its answer."""
        eof = False
        while not eof or self.busy():
            try:
                kind, x = self.events.get(timeout=self._wake_in())
            except queue.Empty:
                kind = None
            if kind == "line" and x.strip():
                self.handle(x)
            elif kind == "eof":
                eof = True
            elif kind == "done":
                self.collect(x)
            self.admit()
            self.expire()

    def _wake_in(self):
        """Seconds until the next deadline (or the next look at the cluster's size)."""
        now, wake = time.time(), 5.0
        for e in self.inflight.values():
            wake = min(wake, e["started"] + e["spec"]["deadline_s"] + self.grace_s - now)
        return max(0.01, wake)

    def shutdown(self):
        for ref in list(self.inflight):
            self._kill(ref)
        self.inflight.clear()


def _reader(stream, events):
    for line in stream:
        events.put(("line", line))
    events.put(("eof", None))


def _is_loopback(address):
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


# Waits between attempts to connect through Ray Client: the head starts a server process for each
# client, which a busy head may fail to start in time ("Starting Ray client server failed").
CLIENT_RETRIES_S = (2.0, 5.0)


def _connect(ray, kw):
    """ray.init, retried on a refused or aborted connection of a Ray Client (`ray://`) address only:
    a bad address or a local start fails at once."""
    waits = list(CLIENT_RETRIES_S) if str(kw.get("address", "")).startswith("ray://") else []
    while True:
        try:
            return ray.init(**kw)
        except ConnectionError:
            if not waits:
                raise
            time.sleep(waits.pop(0))


def serve(args):
    # the protocol's stdout is the original fd 1; everything else that prints goes to stderr
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    address = args.address or os.environ.get("RAY_ADDRESS")
    if address and _is_loopback(address):
        # meant literally: Ray would otherwise swap a loopback address for the machine's outward IP
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray
        import ray.cloudpickle
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        kw = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
        if args.address:
            kw["address"] = args.address
        _connect(ray, kw)
    except Exception as e:
        say({"fatal": f"cannot start Ray at {args.address or 'the default address'}: {type(e).__name__}: {e}"})
        return 2
    drv = None
    try:
        resources = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        say({"hello": {"protocol": PROTOCOL, "ray": ray.__version__, "address": args.address,
                       "resources": resources, "nodes": len([n for n in ray.nodes() if n.get("Alive")])}})
        events = queue.Queue()
        drv = Driver(ray, out, events, grace_s=args.grace)
        threading.Thread(target=_reader, args=(sys.stdin, events), daemon=True).start()
        drv.run()
        return 0
    except BrokenPipeError:
        return 0       # the reader of the results is gone: nothing in flight is wanted any more
    finally:
        if drv is not None:
            drv.shutdown()
        try:
            ray.shutdown()
        except Exception:
            pass


# ---------------------------------------------------------------- a local head (tests, benchmarks)

def _ray_cli():
    exe = Path(sys.executable).with_name("ray")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalHead:
    """A Ray head on 127.0.0.1 owned by this object: `ray start --head --block` in its own session
    and temporary directory, stopped by `stop()` (SIGTERM, then SIGKILL of its process group),
    never by `ray stop`, which would stop every Ray on the machine."""

    def __init__(self, num_cpus=2, num_gpus=0, resources=None, object_store_mb=100, timeout=90):
        self.dir = tempfile.mkdtemp(prefix="kidiom-ray-", dir="/tmp")
        self.client_port = _free_port()
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        cmd = [*_ray_cli(), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", "0",
               "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus), "--include-dashboard=false",
               "--disable-usage-stats", "--temp-dir", self.dir, "--object-store-memory",
               str(object_store_mb * 1024 * 1024), "--ray-client-server-port", str(self.client_port),
               "--dashboard-agent-listen-port", str(_free_port())]
        if resources:
            cmd += ["--resources", json.dumps(resources)]
        self.log = open(os.path.join(self.dir, "head.log"), "w+")
        cmd = [sys.executable, "-c", _SHIM, str(os.getpid()), str(int(signal.SIGTERM)), *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        self.address = None
        marker = Path(self.dir, "ray_current_cluster")
        t0 = time.time()
        try:
            while time.time() - t0 < timeout:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"ray start exited {self.proc.returncode}: {self.tail()}")
                if marker.exists() and marker.read_text().strip():
                    self.address = marker.read_text().strip()
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"ray start gave no address in {timeout} s: {self.tail()}")
            # the head is up once a driver can connect: the marker comes a little earlier
            time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        self.client = f"ray://127.0.0.1:{self.client_port}"

    def tail(self):
        self.log.flush()
        self.log.seek(0)
        return _tail(self.log.read(), 2000)

    def stop(self, wait=45):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)    # whatever of its group is left
        except OSError:
            pass
        self.proc.wait()
        self.log.close()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def hold_head(args):
    """`fleet --head`: starts a head, prints its address, stops it when stdin closes (or on
    SIGTERM/SIGINT), so that whoever started this process stops the head, even when it dies."""
    try:
        head = LocalHead(num_cpus=args.num_cpus, num_gpus=args.num_gpus,
                         resources=json.loads(args.resources) if args.resources else None)
    except Exception as e:
        print(json.dumps({"fatal": f"cannot start a Ray head: {e}"}), flush=True)
        return 2
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    try:
        print(json.dumps({"head": head.address, "client": head.client, "temp_dir": head.dir, "session": head.proc.pid}),
              flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        stop.wait()
    finally:
        head.stop()
    return 0


def main(argv):
    p = argparse.ArgumentParser(prog="python -m kernels.harness fleet", description=__doc__.split("\n")[0])
    p.add_argument("--address", help="Ray address: HOST:PORT, ray://HOST:PORT, 'auto' (default: Ray's own "
                                     "choice: $RAY_ADDRESS, a cluster started here, else a new local one)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds past a job's deadline_s before a task with no answer is cancelled")
    p.add_argument("--head", action="store_true", help="start a local head on 127.0.0.1, print its address, "
                                                       "stop it when stdin closes")
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--num-gpus", type=int, default=0, help="--head: logical GPUs to declare")
    p.add_argument("--resources", help="--head: custom resources, JSON")
    args = p.parse_args(argv)
    return hold_head(args) if args.head else serve(args)
