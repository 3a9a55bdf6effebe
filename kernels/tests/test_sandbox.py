"""Planted escapes against the sandbox itself (issue #22, classes 1-3), each through the harness's
`check`, `compile` or host build, each asserting that the escape was blocked, not only the verdict:

1. candidate code outside the sandbox: a decorator argument or a parameter default of the kernel
   (host code that runs at import) that writes a file, under `compile` and `check`; a host C++
   `#include` of a file outside the module's directory (neither read nor shown);
2. descendants that outlive the deadline: a detached (double fork + setsid) grandchild that sleeps
   holding the worker's pipes, from a launcher, a decorator and a C++ static initializer; the
   harness's stdout is read to its end, as `kidiom validate` does, and a process census before and
   after finds nothing left;
3. holes in the confinement: /proc (the harness's command line), an existing file under /dev/shm,
   a pathname Unix socket under /tmp, TCP to 127.0.0.1, and a file write, from a Triton launcher
   and from a C++ static initializer.

Where the machine cannot apply a mechanism (no unshare, no mount or PID namespace) the `sandbox`
report must say so, and the fallbacks are exercised too (KIDIOM_SANDBOX_NAMESPACES).
"""
import json
import os
import re
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import HAS_CUDA, ROOT, variant

DECODE = ROOT / "kernels" / "kda" / "decode.py"
KV = ROOT / "kernels" / "kv_transfer" / "kv_transfer.cpp"
PUBLIC_CALL = "    return kda_decode_launch(q, k, v, g, beta, state, slots, o, scale)\n"
DECORATOR = "@triton.jit\ndef kda_decode_kernel(\n"
LAST_PARAM = "    BV: tl.constexpr,\n):\n"

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the census reads Linux's /proc")


# running the harness as `kidiom validate` does ---------------------------------------------------

def run_harness(*args, env=None, limit=120):
    """`python -m kernels.harness ARGS`, its stdout read to end of file with a deadline (a
    descendant that kept the pipe open would hold it past `limit`). (rc, JSON, seconds)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "kernels.harness", *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=err, env={**os.environ, **(env or {})})
        buf = b""
        try:
            while True:
                left = limit - (time.monotonic() - t0)
                assert left > 0, f"the harness's stdout was still open after {limit} s (read so far: {buf[-300:]!r})"
                r, _, _ = select.select([p.stdout], [], [], left)
                if r:
                    chunk = os.read(p.stdout.fileno(), 1 << 16)
                    if not chunk:
                        break
                    buf += chunk
            rc = p.wait(timeout=max(1.0, limit - (time.monotonic() - t0)))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
        seconds = time.monotonic() - t0
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    try:
        out = json.loads(buf)
    except ValueError:
        raise AssertionError(f"harness printed no JSON (rc {rc}):\n{buf[-2000:]!r}\n{stderr[-3000:]}") from None
    return rc, out, seconds


# the process census ------------------------------------------------------------------------------

def census(token):
    """Live processes (not zombies) whose name (comm) is `token`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != token:
                continue
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue
        except OSError:
            continue
        found.append(int(d.name))
    return found


class Census:
    """Watches for processes named `token` while the harness runs (proof the escape ran)."""

    def __init__(self, token):
        import threading
        self.token, self.seen, self.stop = token, set(), False
        assert not census(token), "a process of this name exists before the check"
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop:
            self.seen.update(census(self.token))
            time.sleep(0.05)

    def after(self):
        self.stop = True
        self.thread.join()
        deadline = time.monotonic() + 5     # a SIGKILLed process may take a moment to be reaped
        while census(self.token) and time.monotonic() < deadline:
            time.sleep(0.1)
        return census(self.token)


def _token():
    return "kgc" + secrets.token_hex(6)     # 15 characters: a whole process name (comm)


def _detach_expr(token, seconds=120):
    """A Python expression that double forks a setsid grandchild named `token` which sleeps
    holding every descriptor it inherited; evaluates to [] in the caller."""
    return ("(lambda os: (os.fork() == 0 and (os.setsid(), os.fork() == 0 and ("
            f"__import__('ctypes').CDLL(None).prctl(15, b'{token}', 0, 0, 0), __import__('time').sleep({seconds})), "
            "os._exit(0))) or (os.wait(), [])[1])(__import__('os'))")


NAMESPACES = [pytest.param({}, id="all-namespaces"),
              pytest.param({"KIDIOM_SANDBOX_NAMESPACES": "net,mount"}, id="no-pid-namespace"),
              pytest.param({"KIDIOM_SANDBOX_NAMESPACES": ""}, id="no-namespaces")]


# class 1: decorator arguments and parameter defaults are host code ------------------------------------

def _write_expr(path):
    """An expression that writes `path` through a shell, and raises when that is refused (so the
    test sees it ran, and where)."""
    return (f"[] if __import__('subprocess').run(['sh', '-c', 'echo escaped > {path}'], stderr=-3).returncode == 0 "
            f"else (_ for _ in ()).throw(PermissionError('escape refused: cannot write {path}'))")


@pytest.mark.parametrize("where", ["decorator", "default"])
def test_import_time_code_of_a_kernel_runs_only_in_the_sandbox(where, tmp_path):
    target = tmp_path / f"escaped-{where}.txt"
    if where == "decorator":
        edit = (DECORATOR, f"@triton.jit(do_not_specialize={_write_expr(target)})\ndef kda_decode_kernel(\n")
    else:
        edit = (LAST_PARAM, f"    BV: tl.constexpr = len({_write_expr(target)}) + 32,\n):\n")
    src = variant(tmp_path, DECODE, [edit])
    cache = {"KIDIOM_CACHE": str(tmp_path / "cache")}    # no compile result from an earlier run
    rc, out, _ = run_harness("compile", "--kernel", "kda.decode", "--source", str(src), "--timeout", "120", env=cache)
    assert not target.exists(), "compile ran the kernel's import-time code outside the sandbox"
    assert rc == 2 and out["status"] == "error" and "escape refused" in out["error"], out.get("error")
    rc, out, _ = run_harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick", "--seed", "3",
                             "--timeout", "120")
    assert not target.exists(), "check ran the kernel's import-time code outside the sandbox"
    assert rc == 1 and any("candidate source failed to load" in f and "escape refused" in f
                           for f in out["failures"]), out.get("failures") or out.get("error")
    print(f"\n-> {out['failures'][0][:200]}")


# classes 2 and 3: a Triton launcher that probes the machine and detaches a grandchild -----------------

PROBE = '''
_PROBED = []


def _probe():
    import os, socket
    seen = []

    def attempt(name, fn):
        try:
            seen.append(f"{name}={fn()!r}")
        except BaseException as e:  # noqa: BLE001
            seen.append(f"{name}:blocked({type(e).__name__})")

    def cmdline(p):
        try:
            return open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            return b""

    attempt("shm", lambda: open(SHM_FILE).read())
    attempt("shm-list", lambda: os.listdir("/dev/shm"))

    def unix():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1.0)   # a listener that never accepts fills its backlog: no hang here
        s.connect(UNIX_SOCKET)
        return "CONNECTED"
    attempt("unix", unix)
    attempt("host-visible", lambda: sum(1 for p in os.listdir("/proc") if p.isdigit() and (
        b"kernels.harness" in cmdline(p) or b"pytest" in cmdline(p))))
    attempt("max-pid", lambda: max(int(p) for p in os.listdir("/proc") if p.isdigit()))
    if not _PROBED:
        _PROBED.append(DETACH)
    raise RuntimeError("probe " + " ".join(seen))
'''


def _unix_listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(4)
    s.setblocking(False)
    return s


def _tcp_listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.setblocking(False)
    return s


def _no_connection(listener):
    """No connection is waiting (a refused one never arrives; a made one stays queued)."""
    r, _, _ = select.select([listener], [], [], 0)
    return not r


@linux_only
@pytest.mark.skipif(HAS_CUDA, reason="the probe reads the CPU worker's view")
@pytest.mark.parametrize("env", NAMESPACES)
def test_a_probing_detaching_launcher_sees_its_own_machine_and_leaves_nothing(env, tmp_path):
    token = _token()
    shm = Path("/dev/shm") / f"kidiom-test-{token}"
    shm.write_text("a file another process left in /dev/shm")
    sock_path = tmp_path / "s.sock"
    listener = _unix_listener(sock_path)
    probe = (PROBE.replace("SHM_FILE", repr(str(shm))).replace("UNIX_SOCKET", repr(str(sock_path)))
             .replace("DETACH", _detach_expr(token)))
    src = variant(tmp_path, DECODE, [("\n\ndef kda_decode(", "\n\n" + probe + "\n\ndef kda_decode("),
                                     (PUBLIC_CALL, "    _probe()\n" + PUBLIC_CALL)])
    watch = Census(token)
    try:
        rc, out, seconds = run_harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick",
                                       "--seed", "3", "--no-baseline", "--timeout", "60", env=env, limit=90)
        left = watch.after()
    finally:
        shm.unlink()
    assert watch.seen, "the grandchild never ran: the probe proves nothing"
    assert not left, f"the detached grandchild survived the check: pids {left}"
    assert seconds < 45, f"the check took {seconds:.0f} s: it waited on the grandchild's pipe"
    assert rc == 1 and out["status"] == "failed", (rc, out.get("error"))
    line = next(f for f in out["failures"] if "probe " in f)
    print(f"\n-> {line[:300]}")
    sb = out["sandbox"]
    print(f"mount: {sb['mount'][:120]}\ndescendants: {sb['descendants'][:120]}")
    mounted = sb["mount"].startswith("mount namespace")
    if mounted:
        assert _no_connection(listener), "the candidate connected to a Unix socket outside its scratch directory"
        # its private /dev/shm holds nothing, but the way to its own scratch directory where that
        # lies under /dev/shm (kidiom's scratch on a tmpfs, exec/src/scratch.rs)
        tmp = Path(tempfile.gettempdir()).resolve()
        way = tmp.relative_to("/dev/shm").parts[:1] if tmp.is_relative_to("/dev/shm") else ()
        assert "unix:blocked" in line and "shm:blocked(FileNotFoundError)" in line, line
        listed = re.search(r"shm-list=(\[[^\]]*\])", line).group(1)
        if tmp == Path("/dev/shm"):
            assert re.fullmatch(r"\['kidiom-check-[^']+'\]", listed), line
        else:
            assert listed == str(list(way)), (way, line)
    else:
        assert sb["mount"].startswith("not applied"), sb["mount"]   # said, not silently claimed
    if mounted or not sb["filesystem"].startswith("not confined"):
        assert "shm:blocked" in line, line
    listener.close()
    if sb["pid_namespace"].startswith("own PID namespace"):
        assert sb["descendants"].startswith("PID namespace"), sb["descendants"]
        if mounted:
            assert "own /proc" in sb["mount"] and "host-visible=0" in line, line
            assert int(re.search(r"max-pid=(\d+)", line).group(1)) < 100, line   # a fresh namespace's pids
    else:
        assert "subreaper" in sb["descendants"], sb["descendants"]
        if mounted:
            assert "host's /proc" in sb["mount"], sb["mount"]


@linux_only
@pytest.mark.parametrize("env", NAMESPACES[:2])
def test_a_grandchild_detached_at_import_does_not_hold_the_compile(env, tmp_path):
    """Before the sandboxed compile, this grandchild inherited the harness's stdout: the caller
    reading it to end of file hung for as long as it slept."""
    token = _token()
    src = variant(tmp_path, DECODE, [(DECORATOR, f"@triton.jit(do_not_specialize={_detach_expr(token)})\n"
                                                 "def kda_decode_kernel(\n")])
    watch = Census(token)
    rc, out, seconds = run_harness("compile", "--kernel", "kda.decode", "--source", str(src), "--timeout", "90",
                                   env=dict(env, KIDIOM_CACHE=str(tmp_path / "cache")), limit=100)
    left = watch.after()
    assert watch.seen, "the grandchild never ran"
    assert not left, f"the detached grandchild survived the compile: pids {left}"
    assert rc == 0 and out["status"] == "ok", out.get("error")
    assert seconds < 80, seconds
    assert out["instructions"]["total"] > 0 and "mount" in out["sandbox"]


# host C++: static initializers, and what the compiler may read ------------------------------------------

STATIC_INIT = r'''
#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <stdexcept>

namespace {
std::string probe_result;

const char* verdict(int rc) { return rc == 0 ? "OPEN" : "refused"; }

struct Escape {
    Escape() {
        int fd = open("@FILE@", O_CREAT | O_WRONLY | O_TRUNC, 0644);
        probe_result += std::string("open=") + (fd >= 0 ? "OPEN" : "refused") + "(" + std::to_string(errno) + ")";
        if (fd >= 0) { (void)!write(fd, "escaped", 7); close(fd); }
        int t = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(@PORT@);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        probe_result += std::string(" tcp=") + verdict(t >= 0 ? connect(t, (sockaddr*)&a, sizeof a) : -1);
        if (t >= 0) close(t);
        int u = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un ua{};
        ua.sun_family = AF_UNIX;
        std::strncpy(ua.sun_path, "@SOCK@", sizeof ua.sun_path - 1);
        probe_result += std::string(" unix=") + verdict(u >= 0 ? connect(u, (sockaddr*)&ua, sizeof ua) : -1);
        if (u >= 0) close(u);
        if (fork() == 0) {                    // a detached grandchild that sleeps
            setsid();
            if (fork() == 0) {
                prctl(PR_SET_NAME, "@TOKEN@", 0, 0, 0);
                sleep(120);
            }
            _exit(0);
        }
    }
} escape_;
}  // namespace
'''


@linux_only
def test_a_host_modules_static_initializer_is_confined(tmp_path):
    token = _token()
    target = tmp_path / "escaped-static-init.txt"
    sock_path = tmp_path / "s.sock"
    unix, tcp = _unix_listener(sock_path), _tcp_listener()
    init = (STATIC_INIT.replace("@FILE@", str(target)).replace("@PORT@", str(tcp.getsockname()[1]))
            .replace("@SOCK@", str(sock_path)).replace("@TOKEN@", token))
    text = KV.read_text()
    anchor = "#include <vector>\n"
    module = "PYBIND11_MODULE(kv_transfer, m) {\n"
    assert text.count(anchor) == 1 and text.count(module) == 1
    # the module's import reports what its static initializer saw (an ImportError the check names),
    # after a second in which the census sees the grandchild
    text = text.replace(anchor, anchor + init).replace(module, module + "    sleep(1);\n    throw std::runtime_error("
                                                                          "\"probe \" + probe_result);\n")
    src = tmp_path / "kv_transfer.cpp"
    src.write_text(text)
    watch = Census(token)
    rc, out, seconds = run_harness("check", "--kernel", "kv_transfer", "--source", str(src), "--quick", "--no-tsan",
                                   "--seed", "3", "--timeout", "300", env={"KIDIOM_CACHE": str(tmp_path / "cache")},
                                   limit=330)
    left = watch.after()
    assert watch.seen, "the static initializer's grandchild never ran"
    assert not left, f"the static initializer's grandchild survived the check: pids {left}"
    assert not target.exists(), "the static initializer wrote outside the sandbox"
    assert _no_connection(tcp), "the static initializer connected to 127.0.0.1"
    assert _no_connection(unix), "the static initializer connected to a Unix socket outside its scratch directory"
    unix.close()
    tcp.close()
    assert rc == 1 and out["status"] == "failed", (rc, out.get("error"))
    line = next(f for f in out["failures"] if "probe " in f)
    print(f"\n-> {line[:300]}")
    assert "open=refused" in line and "tcp=refused" in line and "unix=refused" in line, line


SECRET_INCLUDE = '#include "@PATH@"\n'


@pytest.mark.parametrize("env", [pytest.param({}, id="confined"),
                                 pytest.param({"KIDIOM_SANDBOX_NAMESPACES": "", "KIDIOM_SANDBOX_LANDLOCK": "0"},
                                              id="unconfined")])
@pytest.mark.parametrize("what", ["secret", "reference", "reference-relative"])
def test_an_include_outside_the_module_is_neither_read_nor_shown(what, env, tmp_path):
    token = "kidiom_secret_" + secrets.token_hex(8)
    secret = tmp_path / "secret.h"
    secret.write_text(f"{token}\n")   # an identifier: a compiler that read it would name it
    ref = ROOT / "kernels" / "kv_transfer" / "reference.py"
    path = {"secret": str(secret), "reference": str(ref),
            "reference-relative": "../../kernels/kv_transfer/reference.py"}[what]
    needles = [token] if what == "secret" else ["numpy reference of the kv_transfer kernels", "np.unique"]
    text = KV.read_text()
    anchor = "#include <cstddef>\n"
    # inside a function body too, where a read file's tokens would be compiled and quoted
    text = text.replace(anchor, SECRET_INCLUDE.replace("@PATH@", path) + anchor).replace(
        "PYBIND11_MODULE(kv_transfer, m) {\n",
        "PYBIND11_MODULE(kv_transfer, m) {\n    int leaked =\n" + SECRET_INCLUDE.replace("@PATH@", path) + ";\n")
    src = tmp_path / "kv_transfer.cpp"
    src.write_text(text)
    e = dict(env, KIDIOM_CACHE=str(tmp_path / "cache"))
    for command in (["compile"], ["check", "--quick", "--no-tsan"]):
        rc, out, _ = run_harness(*command, "--kernel", "kv_transfer", "--source", str(src), "--timeout", "200",
                                 env=e, limit=220)
        raw = json.dumps(out)
        assert rc == 2 and out["status"] == "error" and "BuildError" in out["error"], (command, out.get("error"))
        for n in needles:
            assert n not in raw, f"{command[0]}: the build log shows the included file's text ({n!r})"
        if not env:
            assert "No such file or directory" in out["error"] or "Permission denied" in out["error"], out["error"]
    print(f"\n-> {out['error'][:300]}")


# the pieces, without a harness run ----------------------------------------------------------------------

def test_the_build_log_keeps_only_diagnostics_located_in_the_module():
    from kernels.harness.host.build import build_log
    src_dir = "/tmp/kidiom-build-x/build/src"
    log = "\n".join([
        f"{src_dir}/kv_transfer.cpp:13:10: fatal error: /etc/hostname: No such file or directory",
        "compilation terminated.",
        "/etc/hostname:1:1: error: 'secret_host_name' does not name a type",
        f"In file included from {src_dir}/kv_transfer.cpp:13:",
        f"{src_dir}/kv_transfer.cpp:99:5: error: " + "x" * 1000,
        "    1 | secret_host_name",
        "      | ^~~~~~~~~~~~~~~~",
    ])
    shown = build_log(log, {"kv_transfer.cpp": b""}, src_dir)
    assert "secret_host_name" not in shown
    assert shown.splitlines()[0] == "kv_transfer.cpp:13:10: fatal error: /etc/hostname: No such file or directory"
    assert all(len(line) < 400 for line in shown.splitlines())
    assert "5 other lines" in shown.splitlines()[-1]
    hidden = build_log(log, {"kv_transfer.cpp": b""}, src_dir, messages=False)
    assert "/etc/hostname" not in hidden and "message hidden" in hidden
    many = "\n".join(f"{src_dir}/kv_transfer.cpp:{i}:1: error: e{i}" for i in range(100))
    assert len(build_log(many, {"kv_transfer.cpp": b""}, src_dir).splitlines()) == 21


@linux_only
def test_orphan_reaping_spares_the_harness_own_children():
    """reap_orphans kills adopted strangers only: a tool the harness runs (its session) and a
    registered sandboxed process live on."""
    from kernels.harness.sandbox import process as sandbox
    assert sandbox.become_subreaper()
    try:
        _reap_check(sandbox)
    finally:
        sandbox.become_subreaper(False)   # pytest goes back to leaving orphans to init


def _reap_check(sandbox):
    tool = subprocess.Popen(["sleep", "30"])                         # the harness's session
    worker = sandbox.spawn(["sleep", "30"], stdin=subprocess.DEVNULL)  # registered
    token = _token()
    # an orphan: a setsid grandchild whose parent exits at once, adopted by this subreaper
    subprocess.run([sys.executable, "-c", f"import os; ({_detach_expr(token, 30)})"], check=True)
    deadline = time.monotonic() + 5
    while not census(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    [orphan] = census(token)
    assert sandbox._stat(orphan)[0] == os.getpid(), "adopted by this process"
    try:
        assert sandbox.reap_orphans() >= 1
        assert not census(token), "the orphan was killed"
        assert tool.poll() is None and worker.poll() is None, "the harness's own children live on"
    finally:
        tool.kill()
        tool.wait()
        sandbox.kill_group(worker)


def test_a_compile_result_is_cached_by_the_harness_only(tmp_path):
    """Each compile has a fresh Triton cache (one shared between candidates could be poisoned by
    one for the next); the harness caches the sandboxed result of exactly these bytes instead,
    and a damaged entry is compiled again."""
    env = {"KIDIOM_CACHE": str(tmp_path / "cache")}
    src = variant(tmp_path, DECODE, [])
    rc, first, _ = run_harness("compile", "--kernel", "kda.decode", "--source", str(src), env=env)
    assert rc == 0 and isinstance(first["sandbox"], dict), first.get("error")
    rc, again, _ = run_harness("compile", "--kernel", "kda.decode", "--source", str(src), env=env)
    assert rc == 0 and again["sandbox"] == "cached (compiled in the sandbox)", again.get("sandbox")
    assert again["instructions"] == first["instructions"] and again["resources"] == first["resources"]
    [entry] = (tmp_path / "cache" / "aot").iterdir()
    (entry / "kernel.cubin").write_bytes(b"")
    rc, third, _ = run_harness("compile", "--kernel", "kda.decode", "--source", str(src), env=env)
    assert rc == 0 and isinstance(third["sandbox"], dict), "a damaged entry is compiled again"


@pytest.mark.skipif(HAS_CUDA, reason="the CPU mode of the bench worker (its plumbing)")
def test_the_bench_times_in_a_sandboxed_worker(tmp_path):
    """The GPU bench's timed runs, in their CPU mode: the variants load in a sandboxed worker
    (never in this process), the raw times come back; a variant that fails to load says so, and
    its import-time write is blocked."""
    from kernels.harness.triton import bench
    from kernels.harness.manifest import find_manifest
    m = find_manifest("kda.decode")
    shape = dict(m.shapes["cpu"][0])
    times, device, report = bench.time_in_sandbox(m, {"baseline": None, "candidate": None}, None, shape, 2, 1, 3,
                                                  time.monotonic() + 120, device="cpu")
    assert sorted(times) == ["baseline", "candidate"] and all(len(t) == 3 and min(t) > 0 for t in times.values())
    assert device.startswith("cpu") and report["mount"].startswith(("mount namespace", "not applied"))
    target = tmp_path / "escaped-bench.txt"
    bad = variant(tmp_path, DECODE, [(DECORATOR, f"@triton.jit(do_not_specialize={_write_expr(target)})\n"
                                                 "def kda_decode_kernel(\n")])
    with pytest.raises(bench.BenchFailed, match="escape refused"):
        bench.time_in_sandbox(m, {"baseline": None, "candidate": bad}, None, shape, 1, 0, 1, time.monotonic() + 120,
                              device="cpu")
    assert not target.exists(), "the bench imported the candidate outside the sandbox"


@linux_only
def test_a_harness_killed_by_its_caller_takes_its_workers_with_it(tmp_path):
    """`kidiom validate` kills a harness at its own deadline; the workers (own sessions, so not in
    the harness's process group) die with it: PR_SET_PDEATHSIG, passed on by unshare."""
    token = _token()
    hang = (f"    __import__('ctypes').CDLL(None).prctl(15, b'{token}', 0, 0, 0)\n"
            "    while True:\n        pass\n")
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, hang + PUBLIC_CALL)])
    p = subprocess.Popen([sys.executable, "-m", "kernels.harness", "check", "--kernel", "kda.decode", "--source",
                          str(src), "--quick", "--no-baseline", "--timeout", "120"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not census(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert census(token), "the candidate never ran"
        p.kill()
        p.wait()
        deadline = time.monotonic() + 10
        while census(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not census(token), "the candidate's worker outlived the harness that started it"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _an_elf():
    """Bytes of an ELF file (the loader's and the policy's test for a library or a program)."""
    return Path("/bin/true").read_bytes()[:1 << 20]


@pytest.mark.skipif(HAS_CUDA, reason="the CPU check's sandbox")
def test_every_path_the_environment_passes_gives_files_never_directories(tmp_path):
    # round four, class 3: each variable passed through to a worker that names a place
    # (TRITON_LIBCUDA_PATH, TRITON_PTXAS_PATH, CUDA_HOME, CUDA_PATH) with a secret planted there.
    # Short names: the check keeps the start of an exception's message.
    root = Path(tempfile.mkdtemp(prefix="kidiom-envpaths-", dir="/var/tmp"))   # not /tmp: denied anyway
    try:
        places = {"L": root / "libcuda", "P": root / "ptxasdir", "H": root / "cuda", "H64": root / "cuda" / "lib64",
                  "Hb": root / "cuda" / "bin", "C": root / "cudapath"}
        for d in places.values():
            d.mkdir(parents=True, exist_ok=True)
        whats = []
        for name, d in places.items():
            (d / "secret.txt").write_text(f"envpath-secret-{name}")
            whats += [(f"{name}-s", str(d / "secret.txt")), (f"{name}-d", str(d))]
        needed = {"L-lib": places["L"] / "libcuda.so.1", "P-prog": places["P"] / "ptxas",
                  "H-lib": places["H64"] / "libcudart.so.12", "H-prog": places["Hb"] / "nvcc"}
        for f in needed.values():
            f.write_bytes(_an_elf())
        (places["Hb"] / "notes.so").write_text("envpath-secret-named-like-a-library")
        whats += [(k, str(f)) for k, f in needed.items()] + [("H-txt", str(places["Hb"] / "notes.so"))]
        probe = ("def _probe():\n    seen = []\n    for what, path in WHATS:\n        try:\n"
                 "            os = __import__('os')\n"
                 "            data = os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(64)\n"
                 "            seen.append(f'{what}:O' + (repr(data) if 'lib' not in what and 'prog' not in what else ''))\n"
                 "        except BaseException:\n            seen.append(f'{what}:x')\n"
                 "    raise RuntimeError('probe ' + ' '.join(seen))\n\n\n")
        src = variant(tmp_path, DECODE, [(PUBLIC_CALL, "    _probe()\n" + PUBLIC_CALL),
                                         ("\n\ndef kda_decode(", "\n\n" + probe.replace("WHATS", repr(whats))
                                          + "def kda_decode(")])
        env = {"TRITON_LIBCUDA_PATH": str(places["L"]), "TRITON_PTXAS_PATH": str(needed["P-prog"]),
               "CUDA_HOME": str(places["H"]), "CUDA_PATH": str(places["C"])}
        rc, out, _ = run_harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick", "--no-baseline",
                                 "--timeout", "120", env=env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert "envpath-secret" not in json.dumps(out), "a file of a directory the environment names reached the output"
    line = next((f for c in out.get("cases", []) for f in c.get("failures", []) if "probe " in f), None)
    assert line, out
    if not out["sandbox"]["filesystem"].startswith("not confined"):
        for name in places:
            assert f" {name}-s:x" in line and f" {name}-d:x" in line, line
        assert " H-txt:x" in line, line
        for what in needed:
            assert f" {what}:O" in line, f"what the worker may need there is its to read: {line}"


@pytest.mark.skipif(HAS_CUDA, reason="the CPU check's sandbox")
def test_a_library_path_gives_the_worker_its_libraries_never_the_other_files_there(tmp_path):
    # round four, class 3: a directory on LD_LIBRARY_PATH was bound into the worker's root whole,
    # and a file someone put there reached the evidence. Now its shared libraries only, as files.
    libs = Path(tempfile.mkdtemp(prefix="kidiom-libdir-", dir="/var/tmp"))   # not /tmp: denied anyway
    try:
        (libs / "secret.txt").write_text("libdir-secret")
        (libs / "secret.so").write_text("libdir-secret, named like a library")
        real = next(p for p in Path(sys.base_prefix, "lib").glob("libpython3*.so*") if p.is_file()) \
            if any(Path(sys.base_prefix, "lib").glob("libpython3*.so*")) else None
        lib = libs / "libkidiomtest.so.1"
        lib.write_bytes((real or Path("/bin/true")).read_bytes()[:1 << 20])   # an ELF file either way
        probe = ("def _probe():\n    seen = []\n    for what, path in WHATS:\n        try:\n"
                 "            data = open(path, 'rb').read(64) if path.endswith(('.txt', '.so', '.1')) else\\\n"
                 "                __import__('os').listdir(path)\n            seen.append(f'{what}:OPEN:{data!r}')\n"
                 "        except BaseException:\n            seen.append(f'{what}:blocked')\n"
                 "    raise RuntimeError('probe ' + ' '.join(seen))\n\n\n")
        whats = [("secret", str(libs / "secret.txt")), ("non-library", str(libs / "secret.so")),
                 ("listing", str(libs)), ("library", str(lib))]
        src = variant(tmp_path, DECODE, [(PUBLIC_CALL, "    _probe()\n" + PUBLIC_CALL),
                                         ("\n\ndef kda_decode(", "\n\n" + probe.replace("WHATS", repr(whats))
                                          + "def kda_decode(")])
        env = {"LD_LIBRARY_PATH": f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")}
        rc, out, _ = run_harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick", "--no-baseline",
                                 "--timeout", "120", env=env)
    finally:
        for p in libs.iterdir():
            p.unlink()
        libs.rmdir()
    assert "libdir-secret" not in json.dumps(out), "a file of the library directory reached the output"
    line = next((f for c in out.get("cases", []) for f in c.get("failures", []) if "probe " in f), None)
    assert line, out
    if not out["sandbox"]["filesystem"].startswith("not confined"):
        for what in ("secret", "non-library", "listing"):
            assert f"{what}:blocked" in line, line
        assert "library:OPEN" in line, f"the library itself is the worker's to load: {line}"
