"""The harness's side of the Triton / CUDA check's workers (worker.py, the worker's side): start one in the
sandbox (../sandbox/), send it requests, collect results, survive whatever it does.

A worker hosts one or more kernels (`KernelSpec`): the candidate's worker hosts the candidate
alone; the baseline's worker hosts trusted kernels (the manifest's own source, the baseline
Triton kernel of the other op for the consistency check). Its scratch directory holds the runtime
(`rt/kidiom_rt/`: worker.py, arrays.py, backend.py, interp.py, workprofile.py; for CUDA the
launcher and cudatools.py), copies of the kernel sources (`rt/src/`), `worker.json`, the logs,
the inputs (`in/<request>/`): all written by the harness and read-only to the worker; the worker
writes only `out/<request>/` (results) and `work/` (its cwd, HOME, TMPDIR). Nothing of the
reference, the tolerances or the checking code is ever written there.

Requests are pipelined (written ahead, answered in order). An untrusted worker that dies (a
signal, an exit, a corrupted channel, its own machinery broken by the candidate) fails the
request it was running and is restarted for the rest, up to MAX_CRASHES times; a trusted worker
that dies is a harness error (WorkerFailed). Past the deadline every worker is killed and
WorkerTimeout raised. The response pipe is never read to its end: every read waits with
select() until the deadline, and a worker's end is known from the trampoline's exit report (a
detached grandchild that keeps the pipe open changes nothing; it dies with the worker's PID
namespace, or is killed as an orphan by sandbox.reap_orphans).
"""
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import sandbox
from ..project import import_hint, install_packages, project_packages
from ..sandbox import load_result

__all__ = ["KernelSpec", "KernelWorker", "WorkerTimeout", "WorkerFailed", "MAX_CRASHES", "load_result"]

HERE = Path(__file__).resolve().parent
RUNTIME = {"worker.py": HERE / "worker.py", "arrays.py": HERE / "arrays.py",
           "backend.py": HERE / "backend.py", "interp.py": HERE / "interp.py",
           "workprofile.py": HERE / "workprofile.py", "runtime_tests.py": HERE / "runtime_tests.py",
           "autotune.py": HERE / "autotune.py", "coverage.py": HERE / "coverage.py"}
CUDA_RUNTIME = {"cuda_launch.py": HERE.parent / "cuda" / "emulation.py", "cudatools.py": HERE / "cudatools.py",
                "comparisons.py": HERE.parent / "cuda" / "comparisons.py"}
MAX_CRASHES = 3          # crashed candidate workers before the remaining requests are given up
MAX_IN_FLIGHT = 8        # requests written ahead to a worker
AS_LIMIT = 16 << 30      # address space of a CPU worker (bytes); none on a GPU (CUDA maps the device)


class WorkerTimeout(Exception):
    """A worker did not answer before the deadline (every worker was killed)."""


class WorkerFailed(RuntimeError):
    """A trusted worker (the baseline's) failed: a harness error, not the candidate's."""


@dataclass
class KernelSpec:
    language: str            # triton | cuda
    source: Path
    launcher: str
    entry: str
    signature: str = ""      # CUDA: the entry's parameter kinds (p, i, f), from the contract's launch
    sides: tuple = ()        # on a CPU: the comparisons whose sides the worker records ({line, test})
    lines: tuple = ()        # on a CPU: the changed lines whose running the worker records (coverage.py)
    packages: tuple = ()     # the kernel's own project: [(name, path)] copied importable (project.py)
    manifest: object = None  # whose files the copy leaves out

    @classmethod
    def of(cls, manifest, source=None, sides=(), lines=()):
        sig = ""
        if manifest.language == "cuda":
            from ..contract import load_contract
            from ..cuda.emulation import _signature
            sig = _signature(load_contract(manifest).launch(manifest.shapes["bench"])["params"])
        return cls(manifest.language, Path(source) if source else manifest.source_path, manifest.launcher,
                   manifest.entry, sig, tuple(sides), tuple(lines),
                   tuple(project_packages(manifest, source)) if manifest.language == "triton" else (), manifest)


def _tail(text, n=1500):
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


class KernelWorker:
    def __init__(self, role, kernels, device, tf32, deadline, root, trusted, lazy=False):
        self.role, self.device, self.tf32, self.deadline, self.trusted = role, device, tf32, deadline, trusted
        self.scratch = Path(root) / role
        self.scratch.mkdir(mode=0o700)
        files = dict(RUNTIME)
        if any(k.language == "cuda" for k in kernels.values()):
            files.update(CUDA_RUNTIME)
        pkg = sandbox.install_runtime(self.scratch, files)
        rt = pkg.parent
        (rt / "src").mkdir()
        self.path = [str(self.scratch / "rt")]
        for k in kernels.values():
            if k.packages:   # the kernel's own project, without its manifest and contract
                install_packages(rt / "pkgs", k.packages, k.manifest)
        if (rt / "pkgs").is_dir():
            self.path.append(str(rt / "pkgs"))
        self.kernels = {}
        for key, k in kernels.items():
            dst = rt / "src" / f"{key}{k.source.suffix}"
            shutil.copy2(k.source, dst)
            self.kernels[key] = {"language": k.language, "file": str(dst), "launcher": k.launcher, "entry": k.entry,
                                 "signature": k.signature, "sides": [dict(s) for s in k.sides],
                                 "lines": [int(n) for n in k.lines],
                                 "package": getattr(k.manifest, "python_package", None)}
        (self.scratch / "in").mkdir()
        self.out_dir, self.work_dir = sandbox.writable_dirs(self.scratch)
        self.next_id = 0
        self.lines, self.labels = {}, {}
        self.sides = {}
        self.lines_ran = set()   # of the watched lines, those some call ran (every process so far)
        self.queue, self.sent, self.done = deque(), [], {}
        self.workers = self.crashes = 0
        self.ready = self.fatal = None   # ready: this process's report; info: the first one's
        self.info = None
        self.sandbox = {}
        self.proc = None
        self._pending_fatal = self._worker_error = None
        if not lazy:
            self._start()

    def _note_sides(self, sides):
        """The sides each watched comparison took, over every call of every process so far
        ({line: [true seen, false seen]}; a restarted worker counts afresh, so they are OR-ed)."""
        if not isinstance(sides, dict):
            return
        for line, seen in sides.items():
            if isinstance(seen, list) and len(seen) == 2 and str(line).isdigit():
                have = self.sides.setdefault(int(line), [False, False])
                self.sides[int(line)] = [have[0] or seen[0] is True, have[1] or seen[1] is True]

    # process ----------------------------------------------------------------------------------
    def _start(self):
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        (self.scratch / "worker.json").write_text(json.dumps(
            {"req_fd": req_r, "resp_fd": resp_w, "device": self.device, "tf32": self.tf32, "kernels": self.kernels,
             "in_dir": str(self.scratch / "in"), "out_dir": str(self.out_dir)}))
        cfg = {"module": "kidiom_rt.worker", "path": list(self.path), "report_fd": resp_w,
               "close_in_parent": [req_r], "args": [str(self.scratch / "worker.json")]}
        on_gpu = self.device == "cuda"
        cmd, net, pid = sandbox.command(self.scratch, cfg, gpu=on_gpu)   # on a GPU: /dev/nvidia* reachable
        budget = max(0.5, self.deadline - time.monotonic())
        lims = sandbox.limits(cpu_s=budget * (os.cpu_count() or 1) + 10, address_space=None if on_gpu else AS_LIMIT,
                              why_no_as="not applied: CUDA maps the GPU's address space", nproc_room=1024)
        env = {"TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")}
        if not on_gpu:
            env["TRITON_INTERPRET"] = "1"
        out = open(self.scratch / "stdout.txt", "ab")
        err = open(self.scratch / "stderr.txt", "ab")
        try:
            self.proc = sandbox.spawn(cmd, cwd=self.work_dir, env=sandbox.scrubbed_env(self.scratch, env),
                                      stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                      preexec_fn=sandbox.preexec(lims), pass_fds=(req_r, resp_w))
        finally:
            out.close()
            err.close()
            os.close(req_r)
            os.close(resp_w)
        self.req_w, self.resp_r, self.buf = req_w, resp_r, b""
        self.running, self.tramp, self.ready = None, None, None
        self.workers += 1
        if not self.sandbox:
            self.sandbox = sandbox.describe(net, pid, lims, budget,
                                            "isolated mode (-I); importable: the kernel source and the worker "
                                            "runtime (kidiom_rt), never the reference or the checker")
        # requests written to a dead worker go again, in order
        again, self.sent = self.sent, []
        self.queue.extendleft(reversed(again))
        self._pump()

    def close(self):
        if self.proc is not None:
            sandbox.kill_group(self.proc)
            for fd in (self.req_w, self.resp_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.proc = None

    def stderr(self):
        try:
            return (self.scratch / "stderr.txt").read_text(errors="replace")
        except OSError:
            return ""

    # requests ---------------------------------------------------------------------------------
    def submit(self, kernel, args, layout, sets, label, pad=64, stacked=False):
        """Queue a call of `kernel` on `sets` (list of {name: array}); returns its id. `stacked`:
        the arrays every set has (same shape and dtype) travel in one file per name, and the
        results come back in one file per name (worker.py, `stacked`): thousands of small sets cost a few files, not several per set."""
        rid = self.next_id
        self.next_id += 1
        io = self.scratch / "in" / str(rid)
        io.mkdir()
        common = []
        if stacked and sets:
            common = [n for n, a in sets[0].items()
                      if all(n in s and np.shape(s[n]) == np.shape(a) and np.asarray(s[n]).dtype == np.asarray(a).dtype
                             for s in sets)]
            for name in common:
                np.save(io / f"stack_{name}.npy", np.stack([np.asarray(s[name]) for s in sets]))
        for j, arrays in enumerate(sets):
            for name, a in arrays.items():
                if name not in common:
                    np.save(io / f"s{j}_{name}.npy", np.ascontiguousarray(a))
        req = dict(layout, id=rid, kind="call", kernel=kernel, args=list(args), sets=len(sets), pad=pad)
        if stacked:
            req["stacked"] = common
        self.lines[rid] = (json.dumps(req) + "\n").encode()
        self.labels[rid] = label
        if self.fatal is not None:
            self.done[rid] = self.fatal
        else:
            self.queue.append(rid)
            if self.proc is None and self.workers == 0:
                self._start()   # a lazy worker's first request (_start sends the queue)
            self._pump()
        return rid

    def _pump(self):
        while self.proc is not None and self.queue and len(self.sent) < MAX_IN_FLIGHT:
            rid = self.queue[0]
            try:
                os.write(self.req_w, self.lines[rid])
            except OSError:
                return   # dead: found out when reading
            self.queue.popleft()
            self.sent.append(rid)

    def result(self, rid):
        """The answer to request `rid`: {"sets": [...]} or {"failed": why} (the candidate's worker
        died, failed to load, or gave up) or {"needs_gpu": why}."""
        while rid not in self.done:
            if self.proc is None:
                if self.fatal is not None:
                    self._give_up(self.fatal)
                    continue
                self._start()
            self._step()
        return self.done[rid]

    def path(self, rel):
        return self.scratch / rel

    def release(self, rid):
        shutil.rmtree(self.scratch / "in" / str(rid), ignore_errors=True)
        shutil.rmtree(self.out_dir / str(rid), ignore_errors=True)

    def wait_ready(self):
        while self.info is None and self.fatal is None:
            if self.proc is None:
                self._start()
            self._step()
        return self.info

    # messages ---------------------------------------------------------------------------------
    def _read(self):
        while b"\n" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self._timeout()
            r, _, _ = select.select([self.resp_r], [], [], min(left, 5.0))
            if not r:
                continue
            chunk = os.read(self.resp_r, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return {"corrupt": line[:200].decode(errors="replace")}
        return msg if isinstance(msg, dict) and msg else {"corrupt": line[:200].decode(errors="replace")}

    def _timeout(self):
        where = f" in {self.labels[self.running]}" if self.running is not None else ""
        self.close()
        raise WorkerTimeout(f"{self.role} worker timed out{where} (killed at the deadline)")

    def _step(self):
        msg = self._read()
        if msg is None or "exit" in msg or "corrupt" in msg:
            return self._died(msg)
        if "sandbox" in msg and self.tramp is None and self.ready is None:
            self.tramp = msg["sandbox"]     # the trampoline's report, written before any kernel code ran
            if self.workers == 1:
                self.sandbox.update({k: v for k, v in msg["sandbox"].items() if k != "pid_namespace"})
        elif "ready" in msg and self.ready is None and self.tramp is not None:
            self.ready = msg["ready"]
            self.info = self.info or msg["ready"]
        elif "start" in msg and self.ready is not None and self.sent and msg["start"] == self.sent[0] \
                and self.running is None:
            self.running = msg["start"]
        elif "done" in msg and self.running is not None and msg["done"] == self.running \
                and isinstance(msg.get("sets"), list):
            self.done[self.running] = {"sets": msg["sets"]}
            self._note_sides(msg.get("sides"))
            if isinstance(msg.get("lines"), list):
                self.lines_ran.update(n for n in msg["lines"] if isinstance(n, int))
            self.sent.remove(self.running)
            self.running = None
            self._pump()
        elif "needs_gpu" in msg and self.ready is None:
            self._pending_fatal = {"needs_gpu": str(msg["needs_gpu"].get("reason"))}
        elif "load_error" in msg and self.ready is None:
            le = msg["load_error"]
            self._pending_fatal = {"failed": f"{self.role} source failed to load: {import_hint(le.get('error'))}",
                                   "traceback": le.get("traceback")}
        elif "worker_error" in msg:
            self._worker_error = str(msg["worker_error"])
        else:
            return self._died({"corrupt": json.dumps(msg)[:200]})

    def _died(self, msg):
        """The worker ended (or broke the protocol): fail or retry what it owed."""
        exit_report = msg.get("exit") if msg else None
        proc = self.proc
        self.close()
        rc = proc.poll() if proc is not None else None
        fatal, werr = self._pending_fatal, self._worker_error
        self._pending_fatal = self._worker_error = None
        if msg and "corrupt" in msg:
            death = f"corrupted its channel to the harness (wrote {msg['corrupt'][:80]!r})"
        elif werr:
            death = f"broke the worker's own machinery:\n{_tail(werr, 1200)}"
        else:
            death = sandbox.death_text(rc, exit_report) or "exited with code 0"
        stderr = _tail(self.stderr(), 800)
        if fatal is None and self.ready is None:
            fatal = {"failed": f"{self.role} process {death} while loading: {stderr}"}
        if self.trusted:
            raise WorkerFailed(f"the {self.role} worker failed (not the candidate): "
                               f"{fatal or death}; stderr: {stderr}")
        if fatal is not None:
            # nothing can run: failed to load, needs a GPU, or died while starting
            self._give_up(fatal)
            return
        if self.running is not None:
            self.done[self.running] = {"failed": f"{self.role} process {death}", "stderr": stderr}
            self.sent.remove(self.running)
            self.running = None
        self.crashes += 1
        if self.crashes >= MAX_CRASHES:
            self._give_up({"failed": f"not run: the {self.role} process crashed {self.crashes} times"})
            return
        if self.sent or self.queue:
            self._start()

    def _give_up(self, why):
        self.fatal = why
        for rid in list(self.sent) + list(self.queue):
            self.done[rid] = why
        self.sent, self.queue = [], deque()


class Workers:
    """The check's workers, in one temporary directory that is deleted afterwards."""

    def __init__(self, device, tf32, deadline):
        import tempfile
        self.device, self.tf32, self.deadline = device, tf32, deadline
        self.root = Path(tempfile.mkdtemp(prefix="kidiom-check-"))
        self.all = []

    def start(self, role, kernels, trusted, lazy=False):
        """A worker for `kernels`; `lazy`: its process starts with its first request, never when
        none comes (a baseline whose every figure a check reads from its cache)."""
        w = KernelWorker(role, kernels, self.device, self.tf32, self.deadline, self.root, trusted, lazy)
        self.all.append(w)
        return w

    def close(self):
        for w in self.all:
            w.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
