"""`sweep`: many variants of one Triton kernel, each measured for error and static cost.

A per-site rewrite search (kidiom's `validator::search`) writes one source file per variant (the
kernel with a chosen subset of its sites rewritten) and asks for, per variant:

- `curve`: the error-versus-length curve at the manifest's CPU lengths (`[curve] cpu_T`), under
  the TF32-faithful interpreter (`interp.py`; tf32x3 and bf16x3/x6 emulated as Triton lowers
  them), one seed, in a sandboxed worker of its own (`check.error_curve`);
- `static`: the ahead-of-time sm_90 compile's figures (`aot.py`): SASS instructions, local-memory
  and tensor-core instructions, registers, spill stores and loads. Compiling imports the
  variant, so each compile's import, launcher call and Triton compile run in a sandboxed worker
  of its own (aot.compile_sandboxed, with the sweep's deadline on its process group); ptxas and
  cuobjdump then read its artifacts here.

Results are cached by the variant's bytes, the kernel, the seed and lengths, Triton's version and
everything else a measurement reads (`_context`: the harness's own sources, the manifest, the
other sources beside the kernel, the reference's module), in `$KIDIOM_CACHE/sweep/`, else
`~/.cache/kidiom/sweep/`, so a search that is run again, or that meets a variant twice, never
measures it twice, and an edit of the reference or the emulation never reads a stale entry. An
entry is written atomically and checked when read: a truncated or malformed one is measured
again. Variants run `--jobs` at a time (threads that wait on subprocesses). A variant that fails
to compile or to run is reported with its error; one stopped by the sweep's deadline also with
`timed_out` (its failure says nothing about the variant); the sweep itself fails only on bad
input.

Input (`--variants FILE`): {"variants": [{"id": str, "source": path}], "compile": bool,
"curve": bool}. Output: {variants: [{id, sha256, cached, curve?, static?, error?, timed_out?}],
lengths, seed, jobs, measured, timed_out}.
"""
import concurrent.futures as cf
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from functools import lru_cache
from pathlib import Path

from . import check
from ..manifest import REPO_ROOT
from ..sandbox import JobTimeout
from .worker_client import WorkerTimeout

# Bumped whenever what a cached entry means changes (metrics, emulation, curve inputs).
SWEEP_VERSION = 2

__all__ = ["run_sweep", "cache_root"]


def cache_root():
    base = os.environ.get("KIDIOM_CACHE")
    return Path(base) / "sweep" if base else Path.home() / ".cache" / "kidiom" / "sweep"


def _triton_version():
    try:
        import triton
        return triton.__version__
    except Exception:  # noqa: BLE001 - no Triton: compiles will say so
        return "none"


@lru_cache(maxsize=None)
def _context(manifest_path, source):
    """A digest of what a measurement reads besides the variant: the harness's own sources (the
    emulation, the workers, the compile), the manifest, the other Python sources beside the
    kernel (helpers it imports, the reference) and the reference's module wherever it lives."""
    manifest_path = Path(manifest_path)
    files = sorted(Path(__file__).resolve().parents[1].rglob("*.py"))   # the whole harness, every subpackage
    files.append(manifest_path)
    files += sorted(p for p in manifest_path.parent.glob("*.py") if p.name != source)
    try:
        import tomllib
        ref = tomllib.loads(manifest_path.read_text()).get("reference", "").split(":")[0]
        if ref:
            files.append(REPO_ROOT.joinpath(*ref.split(".")).with_suffix(".py"))
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.name).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def _key(kind, manifest, text, extra):
    h = hashlib.sha256()
    context = _context(str(manifest.path), Path(manifest.source).name)
    for part in (kind, str(SWEEP_VERSION), manifest.name, _triton_version(), context,
                 json.dumps(extra, sort_keys=True)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(text)
    return h.hexdigest()


def _valid(kind, value):
    """Whether a cache entry has the shape this version writes (else it is measured again)."""
    if kind == "curve":
        return isinstance(value, list) and all(isinstance(p, dict) and "T" in p and "rel_l2" in p for p in value)
    if kind == "static":
        return isinstance(value, dict) and all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
                                               for k in ("instructions", "local", "tensor", "spill_store_bytes"))
    return False


def _cached(kind, key):
    p = cache_root() / kind / f"{key}.json"
    try:
        value = json.loads(p.read_text())
    except (OSError, ValueError):   # absent, unreadable, truncated, not UTF-8
        return None
    return value if _valid(kind, value) else None


def _store(kind, key, value):
    d = cache_root() / kind
    # one writer per file: threads of one sweep and other sweeps never share a temporary
    tmp = d / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(value))
        os.replace(tmp, d / f"{key}.json")   # atomic: a reader never sees half an entry
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass   # a read-only cache only costs time


def _timed_out(e, deadline):
    """Whether a variant's failure is the sweep's deadline, not the variant's own. A limit of the
    variant's own (ptxas's two minutes on a huge kernel) is its failure like any other."""
    if isinstance(e, (WorkerTimeout, JobTimeout, TimeoutError, subprocess.TimeoutExpired)):
        return True   # the workers' and the sandboxed compiles' limits are the sweep's deadline
    # the compile's harness stopped at its --timeout, which is what was left of the deadline
    return time.monotonic() >= deadline - 1 or (isinstance(e, RuntimeError) and "harness timed out after" in str(e))


def _static_of(out):
    """The figures a search compares, from `compile`'s JSON."""
    ins, res = out["instructions"], out["resources"]
    by = ins.get("by_class", {})
    return {
        "instructions": int(ins["total"]),
        "local": int(by.get("local", 0)),
        "tensor": int(by.get("tensor", 0)),
        "registers": res.get("registers"),
        "spill_store_bytes": int(res.get("spill_store_bytes") or 0),
        "spill_load_bytes": int(res.get("spill_load_bytes") or 0),
        "stack_bytes": int(res.get("stack_bytes") or 0),
    }


def _children():
    """The processes this one started (compiles, the interpreter's workers): Linux's /proc."""
    me, out = os.getpid(), []
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _orphan_watch(parent):
    """Ends the sweep, the compiles and the interpreter's workers it started, once the process
    that asked for it is gone (killed, interrupted): nobody would read its result, and it would
    run on to its deadline."""
    while os.getppid() == parent:
        time.sleep(0.5)
    for pid in _children():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(3)


def _compile(manifest, source, deadline):
    """The static figures of one variant: aot.compile_kernel, whose source-touching half runs in a
    sandboxed worker bounded by the sweep's deadline (this thread only waits on it)."""
    from . import aot
    if deadline - time.monotonic() <= 1:
        raise TimeoutError("the sweep's time ran out before this compile")
    try:
        out = aot.compile_kernel(manifest, source, deadline=deadline)
    except aot.CompileError as e:
        raise RuntimeError(f"compile failed: {e}") from None
    return _static_of(out)


def _measure(manifest, v, lengths, seed, want_compile, want_curve, deadline):
    rec = {"id": v["id"], "cached": True}
    try:
        text = Path(v["source"]).read_bytes()
        rec["sha256"] = hashlib.sha256(text).hexdigest()
        if want_curve:
            key = _key("curve", manifest, text, {"lengths": lengths, "seed": seed})
            curve = _cached("curve", key)
            if curve is None:
                rec["cached"] = False
                curve = check.error_curve(manifest, v["source"], lengths, seed, device="cpu", tf32=True,
                                          deadline=deadline)
                _store("curve", key, curve)
            rec["curve"] = curve
        if want_compile:
            key = _key("static", manifest, text, {})
            static = _cached("static", key)
            if static is None:
                rec["cached"] = False
                static = _compile(manifest, v["source"], deadline)
                _store("static", key, static)
            rec["static"] = static
    except Exception as e:  # noqa: BLE001 - one variant's failure is its own result
        rec["error"] = f"{type(e).__name__}: {e}"
        if _timed_out(e, deadline):
            rec["timed_out"] = True
    return rec


def run_sweep(manifest, spec, jobs, deadline, seed=0):
    """Measures every variant of `spec` (see the module doc); returns the result object."""
    if manifest.language != "triton":
        raise ValueError(f"sweep measures Triton kernels; {manifest.name} is {manifest.language}")
    if not manifest.curve:
        raise ValueError(f"{manifest.name} has no [curve] in its manifest: a sweep has no error to measure")
    variants = spec.get("variants")
    if not isinstance(variants, list) or not all(isinstance(v, dict) and "id" in v and "source" in v
                                                 for v in variants):
        raise ValueError("--variants: expected {\"variants\": [{\"id\": ..., \"source\": ...}, ...]}")
    for v in variants:
        if not Path(v["source"]).is_file():
            raise FileNotFoundError(f"variant {v['id']}: no file {v['source']}")
    lengths = list(manifest.curve["cpu_T"])
    want_compile, want_curve = bool(spec.get("compile", True)), bool(spec.get("curve", True))
    t0 = time.monotonic()
    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True, name="orphan-watch").start()
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [ex.submit(_measure, manifest, v, lengths, seed, want_compile, want_curve, deadline)
                for v in variants]
        results = [f.result() for f in futs]
    return {"variants": results, "lengths": lengths, "seed": seed, "jobs": max(1, jobs),
            "measured": sum(1 for r in results if not r["cached"]),
            "timed_out": sum(1 for r in results if r.get("timed_out")),
            "sweep_seconds": round(time.monotonic() - t0, 3)}
