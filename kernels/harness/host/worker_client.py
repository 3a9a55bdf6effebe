"""The harness's side of the host C++ workers (worker.py, the worker's side): run one on a plan in
the sandbox (kernels/harness/sandbox/) until it exits or its deadline, and read back what it
reported. commands.py builds the plans and judges the results."""
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import sandbox

__all__ = ["HostTimeout", "WorkerRun", "run_worker", "module_broke_worker", "WORKER"]

WORKER = Path(__file__).resolve().parent / "worker.py"
AS_LIMIT = 8 << 30     # address space of a worker (bytes)


class HostTimeout(Exception):
    """The candidate did not finish before the deadline (its worker was killed)."""


@dataclass
class WorkerRun:
    rc: int
    timed_out: bool
    seconds: float
    progress: list
    stderr: str
    sandbox: dict = field(default_factory=dict)
    exit_report: dict = None
    stopped: bool = False   # ended early by the caller's `stop` (see run_worker)

    @property
    def signal(self):
        d = self.death()
        return d[len("died with "):] if d and d.startswith("died with ") else None

    def death(self):
        """'died with SIGSEGV' / 'exited with code 1' / None (clean exit)."""
        return sandbox.death_text(self.rc, self.exit_report)


def run_worker(mode, scratch, plan, deadline, tsan_preload=None, tsan_log=None, no_aslr=False, cpus=None,
               stop=None):
    """Run worker.py `mode` on `plan` in `scratch` until it exits or `deadline`
    (time.monotonic()) passes; the worker's whole process group is killed in the end. `stop`, when
    given, sees each progress event as it is written and ends the worker early by returning True
    (the run is then `stopped`): what it has already reported cannot be unsaid by the rest."""
    scratch = Path(scratch)
    out_dir, _ = sandbox.writable_dirs(scratch)   # the worker writes only there (and in work/)
    (scratch / "plan.json").write_text(json.dumps(plan))
    for f in ("stdout.txt", "stderr.txt", "out/progress.jsonl", ".trampoline.jsonl"):
        (scratch / f).unlink(missing_ok=True)
    shutil.copyfile(WORKER, scratch / WORKER.name)
    budget = max(0.5, deadline - time.monotonic())
    ncpu = cpus or os.cpu_count() or 1
    limits = sandbox.limits(cpu_s=budget * ncpu + 10, address_space=None if tsan_preload else AS_LIMIT,
                            why_no_as="not applied: ThreadSanitizer reserves terabytes of shadow memory")
    env_extra = {}
    rw_extra = []
    if tsan_preload:
        env_extra["LD_PRELOAD"] = tsan_preload
        log = Path(tsan_log or out_dir / "tsan")
        rw_extra.append(str(log.parent))
        env_extra["TSAN_OPTIONS"] = f"log_path={log} halt_on_error=0 exitcode=0 report_signal_unsafe=0"
    prefix = ["setarch", platform.machine(), "-R"] if no_aslr else []
    report = scratch / ".trampoline.jsonl"   # opened by the trampoline before confinement: not the worker's to forge
    cfg = {"script": str(scratch / WORKER.name), "args": [mode, "plan.json"], "report_file": str(report),
           "rw_extra": rw_extra}
    cmd, net, pid = sandbox.command(scratch, cfg, prefix_extra=prefix)
    info = sandbox.describe(net, pid, limits, budget, "isolated mode (-I): kernels/ not importable")
    t0 = time.monotonic()
    with open(scratch / "stdout.txt", "wb") as out, open(scratch / "stderr.txt", "wb") as err:
        p = sandbox.spawn(cmd, cwd=scratch, env=sandbox.scrubbed_env(scratch, env_extra), stdin=subprocess.DEVNULL,
                          stdout=out, stderr=err, preexec_fn=sandbox.preexec(limits))
        timed_out = stopped = False
        try:
            if stop is None:
                rc = p.wait(timeout=budget)
            else:
                rc, stopped = _wait_watching(p, t0 + budget, out_dir / "progress.jsonl", stop)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
        finally:
            sandbox.kill_group(p)   # the worker and anything it started, orphans included
    seconds = time.monotonic() - t0
    progress = _jsonl(out_dir / "progress.jsonl")
    tramp = _jsonl(report)
    status = next((ev["sandbox"] for ev in tramp if "sandbox" in ev), {})
    info.update({k: v for k, v in status.items() if k != "pid_namespace"})
    exit_report = next((ev["exit"] for ev in reversed(tramp) if "exit" in ev), None)
    stderr = (scratch / "stderr.txt").read_text(errors="replace")
    return WorkerRun(rc=rc, timed_out=timed_out, seconds=seconds, progress=progress, stderr=stderr, sandbox=info,
                     exit_report=exit_report, stopped=stopped)


POLL_S = 0.05   # how often a watched worker's progress is read


def _wait_watching(p, until, progress_path, stop):
    """(exit code or None, stopped): waits for `p` until the monotonic `until`, handing each
    complete progress line to `stop` as it appears; raises TimeoutExpired at `until`."""
    seen = 0
    while True:
        try:
            rc = p.wait(timeout=max(0.0, min(POLL_S, until - time.monotonic())))
            return rc, False
        except subprocess.TimeoutExpired:
            if time.monotonic() >= until:
                raise
        try:
            with open(progress_path, "rb") as f:
                f.seek(seen)
                chunk = f.read()
        except OSError:
            continue
        end = chunk.rfind(b"\n") + 1   # whole lines only: the rest is still being written
        seen += end
        for line in chunk[:end].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if stop(ev):
                return None, True


def _jsonl(path):
    out = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass   # a line cut short by the kill
    return out


def module_broke_worker(wr):
    """A failure of the worker's own machinery, judged by when it came: after the module was loaded
    its native code shares the process, so the failure is the module's (the reason, returned);
    before, it is the harness's (raised, as `_raise_worker_bug`). None when the worker reported none."""
    bug = next((ev["worker_error"] for ev in wr.progress if "worker_error" in ev), None)
    if bug and any("loaded" in ev for ev in wr.progress):
        text = bug.strip()
        return "broke the worker's own machinery after loading the module: " + (
            text if len(text) <= 600 else "..." + text[-600:])
    _raise_worker_bug(wr)
    return None


def _raise_worker_bug(wr):
    bug = next((ev["worker_error"] for ev in wr.progress if "worker_error" in ev), None)
    if bug:
        raise RuntimeError(f"the harness's worker failed (not the candidate):\n{bug}")
