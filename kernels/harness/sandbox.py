"""The sandbox every process that runs candidate code gets (host C++ workers, host.py; Triton and
CUDA workers, workers.py).

A worker is started as `[unshare ...] python -I -X faulthandler SCRATCH/confine.py CONFIG`:

- its own session and process group (the whole group is killed at the deadline), and where the
  machine allows (`unshare`), an empty network namespace, its own PID namespace (the trampoline
  is its init: when the worker ends, everything it started ends too) and its own mount namespace,
  in which the trampoline pivots into a new root: read-only binds of only what the policy allows,
  private /tmp, /dev/shm and /proc, a minimal /dev (confine.py `enter_root`). Without a PID
  namespace the trampoline and the harness are child subreapers that kill every orphaned
  descendant (`become_subreaper`, `reap_orphans`);
- a scrubbed environment (PATH, LANG, HOME = TMPDIR = scratch/work, one thread per math
  library, plus what the caller adds), cwd in a fresh scratch directory, `python -I` (no user
  site, no PYTHON* variables, neither the harness's nor the script's directory on sys.path);
- rlimits: CORE 0, CPU, FSIZE, AS (when given), NPROC (not for root, which it does not bind);
- inside the process, before any candidate code (confine.py): every capability dropped, and a
  Landlock file-system policy: read/execute only beneath the system directories and the Python
  installation (never the repository, /tmp or home directories), read-only in the scratch
  directory except its `out/` (results) and `work/` (cwd, HOME, TMPDIR) subdirectories; no TCP,
  no signals or ptrace outside the sandbox. Everything the harness itself writes (plans, inputs,
  logs, the trampoline) lies outside `out/` and `work/`, so a candidate cannot plant symbolic
  links that turn the harness's writes elsewhere.

`describe()` and the trampoline's report say what applied on this machine.
Set KIDIOM_SANDBOX_LANDLOCK=0 in the harness's environment to run without the Landlock policy
(for a machine where it breaks a legitimate toolchain; the report then says so), and
KIDIOM_SANDBOX_NAMESPACES to a subset of `net,mount,pid` (empty: none) to use fewer namespaces
(to see a fallback at work; the report says what is missing).

Every process that runs candidate code is started here (`spawn`, `run_job`): the check's workers,
the ahead-of-time compile (aot.py), the host C++ build (hostbuild.py, with the narrower
`build_policy`), the host workers, the GPU bench's worker. Each has a hard deadline on the
process group and never a pipe the harness reads to its end: results come back through files
in `out/` or a report pipe read with a deadline (workers.py).
"""
import json
import os
import re
import resource
import shutil
import signal
import site
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

__all__ = ["isolation", "namespaces", "limits", "preexec", "scrubbed_env", "writable_dirs", "fs_policy",
           "build_policy", "command", "spawn", "run_job", "kill_group", "become_subreaper", "reap_orphans",
           "install_trampoline", "signal_name", "death_text", "FSIZE_LIMIT"]

HERE = Path(__file__).resolve().parent
CONFINE = HERE / "confine.py"
REPO_ROOT = HERE.parent.parent
FSIZE_LIMIT = 1 << 30   # largest file a worker may write

SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys"]


NAMESPACES = ("net", "mount", "pid")


def _wanted_namespaces():
    raw = os.environ.get("KIDIOM_SANDBOX_NAMESPACES")
    if raw is None:
        return set(NAMESPACES)
    return {n.strip() for n in raw.split(",") if n.strip() in NAMESPACES}


@lru_cache(maxsize=None)
def namespaces():
    """The `unshare` prefix that works here, most namespaces first: {"prefix", "net", "pid", "mount",
    "user"} (net, pid: descriptions as the report gives them; mount: bool)."""
    wanted = _wanted_namespaces()
    none = {"prefix": [], "mount": False, "user": False}
    if not wanted:
        return dict(none, net="not isolated: no namespaces (KIDIOM_SANDBOX_NAMESPACES is empty)",
                    pid="no (KIDIOM_SANDBOX_NAMESPACES is empty)")
    unshare = shutil.which("unshare")
    if not unshare:
        return dict(none, net="not isolated: unshare(1) not found", pid="no (unshare(1) not found)")
    combos = []
    for drop in ((), ("mount",), ("pid",), ("mount", "pid")):
        combo = [n for n in NAMESPACES if n in wanted and n not in drop]
        if combo and combo not in combos:
            combos.append(combo)
    flags = {"net": ["--net"], "mount": ["--mount"], "pid": ["--pid", "--fork", "--kill-child"]}
    errors = []
    for combo in combos:
        for user in (False, True):
            prefix = [unshare] + (["--user", "--map-root-user"] if user else [])
            for n in combo:
                prefix += flags[n]
            prefix.append("--")
            try:
                r = subprocess.run(prefix + ["true"], capture_output=True, text=True, timeout=10)
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
                continue
            if r.returncode != 0:
                errors.append(r.stderr.strip()[-200:])
                continue
            how = "unshare " + " ".join(a for a in prefix[1:-1] if a not in ("--fork", "--kill-child"))
            net = (f"none ({how}: empty network namespace)" if "net" in combo
                   else "not isolated: no network namespace (KIDIOM_SANDBOX_NAMESPACES)")
            pid = ("own PID namespace (the worker's init ends everything it started)" if "pid" in combo
                   else "no (unshare --pid " + ("failed here" if "pid" in wanted else "not asked for") + ")")
            return {"prefix": prefix, "net": net, "pid": pid, "mount": "mount" in combo, "user": user}
    return dict(none, net="not isolated: unshare failed (" + "; ".join(errors) + ")", pid="no")


def isolation():
    """(command prefix, network description, pid-namespace description)."""
    ns = namespaces()
    return ns["prefix"], ns["net"], ns["pid"]


def _nproc_limit(room=64):
    """RLIMIT_NPROC for a worker, or (None, why not). The limit counts every process and thread
    of the user, so it is set to what the user runs now plus `room` for the worker's threads
    (and those of workers started alongside it)."""
    if os.geteuid() == 0:
        return None, "not applied: root is exempt from RLIMIT_NPROC"
    uid = os.getuid()
    count = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        m_uid = re.search(r"^Uid:\s+(\d+)", status, re.M)
        m_thr = re.search(r"^Threads:\s+(\d+)", status, re.M)
        if m_uid and int(m_uid.group(1)) == uid and m_thr:
            count += int(m_thr.group(1))
    return count + room, None


def limits(cpu_s, address_space, why_no_as="not applied", nproc_room=64):
    """The rlimits a worker gets, {name: value or "not applied: why"}."""
    lim = {"CORE": 0, "CPU": int(cpu_s), "FSIZE": FSIZE_LIMIT}
    lim["AS"] = address_space if address_space else why_no_as
    nproc, why = _nproc_limit(nproc_room)
    lim["NPROC"] = nproc if nproc else why
    return lim


def preexec(lims):
    table = {"CORE": resource.RLIMIT_CORE, "CPU": resource.RLIMIT_CPU, "FSIZE": resource.RLIMIT_FSIZE,
             "AS": resource.RLIMIT_AS, "NPROC": resource.RLIMIT_NPROC}
    values = [(table[k], v) for k, v in lims.items() if isinstance(v, int)]

    def apply():
        for which, v in values:
            try:
                soft, hard = resource.getrlimit(which)
                v2 = v if hard == resource.RLIM_INFINITY else min(v, hard)
                resource.setrlimit(which, (v2, v2 if which != resource.RLIMIT_CPU else hard))
            except (ValueError, OSError):
                pass
    return apply


PASS_THROUGH = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH",
                "TRITON_PTXAS_PATH", "NVIDIA_VISIBLE_DEVICES")


def writable_dirs(scratch):
    """(out, work): the only directories of a scratch directory a worker may write."""
    out, work = Path(scratch) / "out", Path(scratch) / "work"
    out.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    return out, work


def scrubbed_env(scratch, extra=None):
    _, work = writable_dirs(scratch)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    for k in PASS_THROUGH:   # some Python builds need LD_LIBRARY_PATH to start at all; the GPU's
        if os.environ.get(k):
            env[k] = os.environ[k]
    env.update(extra or {})
    return env


def _inside(p, root):
    try:
        Path(p).resolve().relative_to(Path(root).resolve())
        return True
    except ValueError:
        return False


def _allow_except(path, denied, out):
    """Add `path` to `out`, or, if it contains a denied path, its children except the denied ones."""
    path = Path(path)
    hit = [d for d in denied if _inside(d, path)]
    if not hit:
        out.append(str(path))
        return
    if any(Path(d).resolve() == path.resolve() for d in hit):
        return
    try:
        children = list(path.iterdir())
    except OSError:
        return
    for c in children:
        _allow_except(c, denied, out)


def fs_policy(scratch, rw_extra=()):
    """The Landlock policy of a worker: {"ro": [...], "rw": [...], "dev": [...]}. Read-only: the
    system directories, the Python installation (prefix, base prefix, site-packages, library
    path entries) and the scratch directory; never the repository (except a virtual environment
    inside it), other scratch directories, /tmp or home directories (unless the Python
    installation is there, then only that installation). Read-write: the scratch directory's
    `out/` and `work/`."""
    import tempfile
    denied = [REPO_ROOT, Path(tempfile.gettempdir()), Path(scratch).resolve().parent]
    ro = []
    for d in SYSTEM_DIRS:
        if os.path.isdir(d):
            _allow_except(d, denied, ro)
    py = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
          str(Path(os.path.realpath(sys.executable)).parent.parent)}
    try:
        py.update(site.getsitepackages())
    except Exception:  # noqa: BLE001
        pass
    for p in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if p:
            py.add(p)
    for p in sorted(py):
        if not os.path.isdir(p) or p in ("/", ""):
            continue
        if any(_inside(p, d) for d in denied) and not _inside(p, sys.prefix):
            continue   # never the repository (a venv inside it is fine), nor other scratch directories
        ro.append(str(Path(p).resolve()))
    ro = sorted(set(ro)) + [str(Path(scratch).resolve())]
    rw = [str(d.resolve()) for d in writable_dirs(scratch)] + [str(Path(p).resolve()) for p in rw_extra]
    return {"ro": ro, "rw": rw, "dev": ["/dev"] if os.path.isdir("/dev") else []}


def landlock_wanted():
    return os.environ.get("KIDIOM_SANDBOX_LANDLOCK", "1") not in ("0", "off", "no", "false")


def install_trampoline(scratch):
    """Copy confine.py into the scratch directory (the worker runs it from there)."""
    dst = Path(scratch) / "confine.py"
    dst.unlink(missing_ok=True)
    shutil.copyfile(CONFINE, dst, follow_symlinks=False)
    return dst


def command(scratch, cfg, prefix_extra=()):
    """(argv, network description, pid description) of a sandboxed worker whose trampoline
    config is `cfg` (see confine.py); the Landlock policy is added here."""
    cfg = dict(cfg)
    cfg.setdefault("landlock", landlock_wanted())
    if cfg["landlock"]:
        pol = fs_policy(scratch, cfg.pop("rw_extra", ()))
        cfg.update(pol)
    else:
        cfg.pop("rw_extra", None)
    trampoline = install_trampoline(scratch)
    prefix, net, pid = isolation()
    argv = list(prefix) + list(prefix_extra) + [sys.executable, "-I", "-X", "faulthandler", str(trampoline),
                                                  json.dumps(cfg)]
    return argv, net, pid


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


def kill_group(proc):
    """SIGKILL the worker's process group (the worker and anything it started), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def describe(net, pid, lims, budget, python_note):
    return {"process": "separate worker (own session and process group)",
            "environment": "scrubbed (PATH, LANG, HOME/TMPDIR = scratch/work, thread counts)",
            "cwd": "fresh scratch directory (writable: its out/ and work/ only)", "python": python_note,
            "network": net, "pid_namespace": pid, "rlimits": lims, "time_limit_s": round(budget, 1)}
