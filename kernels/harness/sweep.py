"""`sweep`: many variants of one Triton kernel, each measured for error and static cost.

A per-site rewrite search (kidiom's `validator::search`) writes one source file per variant (the
kernel with a chosen subset of its sites rewritten) and asks for, per variant:

- `curve`: the error-versus-length curve at the manifest's CPU lengths (`[curve] cpu_T`), under
  the TF32-faithful interpreter (`interp.py`; tf32x3 and bf16x3/x6 emulated as Triton lowers
  them), one seed, in a sandboxed worker of its own (`check.error_curve`);
- `static`: the ahead-of-time sm_90 compile's figures (`aot.py`): SASS instructions, local-memory
  and tensor-core instructions, registers, spill stores and loads. Each compile runs in a
  process of its own (`python -m kernels.harness compile`), since compiling imports the variant.

Results are cached by the variant's bytes, the kernel, the seed and lengths, and the harness's
and Triton's versions (`$KIDIOM_CACHE/sweep/`, else `~/.cache/kidiom/sweep/`), so a search that
is run again, or that meets a variant twice, never measures it twice. Variants run `--jobs` at a
time (threads that wait on subprocesses). A variant that fails to compile or to run is reported
with its error; the sweep itself fails only on bad input.

Input (`--variants FILE`): {"variants": [{"id": str, "source": path}], "compile": bool,
"curve": bool}. Output: {variants: [{id, sha256, cached, curve?, static?, error?}], lengths,
seed, jobs}.
"""
import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import check
from .manifest import REPO_ROOT

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


def _key(kind, manifest, text, extra):
    h = hashlib.sha256()
    for part in (kind, str(SWEEP_VERSION), manifest.name, _triton_version(), json.dumps(extra, sort_keys=True)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(text)
    return h.hexdigest()


def _cached(kind, key):
    p = cache_root() / kind / f"{key}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _store(kind, key, value):
    d = cache_root() / kind
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, d / f"{key}.json")   # atomic: a reader never sees half an entry
    except OSError:
        pass   # a read-only cache only costs time


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


def _compile(manifest, source, deadline):
    left = deadline - time.monotonic()
    if left <= 1:
        raise TimeoutError("the sweep's time ran out before this compile")
    cmd = [sys.executable, "-m", "kernels.harness", "compile", "--kernel", manifest.name, "--source", str(source),
           "--timeout", str(int(max(1, left)))]
    r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=left + 5)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"compile printed no JSON (exit {r.returncode}): {r.stderr.strip()[-400:]}") from None
    if out.get("status") != "ok":
        raise RuntimeError(f"compile failed: {out.get('error', out.get('reason', 'unknown'))}")
    return _static_of(out)


def _measure(manifest, v, lengths, seed, want_compile, want_curve, deadline):
    text = Path(v["source"]).read_bytes()
    rec = {"id": v["id"], "sha256": hashlib.sha256(text).hexdigest(), "cached": True}
    try:
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
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [ex.submit(_measure, manifest, v, lengths, seed, want_compile, want_curve, deadline)
                for v in variants]
        results = [f.result() for f in futs]
    return {"variants": results, "lengths": lengths, "seed": seed, "jobs": max(1, jobs),
            "measured": sum(1 for r in results if not r["cached"]),
            "sweep_seconds": round(time.monotonic() - t0, 3)}
