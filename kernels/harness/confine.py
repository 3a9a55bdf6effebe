"""Trampoline of every sandboxed worker (kernels/harness/sandbox.py starts it):

    python -I -X faulthandler confine.py CONFIG_JSON

Standard library only: the harness copies this file into the worker's scratch directory and runs
it from there. Before any candidate code exists in the process it

1. drops every capability (bounding, ambient, effective, permitted, inheritable): a worker that
   runs as root keeps uid 0 but loses the powers of root, and execve cannot give them back;
2. confines the file system with Landlock (Linux >= 5.13; unprivileged; inherited by every child
   and across execve): read and execute only beneath `ro` (the system directories, the Python
   installation, the worker's scratch directory), read/write only beneath `rw` (the scratch
   directory's out/ and work/, and any extra the harness names), device files readable and
   writable (but none created); with Landlock ABI >= 4 no TCP bind or
   connect, with ABI >= 6 no signals to and no abstract unix sockets of processes outside the
   sandbox. Landlock also forbids ptrace (so /proc/PID/mem) of any process outside it;
3. reports what applied (a JSON line `{"sandbox": ...}` on `report_fd`, or `report_file`);
4. forks: the child runs the worker (`module`, with `path` prepended to sys.path, or `script`),
   the parent waits and reports how the child ended (`{"exit": {"code": N}}` or
   `{"exit": {"signal": "SIGSEGV"}}`), then exits with the child's code (128 + signal number
   for a signal). In a PID namespace this process is its init: when it exits, every process the
   worker started dies with it.
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


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


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


def landlock(libc, ro, rw, dev):
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
    what = (f"landlock ABI {abi}: read-only beneath {len(ro)} system, Python and scratch directories, "
            f"read-write beneath the scratch directory's out/ and work/ only, devices read/write")
    extras = []
    if net:
        extras.append("no TCP bind/connect")
    if scoped:
        extras.append("no signals or abstract unix sockets outside the sandbox")
    extras.append("no ptrace outside the sandbox")
    return what + "; " + ", ".join(extras)


def _report(cfg, msg):
    line = (json.dumps(msg) + "\n").encode()
    if cfg.get("report_fd") is not None:
        try:
            os.write(cfg["report_fd"], line)
        except OSError:
            pass
    if cfg.get("report_file"):
        with open(cfg["report_file"], "ab") as f:
            f.write(line)


def main():
    cfg = json.loads(sys.argv[1])
    libc = _libc()
    status = {"pid_namespace": os.getpid() == 1}
    try:
        status["capabilities"] = drop_capabilities(libc)
    except Exception as e:  # noqa: BLE001
        status["capabilities"] = f"not applied: {e}"
    if cfg.get("landlock", True):
        try:
            status["filesystem"] = landlock(libc, cfg.get("ro", []), cfg.get("rw", []), cfg.get("dev", []))
        except Exception as e:  # noqa: BLE001
            status["filesystem"] = f"not confined: {e}"
    else:
        status["filesystem"] = "not confined: disabled (KIDIOM_SANDBOX_LANDLOCK=0)"
    _report(cfg, {"sandbox": status})
    for fd in (sys.stdout, sys.stderr):
        fd.flush()
    pid = os.fork()
    if pid == 0:
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
