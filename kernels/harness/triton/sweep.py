"""`sweep`: many variants of one Triton kernel, each measured for error and static cost.

A per-site rewrite search (kidiom's `validator::search`) writes one source file per variant (the
kernel with a chosen subset of its sites rewritten) and asks for, per variant:

- `curve`: the error-versus-length curve at the manifest's CPU lengths (`[curve] cpu_T`), under
  the TF32-faithful interpreter (`interp.py`; tf32x3 and bf16x3/x6 emulated as Triton lowers
  them), one seed. The variants not cached are split into `--jobs` groups, each measured by one
  sandboxed worker that hosts the whole group (`check.error_curves`: one interpreter start and one
  reference per length for many variants, instead of one each); a variant the group could not
  measure (it failed to load, or crashed the worker) is measured again alone, in a worker of its
  own (`check.error_curve`), so its failure is never another variant's;
- `static`: the ahead-of-time sm_90 compile's figures (`aot.py`): SASS instructions, local-memory
  and tensor-core instructions, registers, spill stores and loads. Compiling imports the
  variant, so each compile's import, launcher call and Triton compile run in a sandboxed worker
  of its own (aot.compile_sandboxed, with the sweep's deadline on its process group); ptxas and
  cuobjdump then read its artifacts here.

Results are cached by the variant's bytes, the kernel, the seed and lengths, Triton's version and
everything else a measurement reads (`_context`: the harness's own sources, the manifest, the
other sources beside the kernel, the reference's module), in the `sweep/` content cache
(cachedir.py), so a search that is run again, or that meets a variant twice, never
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
SWEEP_VERSION = 3

__all__ = ["run_sweep", "cache_root"]


def cache_root():
    from ..cachedir import content_cache
    return content_cache("sweep")


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
        raw = tomllib.loads(manifest_path.read_text())
        ref = raw.get("reference", "").split(":")[0]
        if ref:
            files.append(REPO_ROOT.joinpath(*ref.split(".")).with_suffix(".py"))
        if raw.get("contract"):   # format 2: the contract module, wherever it lies
            files.append((manifest_path.parent / raw["contract"]).resolve())
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


class _Variant:
    """One variant's record as the sweep builds it: its bytes, cache keys and results so far."""

    def __init__(self, v, want_curve, want_compile, manifest, lengths, seed):
        self.rec = {"id": v["id"], "cached": True}
        self.source = v["source"]
        self.text = Path(self.source).read_bytes()
        self.rec["sha256"] = hashlib.sha256(self.text).hexdigest()
        self.curve_key = _key("curve", manifest, self.text, {"lengths": lengths, "seed": seed}) if want_curve \
            else None
        self.static_key = _key("static", manifest, self.text, {}) if want_compile else None
        if self.curve_key is not None:
            curve = _cached("curve", self.curve_key)
            if curve is not None:
                self.rec["curve"] = curve
        if self.static_key is not None:
            static = _cached("static", self.static_key)
            if static is not None:
                self.rec["static"] = static

    def needs_curve(self):
        return self.curve_key is not None and "curve" not in self.rec and "error" not in self.rec

    def fail(self, e, deadline):
        self.rec["error"] = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
        if not isinstance(e, str) and _timed_out(e, deadline):
            self.rec["timed_out"] = True


def _curves_together(manifest, group, lengths, seed, deadline, references):
    """The curves of a group of variants in one sandboxed worker (check.error_curves); the
    variants it could not measure as a group are measured alone, each in a worker of its own, so a
    variant's failure (a load error, a crash) is only ever its own."""
    alone = list(group)
    try:
        curves, failed = check.error_curves(manifest, {v.rec["id"]: v.source for v in group}, lengths, seed,
                                            device="cpu", tf32=True, deadline=deadline, references=references)
    except Exception as e:  # noqa: BLE001 - the deadline, or a harness failure: every variant's result
        for v in group:
            v.fail(e, deadline)
        return
    for v in group:
        vid = v.rec["id"]
        if vid in curves:
            v.rec["cached"] = False
            v.rec["curve"] = curves[vid]
            _store("curve", v.curve_key, curves[vid])
            alone.remove(v)
        elif vid in failed:
            v.rec["cached"] = False
            v.fail(f"RuntimeError: {failed[vid]}", deadline)
            alone.remove(v)
    for v in alone:
        v.rec["cached"] = False
        try:
            curve = check.error_curve(manifest, v.source, lengths, seed, device="cpu", tf32=True, deadline=deadline)
            v.rec["curve"] = curve
            _store("curve", v.curve_key, curve)
        except Exception as e:  # noqa: BLE001 - one variant's failure is its own result
            v.fail(e, deadline)


def _compile_one(manifest, v, deadline):
    if "error" in v.rec or v.static_key is None or "static" in v.rec:
        return
    v.rec["cached"] = False
    try:
        static = _compile(manifest, v.source, deadline)
        _store("static", v.static_key, static)
        v.rec["static"] = static
    except Exception as e:  # noqa: BLE001 - one variant's failure is its own result
        v.fail(e, deadline)


def _groups(items, jobs):
    """`items` in at most `jobs` groups of nearly equal size, in order."""
    if not items:
        return []
    n = max(1, min(jobs, len(items)))
    size = -(-len(items) // n)
    return [items[i:i + size] for i in range(0, len(items), size)]


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
    recs = []
    for v in variants:
        try:
            recs.append(_Variant(v, want_curve, want_compile, manifest, lengths, seed))
        except OSError as e:
            raise ValueError(f"variant {v['id']}: cannot read {v['source']}: {e}") from None
    # the curves first, the uncached ones in `jobs` groups of one sandboxed worker each (one
    # interpreter start for many variants), then the compiles of the variants whose curve worked,
    # each in its own sandboxed compile; `jobs` at a time throughout
    references = {}
    todo = [v for v in recs if v.needs_curve()]
    jobs = max(1, jobs)
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        for f in [ex.submit(_curves_together, manifest, g, lengths, seed, deadline, references)
                  for g in _groups(todo, jobs)]:
            f.result()
        for f in [ex.submit(_compile_one, manifest, v, deadline) for v in recs]:
            f.result()
    results = [v.rec for v in recs]
    return {"variants": results, "lengths": lengths, "seed": seed, "jobs": max(1, jobs),
            "measured": sum(1 for r in results if not r["cached"]),
            "timed_out": sum(1 for r in results if r.get("timed_out")),
            "sweep_seconds": round(time.monotonic() - t0, 3)}
