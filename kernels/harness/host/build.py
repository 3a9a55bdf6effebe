"""Building host C++ kernels (`language = "cpp"`): a pybind11 module per source file, cached.

The system C++ compiler (`$CXX`, else `c++`, else `g++`) builds `source` into the extension
module named by the manifest's `entry`, with pybind11's and Python's headers and the
interpreter's extension suffix. Builds are cached in the `host-build/<kernel>/` content cache
(cachedir.py) by the sha256 of the module's sources, flags,
compiler version, Python and pybind11 versions; a build lands in the cache by one atomic
directory rename, so concurrent builds never see half a file.

The compiler reads candidate sources, whose preprocessor can name any file (`#include
"/etc/hostname"`, `#include "../../kernels/kv_transfer/reference.py"`), so it runs in the sandbox
(sandbox.run_job) with a policy narrower than the workers' (sandbox.build_policy): it reads the
module's own C/C++ files, copied into the scratch directory (never the module directory's other
files: the reference, the manifest), and the toolchain (system directories, the few files of
/etc the loader and linker read, Python's and pybind11's include directories); it writes only
the scratch directory's out/ and work/. The log shown (in BuildError and `build.txt`) holds only
the diagnostics located in the module's own sources, one line each, capped, printed without
source lines (`-fno-diagnostics-show-caret`): never the text of a file the candidate pulled in.

Also: the static instruction mix of the module's own functions, from `objdump -d`.
"""
import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from functools import lru_cache
from pathlib import Path

__all__ = ["BuildError", "build", "compiler", "compiler_version", "pybind11_version", "tsan_runtime",
           "instruction_mix", "source_functions", "base_name", "build_log", "module_sources", "include_dirs",
           "FLAGS", "TSAN_FLAGS"]

FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"]
# ThreadSanitizer build: -O1 -g keeps the reports' stacks readable.
TSAN_FLAGS = ["-O1", "-g", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-fsanitize=thread"]


# Bumped when what a cache entry means changes (1: built in the sandbox, from the module's sources).
BUILD_VERSION = 1
SOURCE_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".h++", ".inc", ".inl",
                   ".ipp", ".tcc"}
LOG_LINES, LOG_LINE_CHARS = 20, 300     # the build log shown: diagnostics in the module's sources only
AS_LIMIT = 8 << 30                      # address space of the compiler


class BuildError(Exception):
    """The compiler rejected the source (message: the command and the log's tail)."""


@lru_cache(maxsize=None)
def compiler():
    for c in (os.environ.get("CXX"), "c++", "g++"):
        if c and shutil.which(c):
            return shutil.which(c)
    raise FileNotFoundError("no C++ compiler: set $CXX or install c++/g++")


@lru_cache(maxsize=None)
def compiler_version():
    r = subprocess.run([compiler(), "--version"], capture_output=True, text=True, timeout=30)
    return (r.stdout.splitlines() or ["unknown"])[0].strip()


@lru_cache(maxsize=None)
def pybind11_version():
    import pybind11
    return pybind11.__version__


@lru_cache(maxsize=None)
def include_dirs():
    """Python's and pybind11's include directories (what `python -m pybind11 --includes` names)."""
    try:
        import pybind11
    except ImportError as e:
        raise FileNotFoundError(f"pybind11 is not importable ({e}) (install kernels/requirements.txt)") from None
    paths = sysconfig.get_paths()
    dirs = []
    for d in (paths.get("include"), paths.get("platinclude"), pybind11.get_include()):
        if d and d not in dirs:
            dirs.append(d)
    return tuple(dirs)


def _includes():
    return [f"-I{d}" for d in include_dirs()]


def _diagnostic_flags():
    """No source lines, no colours, few errors: the log is diagnostics, one line each."""
    if "clang" in compiler_version().lower():
        return ["-fno-diagnostics-show-caret", "-fno-color-diagnostics", "-ferror-limit=20"]
    return ["-fno-diagnostics-show-caret", "-fdiagnostics-color=never", "-fmax-errors=20"]


def module_sources(manifest, source):
    """{path relative to the module: bytes} of what the build may read: the module directory's own
    C/C++ files (by suffix; never its reference, manifest or anything else), with `source` (the
    candidate) in place of the manifest's source."""
    base = manifest.source_path.parent
    files = {}
    for p in sorted(base.rglob("*")):
        if p.suffix.lower() in SOURCE_SUFFIXES and p.is_file() and not p.is_symlink() \
                and "__pycache__" not in p.parts:
            files[p.relative_to(base).as_posix()] = p.read_bytes()
    files.pop(manifest.source_path.relative_to(base).as_posix(), None)
    files[Path(source).name] = Path(source).read_bytes()
    return files


_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note): "
                   r"(?P<msg>.*)$")


def build_log(text, sources, src_dir, messages=True):
    """The compiler's output as shown: the diagnostics located in the module's own sources (paths
    relative to the module), one line each, at most LOG_LINES lines of LOG_LINE_CHARS characters,
    and how many other lines there were. Nothing else: no source line, no include chain, no
    diagnostic located in another file (whose text it could quote). `messages` False (a build
    that ran unconfined, so a message of the source's own, a static_assert's text, could quote a
    file it pulled in): locations and kinds only."""
    prefix = str(src_dir).rstrip("/") + "/"
    shown, other = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _DIAG.match(line)
        f = m["file"] if m else ""
        rel = f[len(prefix):] if f.startswith(prefix) else f
        if not m or rel not in sources or len(shown) >= LOG_LINES:
            other += 1
            continue
        msg = m["msg"][:LOG_LINE_CHARS] + ("..." if len(m["msg"]) > LOG_LINE_CHARS else "") if messages else \
            "(message hidden: the build was not confined on this machine)"
        shown.append(f"{rel}:{m['line']}:{m['col'] or 0}: {m['kind']}: {msg}")
    if other:
        shown.append(f"({other} other lines of the compiler's output not shown: only diagnostics located in the "
                     f"module's own sources are)")
    return "\n".join(shown)


def ext_suffix():
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def cache_root():
    from ..cachedir import content_cache
    return content_cache("host-build")


@lru_cache(maxsize=None)
def tsan_runtime():
    """(path of the toolchain's libtsan.so, None) or (None, why not)."""
    try:
        r = subprocess.run([compiler(), "-print-file-name=libtsan.so"], capture_output=True, text=True, timeout=30)
    except Exception as e:  # noqa: BLE001 - any failure means "no TSan"
        return None, f"cannot ask the compiler for libtsan.so: {e}"
    p = r.stdout.strip()
    if r.returncode != 0 or not p or not os.path.isabs(p) or not os.path.exists(p):
        return None, f"{os.path.basename(compiler())} has no libtsan.so (-print-file-name gave {p!r})"
    return os.path.realpath(p), None


def build(manifest, source=None, variant="release", deadline=None):
    """Build (or find in the cache) the module of `source` (default: the manifest's), in the
    sandbox, until `deadline` (time.monotonic(); default 600 s from now).

    Returns (path of the .so, info {compiler, flags, cached, so_bytes, build_seconds, sandbox}).
    Raises BuildError with the compiler's diagnostics (build_log) when compilation fails or
    times out.
    """
    from .. import sandbox
    src = Path(source) if source else manifest.source_path
    if not src.exists():
        raise FileNotFoundError(f"source file {src} does not exist")
    sources = module_sources(manifest, src)
    flags = list(TSAN_FLAGS if variant == "tsan" else FLAGS)
    diag = _diagnostic_flags()
    key_parts = [f"build {BUILD_VERSION}".encode(), "\0".join(flags + diag).encode(), compiler_version().encode(),
                 platform.python_version().encode(), pybind11_version().encode(), manifest.entry.encode(),
                 ext_suffix().encode(), src.name.encode()]
    for name in sorted(sources):
        key_parts += [name.encode(), sources[name]]
    key = hashlib.sha256(b"\0\0".join(key_parts)).hexdigest()
    root = cache_root() / manifest.name
    final_dir = root / f"{key[:24]}-{variant}"
    so_name = manifest.entry + ext_suffix()
    so = final_dir / so_name
    info = {"compiler": f"{compiler()} ({compiler_version()})", "flags": flags, "cached": True}
    if so.exists():
        info.update(so_bytes=so.stat().st_size, build_seconds=0.0, sandbox="cached (built in the sandbox)")
        return so, info
    # one build per key at a time: a validation starts its compile and its check together, and
    # both need the same modules; the second waits for the first's and reads it from the cache
    with _key_lock(root, final_dir.name, deadline or time.monotonic() + 600):
        if so.exists():
            info.update(so_bytes=so.stat().st_size, build_seconds=0.0, sandbox="cached (built in the sandbox)")
            return so, info
        return _build_unlocked(manifest, src, sources, flags, diag, root, final_dir, so_name, so, info, deadline)


@contextlib.contextmanager
def _key_lock(root, name, deadline):
    """An exclusive flock on `root/name.lock`, waited for until `deadline`; on a cache that cannot
    hold a lock file (read-only, full) the build goes on unlocked (at worst it is done twice)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BuildError(f"another build of the same module held its lock past the deadline ({name})") \
                        from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)   # releases the lock


def _build_unlocked(manifest, src, sources, flags, diag, root, final_dir, so_name, so, info, deadline):
    from .. import sandbox
    job_root = Path(tempfile.mkdtemp(prefix="kidiom-build-"))
    try:
        scratch = job_root / "build"
        scratch.mkdir(mode=0o700)
        src_dir = scratch / "src"
        for name, data in sources.items():
            (src_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (src_dir / name).write_bytes(data)
        out_dir, _ = sandbox.writable_dirs(scratch)
        cmd = [compiler(), *flags, *diag, *_includes(), str(src_dir / src.name), "-o", str(out_dir / so_name)]
        policy = sandbox.build_policy(scratch, include_dirs(), compiler())
        t0 = time.perf_counter()
        try:
            job = sandbox.run_job(scratch, {"exec": cmd}, deadline or time.monotonic() + 600, "the host C++ build",
                                  address_space=AS_LIMIT, policy=policy,
                                  python_note="the C++ compiler, executed by the trampoline")
        except sandbox.JobTimeout as e:
            raise BuildError(f"{os.path.basename(compiler())} on {src}: {e}") from None
        seconds = time.perf_counter() - t0
        try:
            log = (scratch / "stderr.txt").read_text(errors="replace") + (scratch / "stdout.txt").read_text(
                errors="replace")
        except OSError:
            log = ""
        sb = job["sandbox"]
        confined = str(sb.get("mount", "")).startswith("mount namespace") or \
            not str(sb.get("filesystem", "not confined")).startswith("not confined")
        shown = build_log(log, sources, src_dir, messages=confined)
        try:
            data = sandbox.read_file(scratch, f"out/{so_name}", limit=sandbox.FSIZE_LIMIT, binary=True)
        except (OSError, ValueError):
            data = None
        if job["rc"] != 0 or not data:
            death = sandbox.death_text(job["rc"], job["exit"]) or "wrote no module"
            raise BuildError(f"{os.path.basename(compiler())} {death} on {src}:\n{shown}")
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
        try:
            (tmp / so_name).write_bytes(data)
            os.chmod(tmp / so_name, 0o755)
            (tmp / "build.txt").write_text(" ".join(cmd) + "\n" + shown + "\n")
            try:
                os.rename(tmp, final_dir)          # atomic: the directory appears complete or not at all
            except OSError:
                if not so.exists():                # not "another build won the race": an entry without
                    shutil.rmtree(final_dir, ignore_errors=True)   # its module, replaced under the key's lock
                    os.rename(tmp, final_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        info.update(cached=False, so_bytes=so.stat().st_size, build_seconds=round(seconds, 3), sandbox=job["sandbox"])
        return so, info
    finally:
        shutil.rmtree(job_root, ignore_errors=True)


# objdump: the instruction mix of the module's own functions --------------------------------------

_FUNC_DEF = re.compile(r"^[A-Za-z_][\w:<>,\s\*&]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:const\s*)?\{", re.M)
_KEYWORDS = {"if", "for", "while", "switch", "return", "catch", "sizeof"}


def source_functions(text):
    """Names of the functions defined in a C++ source (one-line signatures), not keywords."""
    return {m.group(1) for m in _FUNC_DEF.finditer(text)} - _KEYWORDS


def base_name(demangled):
    """`(anonymous namespace)::check_page_ids(BufferView const&, ...) [clone .cold]` -> check_page_ids."""
    name = re.sub(r"\s*\[clone [^\]]*\]", "", demangled)
    name = name.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):       # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    return name[:cut].strip()


_PREFIXES = {"rep", "repz", "repnz", "repe", "repne", "lock", "notrack", "bnd", "data16", "cs", "ds", "addr32"}
_JUMPS = re.compile(r"^(j[a-z]+|ret[a-z]*|loop[a-z]*|jmp[a-z]*)$")
_INT = re.compile(r"^(add|sub|imul|mul|div|idiv|inc|dec|neg|and|or|xor|not|shl|shr|sar|sal|rol|ror|rcl|rcr|cmp|"
                  r"test|set[a-z]+|adc|sbb|bt[a-z]*|bsf|bsr|lzcnt|tzcnt|popcnt|andn|shlx|shrx|sarx|mulx|"
                  r"adcx|adox|bextr|blsi|blsmsk|blsr|bzhi|pdep|pext|rorx|xadd|cmpxchg[a-z0-9]*)[bwlq]?$")
_MOVE = re.compile(r"^(mov[a-z]*|lea[a-z]*|push[a-z]*|pop[a-z]*|cmov[a-z]+|xchg[a-z]*|c[lw]tq|cqto|cltd|cwtl|"
                   r"cbtw|bswap|movbe)$")
_STRING = re.compile(r"^(movs[bwlq]?|stos[bwlq]?|lods[bwlq]?|scas[bwlq]?|cmps[bwlq]?)$")


def classify(mnemonic, operands):
    """Class of one x86-64 instruction (AT&T syntax, as objdump prints it)."""
    prefix, _, rest = mnemonic.rpartition(" ")
    m = rest
    if "lock" in prefix.split():
        return "atomic"
    if prefix.startswith(("rep", "repz", "repnz", "repe", "repne")) and _STRING.match(m):
        return "string"
    vec = re.search(r"%[xyz]mm\d+|%k[0-7]\b", operands) is not None
    if m in ("nop", "nopw", "nopl", "endbr64", "int3", "ud2", "hlt", "pause") or m.startswith("prefetch"):
        return "nop" if not m.startswith("prefetch") else "other"
    if m.startswith("call"):
        return "call"
    if _JUMPS.match(m):
        return "control"
    scalar_fp = re.search(r"(ss|sd)$", m) and not re.match(r"v?p", m) and "%ymm" not in operands \
        and "%zmm" not in operands and not _STRING.match(m)
    if vec or m.startswith("v"):
        return "fp" if scalar_fp else "vector"
    if _STRING.match(m):
        return "string"
    if _MOVE.match(m):
        return "move"
    if _INT.match(m):
        return "int"
    if re.match(r"p[a-z]", m):       # MMX/SSE integer ops on a register named in a memory operand
        return "vector"
    if m.startswith("f"):
        return "fp"
    return "other"


def instruction_mix(so_path, source_text):
    """{total, by_class, by_opcode, functions {name: count}} over the functions the source defines,
    or (None, why not)."""
    objdump = shutil.which("objdump")
    if not objdump:
        return None, "objdump not found: no instruction mix"
    r = subprocess.run([objdump, "-d", "-C", "-w", "--no-show-raw-insn", "-j", ".text", str(so_path)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, f"objdump failed: {r.stderr.strip()[-300:]}"
    own = source_functions(source_text)
    head = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    ins = re.compile(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$")
    current = None
    by_class, by_opcode, per_func = Counter(), Counter(), Counter()
    for line in r.stdout.splitlines():
        h = head.match(line)
        if h:
            base = base_name(h.group(1))
            current = base if base in own else None
            continue
        if current is None:
            continue
        mm = ins.match(line)
        if not mm or mm.group(1).startswith("("):
            continue
        mnemonic, rest = mm.group(1), mm.group(2)
        while mnemonic.split()[-1] in _PREFIXES and rest:   # "rep stos", "data16 cs nopw", "lock xadd"
            parts = rest.split(None, 1)
            mnemonic = f"{mnemonic} {parts[0]}"
            rest = parts[1] if len(parts) > 1 else ""
        rest = rest.split("#")[0]
        cls = classify(mnemonic, rest)
        by_class[cls] += 1
        by_opcode[mnemonic] += 1
        per_func[current] += 1
    if not per_func:
        return None, "objdump found none of the source's functions in .text (all inlined?)"
    return {"total": sum(by_class.values()), "by_class": dict(sorted(by_class.items())),
            "by_opcode": dict(by_opcode.most_common()), "functions": dict(sorted(per_func.items()))}, None
