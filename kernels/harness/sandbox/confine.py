"""Trampoline of every sandboxed worker (kernels/harness/sandbox/ starts it):

    python -I -X faulthandler confine.py CONFIG_JSON

Standard library only: the harness copies this file into the worker's scratch directory and runs
it from there. Before any candidate code exists in the process it

1. drops every capability (bounding, ambient, effective, permitted, inheritable): a worker that
   runs as root keeps uid 0 but loses the powers of root, and execve cannot give them back;
2. confines the file system with Landlock (Linux >= 5.13; unprivileged; inherited by every child
   and across execve): read and execute only beneath `ro` (the system directories, the Python
   installation, the worker's scratch directory), read/write only beneath `rw` (the scratch
   directory's out/ and work/, and any extra the harness names; in the new root also its
   private /tmp and /dev/shm), the device nodes `dev` names readable and writable (none created;
   in the new root its minimal /dev); with Landlock ABI >= 4 no TCP bind or
   connect, with ABI >= 6 no signals to and no abstract unix sockets of processes outside the
   sandbox. Landlock also forbids ptrace (so /proc/PID/mem) of any process outside it;
3. reports what applied (a JSON line `{"sandbox": ...}` on `report_fd`, or `report_file`);
4. forks: the child runs the worker (`module`, with `path` prepended to sys.path, `script`, or
   `exec`: a program, e.g. the C++ compiler of a host build), the parent waits and reports how the
   child ended (`{"exit": {"code": N}}` or `{"exit": {"signal": "SIGSEGV"}}`), then exits with the
   child's code (128 + signal number for a signal).

Before 1, with `root` (the harness passes it when the worker runs in its own mount namespace,
`unshare --mount`), it gives the worker its own view of the machine: a fresh tmpfs root holding
read-only bind mounts of only what the policy allows (`root.ro`: system directories, the Python
installation, the scratch directory), the scratch directory's `out/` and `work/` writable
(`root.rw`), a private /tmp and /dev/shm (fresh tmpfs), a minimal /dev (null zero full random
urandom tty, and the GPU's /dev/nvidia* where the harness names them), its own /proc (mounted for
its PID namespace: no other process's command line or environment), the files of /etc that other
users may not read hidden; then pivot_root into it and detach the old root. Nothing else of the
host's file system, in particular no pathname Unix socket outside the scratch directory, exists
there. Where a step fails before the pivot, the worker runs in the host's view and the report
says `not applied: why`.

Nothing the worker starts outlives it: in a PID namespace this process is its init, whose exit
kills every process of the namespace (it also kills them itself when the worker ends); without one
it is a child subreaper (prctl PR_SET_CHILD_SUBREAPER) that adopts every orphaned descendant and
kills them all when the worker ends (a worker killed with it leaves them to the harness, which is
a subreaper too: sandbox.reap_orphans). `descendants` in the report says which applied.

`report_file` is opened before the confinement and closed in the child: the worker can neither
reopen it (it lies outside the writable directories) nor write through the descriptor, so the
exit report is the trampoline's own.
"""
import ctypes
import json
import os
import signal
import sys

# Landlock ABI (include/uapi/linux/landlock.h); the syscall numbers are the same on every arch
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_V1_ALL = (1 << 13) - 1          # execute ... make_sym
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
PR_SET_CHILD_SUBREAPER = 36
# mount(2) (include/uapi/linux/mount.h)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE = 442, -100, 0x8000   # 442 on every arch (Linux >= 5.12)
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}
# statvfs f_flag -> the mount flags a remount must keep (a user namespace locks them)
_KEEP_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (getattr(os, "ST_RELATIME", 4096),
                                                                                 MS_RELATIME))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


# the worker's view of the machine: a new root ------------------------------------------------------

def _mount(libc, src, dst, fstype, flags, data=None):
    enc = (lambda x: x.encode() if isinstance(x, str) else x)
    if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src or fstype or ''} on {dst}: {os.strerror(e)}")


def _seal(libc, path, readonly):
    """The mount at `path` and every mount beneath it: nosuid, nodev, and read-only if asked."""
    attr = _MountAttr((MOUNT_ATTR_RDONLY if readonly else 0) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    if libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE, ctypes.byref(attr),
                    ctypes.sizeof(attr)) == 0:
        return
    # before Linux 5.12: remount the top mount only, keeping the flags it has
    st = os.statvfs(path)
    keep = 0
    for st_flag, ms_flag in _KEEP_FLAGS:
        if st.f_flag & st_flag:
            keep |= ms_flag
    _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | keep | (MS_RDONLY if readonly else 0))


def _depth(path):
    return len([c for c in path.split("/") if c])


def _covered(path, roots):
    """Whether a strict ancestor of `path` is in `roots`."""
    return any(path != r and (path + "/").startswith(r.rstrip("/") + "/") for r in roots)


def _inside_root(root, path):
    """`root` + `path`, refusing a result that resolves outside the new root (a symbolic link made
    there must never turn a mount or a write into one on the host)."""
    target = root + path
    parent = os.path.realpath(os.path.dirname(target))
    if parent != root and not parent.startswith(root + "/"):
        raise OSError(f"{path}: resolves outside the new root ({parent})")
    return target


def enter_root(libc, spec):
    """Build the worker's root (see the module doc) under `spec["dir"]` and pivot_root into it.
    Returns a description. Raises before the pivot (then nothing has changed for this process but
    mounts private to its namespace); after the pivot, a failure is fatal (SystemExit)."""
    R = os.path.realpath(spec["dir"])
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)      # nothing below propagates to the host
    _mount(libc, "tmpfs", R, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    pid_ns = os.getpid() == 1
    entries = [(p, "ro") for p in spec.get("ro", []) if p not in ("/proc", "/dev")]
    entries += [(p, "rw") for p in spec.get("rw", [])]
    entries += [(p, "tmpfs") for p in spec.get("tmpfs", [])]
    entries += [(p, "dev") for p in spec.get("devices", [])]
    entries += [(p, "hide") for p in spec.get("hide", [])]
    entries.append(("/proc", "proc"))
    entries.sort(key=lambda e: (_depth(e[0]), e[0]))
    ro = [p for p, k in entries if k == "ro"]
    rw = [p for p, k in entries if k == "rw"]
    empty = R + "/.empty"          # what a hidden file shows: nothing, readable by no one
    os.close(os.open(empty, os.O_CREAT | os.O_WRONLY, 0))
    counts = {"ro": 0, "rw": 0, "dev": 0, "hide": 0}
    # the directories made only to reach a mount point (/work/repo for /work/repo/.venv, or a
    # repository under the private /tmp): traversable, never listable, so that a worker cannot
    # see what else lies beside what it may read
    made, targets = [], set()

    def makedirs(path):
        missing = []
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)

    proc_note = ""
    for path, kind in entries:
        if (kind == "ro" and _covered(path, ro)) or (kind == "rw" and _covered(path, rw)):
            continue       # already visible through its ancestor's mount
        target = _inside_root(R, path)
        targets.add(target)
        if kind == "tmpfs":
            makedirs(target)
            _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=512m")
            continue
        if kind == "proc":
            makedirs(target)
            if pid_ns:
                try:
                    _mount(libc, "proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    proc_note = "its own /proc (PID namespace: no other process visible)"
                    continue
                except OSError as e:
                    proc_note = f"the host's /proc (a fresh one could not be mounted: {e})"
            else:
                proc_note = "the host's /proc (no PID namespace: other processes visible)"
            _mount(libc, "/proc", target, None, MS_BIND | MS_REC)
            _seal(libc, target, readonly=True)
            continue
        if kind == "ro" and os.path.islink(path):       # /lib -> usr/lib: the same link
            makedirs(os.path.dirname(target))
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
            continue
        if not os.path.lexists(path):
            continue
        isdir = os.path.isdir(path)
        makedirs(os.path.dirname(target))
        if isdir:
            makedirs(target)
        elif not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        if kind == "hide":
            if isdir:
                _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=000,size=4k")
            else:
                _mount(libc, empty, target, None, MS_BIND)
                _seal(libc, target, readonly=True)
        elif kind == "dev":
            _mount(libc, path, target, None, MS_BIND | (MS_REC if isdir else 0))   # device nodes stay usable
        else:
            _mount(libc, path, target, None, MS_BIND | (MS_REC if kind == "ro" else 0))
            _seal(libc, target, readonly=kind == "ro")
        counts[kind] += 1
    for link, dest in spec.get("links", {}).items():
        target = _inside_root(R, link)
        targets.add(target)
        makedirs(os.path.dirname(target))
        if not os.path.lexists(target):
            os.symlink(dest, target)
    for d in made:
        if d not in targets:
            os.chmod(d, 0o111)
    _mount(libc, None, R, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    cwd = os.getcwd()
    os.chdir(R)
    nr = SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(f"pivot_root: no syscall number known for {os.uname().machine}")
    if libc.syscall(nr, b".", b".") != 0:
        e = ctypes.get_errno()
        os.chdir(cwd)
        raise OSError(e, f"pivot_root: {os.strerror(e)}")
    # the old root is stacked on the new one: detach it. There is no way back from here.
    try:
        if libc.umount2(b".", MNT_DETACH) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"umount2 of the old root: {os.strerror(e)}")
        os.chdir("/")
        os.chdir(cwd)
    except OSError as e:
        sys.stderr.write(f"kidiom sandbox: cannot finish the new root after pivot_root: {e}\n")
        sys.stderr.flush()
        os._exit(70)
    private = ", ".join(spec.get("tmpfs", [])) or "none"
    what = spec.get("what", "system directories, the Python installation, the scratch directory")
    return (f"mount namespace: pivot_root into a read-only root ({counts['ro']} read-only binds: {what}; "
            f"{counts['rw']} writable: the scratch directory's out/ and work/ and what the harness adds) with "
            f"private {private} (fresh tmpfs), "
            f"{proc_note}, a minimal /dev ({counts['dev']} device nodes), {counts['hide']} entries of /etc "
            f"that other users may not read hidden; no pathname Unix socket outside the scratch directory")


# descendants ----------------------------------------------------------------------------------------

def _children():
    """Pids of this process's children (/proc/self/task/*/children, else a scan of /proc)."""
    me, kids = os.getpid(), set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                kids.update(int(x) for x in f.read().split())
        return kids
    except OSError:
        pass
    try:
        names = os.listdir("/proc")
    except OSError:
        return kids
    for d in names:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    kids.add(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def end_descendants(pid_ns):
    """Kill every process the worker left behind and reap them. In a PID namespace kill(-1)
    reaches exactly the namespace's other processes; outside one, the orphans this subreaper
    adopted are killed round by round (their own children are adopted in turn), for at most 2 s."""
    import time
    t_end = time.monotonic() + 2.0
    while True:
        if pid_ns:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        kids = set() if pid_ns else _children()
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        if time.monotonic() > t_end:
            return
        time.sleep(0.01)


def drop_capabilities(libc):
    """Drop every capability of this process and of anything it executes."""
    if os.name != "posix":
        return "not applied: not POSIX"
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)   # EINVAL past the last capability: fine
    hdr = _CapHeader(0x20080522, 0)                 # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(hdr), data) != 0:
        return f"not applied: capset failed (errno {ctypes.get_errno()})"
    return "all dropped (bounding, ambient, effective, permitted, inheritable)"


def landlock(libc, ro, rw, dev, private=(), policy_what="system, Python and scratch directories"):
    """Restrict this process (and its future children) to the given paths. Returns a description;
    raises OSError if Landlock is unavailable."""
    abi = libc.syscall(SYS_CREATE, None, 0, CREATE_RULESET_VERSION)
    if abi < 0:
        raise OSError(ctypes.get_errno(), "Landlock unavailable")
    fs = FS_V1_ALL | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    rfd = libc.syscall(SYS_CREATE, ctypes.byref(attr), size, 0)
    if rfd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    ro_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    dev_rights = FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR | (FS_TRUNCATE if abi >= 3 else 0)
    skipped = []
    try:
        for paths, rights in ((ro, ro_rights), (dev, dev_rights), (rw, fs)):
            for p in paths:
                try:
                    pfd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    skipped.append(p)
                    continue
                try:
                    allowed = rights & fs if os.path.isdir(p) else rights & fs & FILE_RIGHTS
                    rule = _PathBeneath(allowed, pfd)
                    if libc.syscall(SYS_ADD_RULE, rfd, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {p} failed")
                finally:
                    os.close(pfd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if libc.syscall(SYS_RESTRICT, rfd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(rfd)
    writable = "the scratch directory's out/ and work/" + (f" and the private {', '.join(private)}" if private else "")
    what = (f"landlock ABI {abi}: read-only beneath {len(ro)} directories (the policy's: {policy_what}), "
            f"read-write beneath {writable} only, devices read/write")
    extras = []
    if net:
        extras.append("no TCP bind/connect")
    if scoped:
        extras.append("no signals or abstract unix sockets outside the sandbox")
    extras.append("no ptrace outside the sandbox")
    return what + "; " + ", ".join(extras)


_REPORT_FD = [None]   # report_file, opened before the confinement (the worker cannot reopen it)


def _report(cfg, msg):
    line = (json.dumps(msg) + "\n").encode()
    if cfg.get("report_fd") is not None:
        try:
            os.write(cfg["report_fd"], line)
        except OSError:
            pass
    if _REPORT_FD[0] is not None:
        try:
            os.write(_REPORT_FD[0], line)
        except OSError:
            pass


def main():
    cfg = json.loads(sys.argv[1])
    libc = _libc()
    if cfg.get("report_file"):
        _REPORT_FD[0] = os.open(cfg["report_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    pid_ns = os.getpid() == 1
    status = {"pid_namespace": pid_ns}
    private = []
    if cfg.get("root"):
        try:
            status["mount"] = enter_root(libc, cfg["root"])
            private = list(cfg["root"].get("tmpfs", []))
        except Exception as e:  # noqa: BLE001 - the host's view, said so
            status["mount"] = f"not applied: {e}"
    else:
        status["mount"] = cfg.get("no_root", "not applied: no mount namespace")
    if pid_ns:
        status["descendants"] = ("PID namespace: the trampoline is its init; when the worker ends it kills "
                                 "every process left, and its own exit would kill them too")
    elif libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        status["descendants"] = ("child subreaper (no PID namespace): the trampoline adopts every orphaned "
                                 "descendant and kills them all when the worker ends; if it is killed itself, "
                                 "the harness (also a subreaper) kills them")
    else:
        status["descendants"] = (f"not contained: no PID namespace and PR_SET_CHILD_SUBREAPER failed "
                                 f"(errno {ctypes.get_errno()}); the harness kills the process group only")
    try:
        status["capabilities"] = drop_capabilities(libc)
    except Exception as e:  # noqa: BLE001
        status["capabilities"] = f"not applied: {e}"
    if cfg.get("landlock", True):
        try:
            # the private /tmp and /dev/shm exist in this namespace only: writable like work/
            # in the new root /dev holds only the allowed nodes: the directory itself may be listed
            dev = list(cfg.get("dev", [])) + (["/dev"] if private else [])
            status["filesystem"] = landlock(libc, cfg.get("ro", []), cfg.get("rw", []) + private, dev, private,
                                            cfg.get("what", "system, Python and scratch directories"))
        except Exception as e:  # noqa: BLE001
            status["filesystem"] = f"not confined: {e}"
    else:
        status["filesystem"] = "not confined: disabled (KIDIOM_SANDBOX_LANDLOCK=0)"
    _report(cfg, {"sandbox": status})
    for fd in (sys.stdout, sys.stderr):
        fd.flush()
    pid = os.fork()
    if pid == 0:
        if _REPORT_FD[0] is not None:
            os.close(_REPORT_FD[0])
        if cfg.get("exec"):
            argv = [str(a) for a in cfg["exec"]]
            try:
                os.execv(argv[0], argv)
            except OSError as e:
                sys.stderr.write(f"kidiom sandbox: cannot execute {argv[0]}: {e}\n")
                sys.stderr.flush()
                os._exit(127)
        import runpy
        if cfg.get("module"):
            sys.path[:0] = cfg.get("path", [])
            sys.argv = [cfg["module"], *cfg.get("args", [])]
            runpy.run_module(cfg["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [cfg["script"], *cfg.get("args", [])]
            runpy.run_path(cfg["script"], run_name="__main__")
        sys.exit(0)
    for fd in cfg.get("close_in_parent", []):
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            _, st = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    # the worker is gone: so is everything it started (a daemon holding its pipes, a sleeper)
    end_descendants(pid_ns)
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        _report(cfg, {"exit": {"signal": name, "signum": sig}})
        os._exit(128 + sig)
    code = os.WEXITSTATUS(st)
    _report(cfg, {"exit": {"code": code}})
    os._exit(code)


if __name__ == "__main__":
    main()
