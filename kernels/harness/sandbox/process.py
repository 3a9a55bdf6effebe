"""Sandboxed processes: started in a session of their own (`spawn`), run to a hard deadline
(`run_job`), ended with everything they started (`kill_group`, `reap_orphans`), and what they
leave read back safely (`read_file`, `death_text`)."""
import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from .policy import command, describe, limits, preexec, scrubbed_env, writable_dirs

__all__ = ["spawn", "run_job", "kill_group", "become_subreaper", "reap_orphans", "read_file", "signal_name",
           "death_text", "load_result", "JobTimeout"]

_LIVE = set()                 # pids of the sandboxed processes this harness started and still owns
_LIVE_LOCK = threading.Lock()


def spawn(argv, **kw):
    """subprocess.Popen of a sandboxed process in a session of its own, registered so that
    reap_orphans never takes it for an orphan."""
    with _LIVE_LOCK:
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        _LIVE.add(p.pid)
    return p


def become_subreaper(on=True):
    """Make this process a child subreaper: a descendant whose parent dies (a detached, double
    forked grandchild of a worker that had no PID namespace) is adopted by it, not by init, so
    reap_orphans can end it. Returns whether it applied."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1 if on else 0, 0, 0, 0) == 0      # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _stat(pid):
    """(ppid, session id, state) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[3]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def reap_orphans(everything=False):
    """Kill and reap the orphans this (subreaper) process adopted: children in a session other
    than ours that we did not start (sandboxed workers are registered by spawn; the tools the
    harness runs itself share its session). `everything`: every descendant (the harness's exit).
    Returns the number killed."""
    me, sid = os.getpid(), os.getsid(0)
    killed = 0
    for _ in range(100):       # a fork bomb cannot hold us here: rounds are bounded
        with _LIVE_LOCK:
            kids = []
            for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
                if not d.isdigit():
                    continue
                st = _stat(int(d))
                if st and st[0] == me and (everything or (st[1] != sid and int(d) not in _LIVE)):
                    kids.append((int(d), st[2]))
            for pid, state in kids:
                if state != "Z":
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except OSError:
                        pass
        if not kids:
            return killed
        for pid, _ in kids:
            for _ in range(200):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.005)
    return killed


def kill_group(proc):
    """SIGKILL the worker's process group (the worker and anything it started), reap it, then any
    orphan it left to this subreaper."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    with _LIVE_LOCK:
        _LIVE.discard(proc.pid)
    reap_orphans()


class JobTimeout(Exception):
    """A sandboxed job did not end before its deadline (its process group was killed)."""


def read_file(scratch, rel, limit=256 << 20, binary=False):
    """A file a sandboxed process wrote, refusing symbolic links, anything outside its scratch
    directory and anything over `limit` bytes."""
    scratch = Path(scratch).resolve()
    p = (scratch / rel).resolve()
    p.relative_to(scratch)   # ValueError if outside
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{rel} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{rel} is larger than {limit} bytes")
    return data if binary else data.decode(errors="replace")


def load_result(scratch, path):
    """np.load of a file the worker wrote, refusing anything outside its scratch directory and
    symbolic links (the candidate may have planted them)."""
    scratch = Path(scratch).resolve()
    p = (scratch / path).resolve()
    p.relative_to(scratch)   # ValueError if outside
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return np.load(f, allow_pickle=False)


def run_job(scratch, cfg, deadline, what, env_extra=None, cwd=None, address_space=None, policy=None, gpu=False,
            python_note="isolated mode (-I)", why_no_as="not applied"):
    """Run one sandboxed job (trampoline config `cfg`) from start to end, or until `deadline`
    (time.monotonic()): its process group is killed in the end either way. stdout and stderr go to
    files, the trampoline's report to `scratch/.trampoline.jsonl` (outside what the job may write).
    Returns {rc, seconds, stderr, exit, sandbox}; raises JobTimeout past the deadline."""
    scratch = Path(scratch)
    out_dir, work = writable_dirs(scratch)
    report = scratch / ".trampoline.jsonl"
    report.unlink(missing_ok=True)
    cfg = dict(cfg, report_file=str(report))
    budget = max(0.5, deadline - time.monotonic())
    lims = limits(cpu_s=budget * (os.cpu_count() or 1) + 10, address_space=address_space, why_no_as=why_no_as)
    argv, net, pid = command(scratch, cfg, policy=policy, gpu=gpu)
    info = describe(net, pid, lims, budget, python_note)
    t0 = time.monotonic()
    with open(scratch / "stdout.txt", "wb") as out, open(scratch / "stderr.txt", "wb") as err:
        p = spawn(argv, cwd=cwd or work, env=scrubbed_env(scratch, env_extra), stdin=subprocess.DEVNULL,
                  stdout=out, stderr=err, preexec_fn=preexec(lims))
        try:
            rc = p.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_group(p)
    seconds = time.monotonic() - t0
    events = []
    try:
        for line in report.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    except OSError:
        pass
    status = next((ev["sandbox"] for ev in events if isinstance(ev, dict) and "sandbox" in ev), {})
    info.update({k: v for k, v in status.items() if k != "pid_namespace"})
    exit_report = next((ev["exit"] for ev in reversed(events) if isinstance(ev, dict) and "exit" in ev), None)
    try:
        stderr = (scratch / "stderr.txt").read_text(errors="replace")
    except OSError:
        stderr = ""
    if rc is None:
        raise JobTimeout(f"{what} timed out after {seconds:.1f} s (killed at the deadline)")
    return {"rc": rc, "seconds": seconds, "stderr": stderr, "exit": exit_report, "sandbox": info}


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def death_text(rc, exit_report=None):
    """'died with SIGSEGV' / 'exited with code 1' / None (clean exit), from the trampoline's
    report if there is one, else the process's return code (negative: a signal; 129-159 from a
    PID namespace's init: 128 + the signal)."""
    if exit_report:
        if exit_report.get("signal"):
            return f"died with {exit_report['signal']}"
        code = exit_report.get("code")
        return f"exited with code {code}" if code else None
    if rc is None:
        return None
    if rc < 0:
        return f"died with {signal_name(-rc)}"
    if rc:
        return f"exited with code {rc}"
    return None


