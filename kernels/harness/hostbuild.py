"""Building host C++ kernels (`language = "cpp"`): a pybind11 module per source file, cached.

The system C++ compiler (`$CXX`, else `c++`, else `g++`) builds `source` into the extension
module named by the manifest's `entry`, with pybind11's and Python's headers
(`python -m pybind11 --includes`) and the interpreter's extension suffix. Builds are cached
under `$KIDIOM_CACHE/host-build/<kernel>/` (else `~/.cache/kidiom/host-build/<kernel>/`) by the
sha256 of the source text, flags, compiler version, Python and pybind11 versions; a build
lands in the cache by one atomic directory rename, so concurrent builds never see half a file.

Also: the static instruction mix of the module's own functions, from `objdump -d`.
"""
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
           "instruction_mix", "source_functions", "base_name", "FLAGS", "TSAN_FLAGS"]

FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"]
# ThreadSanitizer build: -O1 -g keeps the reports' stacks readable.
TSAN_FLAGS = ["-O1", "-g", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-fsanitize=thread"]


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
def _includes():
    r = subprocess.run([sys.executable, "-m", "pybind11", "--includes"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise FileNotFoundError(f"python -m pybind11 --includes failed: {r.stderr.strip()[-500:]} "
                                "(install kernels/requirements.txt)")
    return r.stdout.split()


def ext_suffix():
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def cache_root():
    base = os.environ.get("KIDIOM_CACHE")
    return Path(base) / "host-build" if base else Path.home() / ".cache" / "kidiom" / "host-build"


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


def build(manifest, source=None, variant="release"):
    """Build (or find in the cache) the module of `source` (default: the manifest's).

    Returns (path of the .so, info {compiler, flags, cached, so_bytes, build_seconds}).
    Raises BuildError with the compiler's log when compilation fails.
    """
    src = Path(source) if source else manifest.source_path
    if not src.exists():
        raise FileNotFoundError(f"source file {src} does not exist")
    text = src.read_bytes()
    flags = list(TSAN_FLAGS if variant == "tsan" else FLAGS)
    key_parts = [text, "\0".join(flags).encode(), compiler_version().encode(), platform.python_version().encode(),
                 pybind11_version().encode(), manifest.entry.encode(), ext_suffix().encode()]
    key = hashlib.sha256(b"\0\0".join(key_parts)).hexdigest()
    root = cache_root() / manifest.name
    final_dir = root / f"{key[:24]}-{variant}"
    so_name = manifest.entry + ext_suffix()
    so = final_dir / so_name
    info = {"compiler": f"{compiler()} ({compiler_version()})", "flags": flags, "cached": True}
    if so.exists():
        info.update(so_bytes=so.stat().st_size, build_seconds=0.0)
        return so, info
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        shutil.copyfile(src, tmp / src.name)
        cmd = [compiler(), *flags, *_includes(), str(tmp / src.name), "-o", str(tmp / so_name)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
        seconds = time.perf_counter() - t0
        if r.returncode != 0 or not (tmp / so_name).exists():
            log = (r.stderr + r.stdout).strip()
            raise BuildError(f"{os.path.basename(compiler())} failed (exit {r.returncode}) on {src}:\n{log[-3000:]}")
        (tmp / "build.txt").write_text(" ".join(cmd) + "\n" + (r.stderr + r.stdout)[-3000:])
        try:
            os.rename(tmp, final_dir)          # atomic: the directory appears complete or not at all
        except OSError:
            if not so.exists():                # not "another build won the race"
                raise
        info.update(cached=False, so_bytes=so.stat().st_size, build_seconds=round(seconds, 3))
        return so, info
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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
