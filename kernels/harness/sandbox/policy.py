"""What a sandboxed worker may reach (see the package's overview): namespaces, rlimits, the scrubbed
environment, the Landlock policies (the workers' `fs_policy`, the host build's `build_policy`),
the new root, and the command line that starts the trampoline (`command`)."""
import json
import os
import re
import resource
import shutil
import signal
import site
import stat
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

__all__ = ["isolation", "namespaces", "limits", "preexec", "scrubbed_env", "writable_dirs", "fs_policy",
           "build_policy", "command", "install_trampoline", "install_runtime", "describe", "FSIZE_LIMIT"]

HERE = Path(__file__).resolve().parent
CONFINE = HERE / "confine.py"
REPO_ROOT = HERE.parents[2]     # kernels/harness/sandbox -> the repository, which no worker may read
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


def _libc_prctl():
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def preexec(lims):
    """The child's side of a sandboxed start: the rlimits, and death with the harness (a harness
    killed by its caller takes its workers with it: PR_SET_PDEATHSIG; `unshare --kill-child`
    passes it on to the trampoline)."""
    table = {"CORE": resource.RLIMIT_CORE, "CPU": resource.RLIMIT_CPU, "FSIZE": resource.RLIMIT_FSIZE,
             "AS": resource.RLIMIT_AS, "NPROC": resource.RLIMIT_NPROC}
    values = [(table[k], v) for k, v in lims.items() if isinstance(v, int)]
    prctl = _libc_prctl()      # looked up here: nothing is imported between fork and exec

    def apply():
        if prctl is not None:
            prctl(1, signal.SIGKILL, 0, 0, 0)      # PR_SET_PDEATHSIG
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
    system directories, the Python installation (prefix, base prefix, site-packages), the files the
    environment's library and CUDA paths name (`environment_files`: files, never directories) and
    the scratch directory; never the repository (except a virtual environment
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
    for p in sorted(py):
        if not os.path.isdir(p) or p in ("/", ""):
            continue
        if any(_inside(p, d) for d in denied) and not _inside(p, sys.prefix):
            continue   # never the repository (a venv inside it is fine), nor other scratch directories
        ro.append(str(Path(p).resolve()))
    # what the environment's paths name (PASS_THROUGH), as files: never a directory, whose other
    # files (anything someone put there) a worker has no need to read
    for f in environment_files():
        if not any(_inside(f, r) for r in ro) and not any(_inside(f, d) for d in denied):
            ro.append(f)
    ro = sorted(set(ro)) + [str(Path(scratch).resolve())]
    rw = [str(d.resolve()) for d in writable_dirs(scratch)] + [str(Path(p).resolve()) for p in rw_extra]
    # the device nodes a worker uses, not the whole of /dev: without a mount namespace /dev/shm
    # (other processes' files) stays out of reach
    return {"ro": ro, "rw": rw, "dev": [d for d in DEV_NODES if os.path.exists(d)]}


def environment_files(environ=None):
    """The files a worker may read because a passed-through variable points at them: the shared
    libraries of each directory on LD_LIBRARY_PATH and TRITON_LIBCUDA_PATH; TRITON_PTXAS_PATH's
    program; under CUDA_HOME and CUDA_PATH, the libraries of lib64/ and lib/, the programs of bin/
    and the libdevice bitcode. Each by its own path, never a directory (issue #50, class 3)."""
    env = os.environ if environ is None else environ
    out = []
    for var in ("LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH"):
        for d in env.get(var, "").split(":"):
            if d and os.path.isdir(d):
                out += shared_libraries(d)
    ptxas = env.get("TRITON_PTXAS_PATH", "")
    if ptxas and os.path.isfile(ptxas) and _is_elf(ptxas):
        out.append(os.path.abspath(ptxas))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var, "")
        if not home or not os.path.isdir(home):
            continue
        for sub in ("lib64", "lib"):
            out += shared_libraries(os.path.join(home, sub))
        out += [f for f in _files(os.path.join(home, "bin")) if _is_elf(f)]
        out += [f for f in _files(os.path.join(home, "nvvm", "libdevice")) if f.endswith(".bc")]
    return sorted(set(out))


def _files(directory):
    try:
        return [os.path.abspath(os.path.join(directory, n)) for n in sorted(os.listdir(directory))
                if os.path.isfile(os.path.join(directory, n))]
    except OSError:
        return []


def _is_elf(path):
    try:
        with open(os.path.realpath(path), "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def shared_libraries(directory):
    """The shared libraries directly in `directory` (`*.so`, `*.so.N...`, ELF files), by their names
    there: what the loader may look for on a library path."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        if (name.endswith(".so") or ".so." in name) and _is_elf(path):
            out.append(os.path.abspath(path))
    return out


DEV_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
DEV_LINKS = {"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1",
             "/dev/stderr": "/proc/self/fd/2"}
# what a host build may read of /etc: the dynamic loader's and the linker's configuration, and the
# alternatives links the toolchain's names go through
BUILD_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
BUILD_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def gpu_devices():
    """The GPU's device files (/dev/nvidia*, /dev/nvidia-caps/), for a worker that runs on it."""
    import glob
    return sorted(glob.glob("/dev/nvidia*"))


@lru_cache(maxsize=None)
def hidden_etc():
    """Entries of /etc that other users may not read (/etc/shadow, private keys): hidden in the
    worker's root, as they would be from an unprivileged user (a worker running as root keeps uid
    0, which owns them)."""
    out = []
    for top, dirs, files in os.walk("/etc"):
        for name in list(dirs) + files:
            p = os.path.join(top, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if not st.st_mode & stat.S_IROTH or (stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH):
                out.append(p)
                if name in dirs:
                    dirs.remove(name)   # hidden whole
    return tuple(out)


def build_policy(scratch, include_dirs, compiler_path):
    """The Landlock policy (and root) of a host C++ build, narrower than a worker's: the toolchain
    (system directories, the compiler's installation, the include directories: Python's and
    pybind11's), the few files of /etc the loader and linker read, and the scratch directory
    (read-only: the module's sources; writable: out/ and work/). No /etc beyond that, no home
    directory, nothing of the repository but the module's sources copied into the scratch."""
    ro = [d for d in BUILD_SYSTEM if os.path.lexists(d)] + [e for e in BUILD_ETC if os.path.lexists(e)]
    comp = Path(os.path.realpath(compiler_path)).parent.parent
    if not any(_inside(comp, d) for d in BUILD_SYSTEM if os.path.isdir(d)):
        ro.append(str(comp))          # a compiler installed outside /usr (e.g. /opt/gcc)
    for d in include_dirs:
        if os.path.isdir(d):
            ro.append(str(Path(d).resolve()))
    ro.append(str(Path(scratch).resolve()))
    rw = [str(d.resolve()) for d in writable_dirs(scratch)]
    return {"ro": ro, "rw": rw, "dev": [d for d in DEV_NODES if os.path.exists(d)],
            "what": "the toolchain, a few files of /etc, Python's and pybind11's include directories, the module's "
                    "sources"}


def python_aliases():
    """{path as Python names it: the real path} for the Python installation's directories whose names
    go through a symbolic link (a venv reached through a linked directory, a linked home): the new
    root binds real paths, so these names are recreated in it as links, or the worker's own
    sys.path would name directories that are not there."""
    names = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(sys.executable), *[p for p in sys.path if p]}
    try:
        names.update(site.getsitepackages())
    except Exception:  # noqa: BLE001
        pass
    out = {}
    for name in sorted(names):
        absolute = os.path.abspath(name)
        real = os.path.realpath(absolute)
        if real == absolute or not os.path.exists(real):
            continue
        # the shortest linked prefix: /a/link/b/c with /a/link -> /x gives /a/link -> /x once
        parts = Path(absolute).parts
        for i in range(2, len(parts) + 1):
            head = str(Path(*parts[:i]))
            if os.path.islink(head):
                out.setdefault(head, os.path.realpath(head))
                break
    return out


def _root_spec(scratch, policy, gpu, hide=True):
    """The trampoline's `root` (confine.py enter_root) for a policy."""
    root_dir = Path(scratch) / ".root"
    root_dir.mkdir(exist_ok=True)
    devices = [d for d in DEV_NODES if os.path.exists(d)] + (gpu_devices() if gpu else [])
    return {"dir": str(root_dir.resolve()), "ro": list(policy["ro"]), "rw": list(policy["rw"]),
            "what": policy.get("what", "system directories, the Python installation, the scratch directory"),
            "tmpfs": ["/tmp", "/dev/shm"], "devices": devices,
            "hide": [h for h in hidden_etc() if any(_inside(h, r) for r in policy["ro"])] if hide else [],
            "links": {**python_aliases(), **DEV_LINKS}}


def landlock_wanted():
    return os.environ.get("KIDIOM_SANDBOX_LANDLOCK", "1") not in ("0", "off", "no", "false")


def install_runtime(scratch, files):
    """The worker's importable runtime: package `kidiom_rt` under `scratch/rt`, holding copies of
    `files` ({name in the package: source path}) and nothing else of kernels/. Returns its path."""
    pkg = Path(scratch) / "rt" / "kidiom_rt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, src in files.items():
        shutil.copy2(src, pkg / name)
    return pkg


def install_trampoline(scratch):
    """Copy confine.py into the scratch directory (the worker runs it from there)."""
    dst = Path(scratch) / "confine.py"
    dst.unlink(missing_ok=True)
    shutil.copyfile(CONFINE, dst, follow_symlinks=False)
    return dst


def command(scratch, cfg, prefix_extra=(), policy=None, gpu=False):
    """(argv, network description, pid description) of a sandboxed worker whose trampoline
    config is `cfg` (see confine.py); the Landlock policy (`policy`, else the workers'
    `fs_policy`) and, with a mount namespace, the new root built from it are added here. `gpu`:
    the GPU's device files are reachable."""
    cfg = dict(cfg)
    cfg.setdefault("landlock", landlock_wanted())
    rw_extra = cfg.pop("rw_extra", ())
    pol = policy or fs_policy(scratch, rw_extra)
    if cfg["landlock"]:
        cfg.update(pol)
        if gpu:
            # all of /dev, as CUDA has always had it (without a new root, /dev/shm with it)
            cfg["dev"] = list(cfg.get("dev", [])) + ["/dev"]
    ns = namespaces()
    if ns["mount"]:
        cfg["root"] = _root_spec(scratch, pol, gpu)
    else:
        cfg["no_root"] = ("not applied: no mount namespace (" + (
            "not asked for: KIDIOM_SANDBOX_NAMESPACES" if "mount" not in _wanted_namespaces()
            else "unshare --mount failed here") + "); the worker sees the host's file system, confined by "
            "Landlock only, and the host's /proc, /tmp and /dev/shm")
    trampoline = install_trampoline(scratch)
    argv = list(ns["prefix"]) + list(prefix_extra) + [sys.executable, "-I", "-X", "faulthandler", str(trampoline),
                                                      json.dumps(cfg)]
    return argv, ns["net"], ns["pid"]


def describe(net, pid, lims, budget, python_note):
    """What the sandbox applies, as far as the harness knows before the start; the trampoline's
    report (mount, descendants, capabilities, filesystem) is merged in by the callers."""
    ns = namespaces()
    return {"process": "separate worker (own session and process group)",
            "environment": "scrubbed (PATH, LANG, HOME/TMPDIR = scratch/work, thread counts)",
            "cwd": "fresh scratch directory (writable: its out/ and work/ only)", "python": python_note,
            "network": net, "pid_namespace": pid, "rlimits": lims, "time_limit_s": round(budget, 1),
            "mount": "mount namespace: new root (see the trampoline's report)" if ns["mount"] else
            "not applied: no mount namespace",
            "descendants": "PID namespace" if ns["prefix"] and "--pid" in ns["prefix"] else
            "child subreaper (no PID namespace)"}
