"""The sweep under adverse conditions: a damaged cache, an edited reference, a deadline, and a
caller that goes away (killed or interrupted) while it runs."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import HAS_CUDA, ROOT, harness
from .test_sweep import _variants

# the interpreter hangs in this variant (T is a runtime argument; the compile would not)
HANG = "    t_hang = T\n    while t_hang > 0:\n        t_hang = t_hang + 1\n"


def _prefill():
    from kernels.harness.manifest import find_manifest
    return find_manifest("kda.prefill").source_path.read_text()


def _hanging():
    src = _prefill()
    anchor = "    o_t = tl.arange(0, BT)\n"
    assert anchor in src
    return src.replace(anchor, HANG + anchor, 1)


@pytest.mark.skipif(HAS_CUDA, reason="the sweep's curves run in the interpreter")
def test_a_damaged_cache_entry_is_measured_again(tmp_path):
    cache = tmp_path / "cache"
    spec = _variants(tmp_path, [_prefill()])
    env = {"KIDIOM_CACHE": str(cache)}
    code, first = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec), env=env)
    assert code == 0 and first["measured"] == 1, first
    [entry] = list((cache / "sweep" / "curve").glob("*.json"))
    good = entry.read_text()
    # truncated (a write cut short), valid JSON of the wrong shape, not UTF-8
    for damage in (good[: len(good) // 2], json.dumps({"rel_l2": "lots"}), b"\xff\xfe\x00"):
        if isinstance(damage, bytes):
            entry.write_bytes(damage)
        else:
            entry.write_text(damage)
        code, out = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec), env=env)
        assert code == 0 and out["measured"] == 1 and not out["variants"][0]["cached"], (damage, out)
        assert out["variants"][0]["curve"] == first["variants"][0]["curve"]
        assert json.loads(entry.read_text()) == first["variants"][0]["curve"], "rewritten whole"
    assert not list((cache / "sweep" / "curve").glob(".*.tmp")), "no temporary left behind"


def test_the_cache_key_follows_what_a_measurement_reads(tmp_path):
    from kernels.harness.triton import sweep
    from kernels.harness.manifest import load_manifest, find_manifest
    import shutil
    kda = find_manifest("kda.prefill").dir
    d = tmp_path / "kda"
    shutil.copytree(kda, d, ignore=shutil.ignore_patterns("__pycache__"))
    m = load_manifest(d / "prefill.toml")
    key = lambda: sweep._key("curve", m, b"text", {"lengths": [64]})  # noqa: E731
    before = key()
    sweep._context.cache_clear()
    assert key() == before, "deterministic"
    # the kernel's own source is the variant's text, not the context: editing it changes nothing
    (d / "prefill.py").write_text("# another baseline\n")
    sweep._context.cache_clear()
    assert key() == before
    # the reference beside it (or a helper the kernel imports) changes what the curve means
    (d / "reference.py").write_text((d / "reference.py").read_text() + "\n# edited\n")
    sweep._context.cache_clear()
    assert key() != before
    after_ref = key()
    (d / "prefill.toml").write_text((d / "prefill.toml").read_text().replace("cpu_T = [64, 128, 256]",
                                                                            "cpu_T = [64, 128, 512]"))
    sweep._context.cache_clear()
    assert key() != after_ref, "the manifest (shapes, tolerances, curve) is part of the key"
    sweep._context.cache_clear()


@pytest.mark.skipif(HAS_CUDA, reason="the sweep's curves run in the interpreter")
def test_a_variant_stopped_by_the_deadline_says_so(tmp_path):
    spec = _variants(tmp_path, [_hanging()])
    t0 = time.monotonic()
    code, out = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec), "--timeout", "12",
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")}, timeout=120)
    assert time.monotonic() - t0 < 60
    assert code == 0 and out["timed_out"] == 1, out
    v = out["variants"][0]
    assert v.get("timed_out") is True and "curve" not in v, v
    assert not list((tmp_path / "cache").rglob("*.json")), "a timed-out variant is never cached"


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _descendants(pid):
    kids = {}
    for d in Path("/proc").iterdir():
        try:
            kids.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


@pytest.mark.skipif(HAS_CUDA or not Path("/proc/self/stat").exists(),
                    reason="the interpreter's workers, seen through Linux's /proc")
def test_a_sweep_whose_caller_is_gone_ends_with_its_workers(tmp_path):
    spec = _variants(tmp_path, [_hanging(), _hanging()])
    # a caller that starts the sweep and dies while it runs, as kidiom does on ^C or kill -9
    starter = ("import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
               "stderr=subprocess.DEVNULL); print(p.pid, flush=True); time.sleep(10)")
    env = {**os.environ, "KIDIOM_CACHE": str(tmp_path / "cache")}
    caller = subprocess.Popen([sys.executable, "-c", starter, sys.executable, "-m", "kernels.harness", "sweep",
                               "--kernel", "kda.prefill", "--variants", str(spec), "--timeout", "300"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    pid = int(caller.stdout.readline())
    seen = set()
    while caller.poll() is None:
        seen |= _descendants(pid)
        time.sleep(0.2)
    assert seen, "the sweep started its workers before its caller died"
    deadline = time.monotonic() + 30
    while (_alive(pid) or any(_alive(c) for c in seen)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(pid), "the sweep outlived its caller"
    assert not [c for c in seen if _alive(c)], "its workers outlived it"


def test_only_the_sweeps_own_deadline_counts_as_timed_out():
    from kernels.harness.triton.sweep import _timed_out
    from kernels.harness.triton.worker_client import WorkerTimeout
    far = time.monotonic() + 600
    # ptxas's own limit on a huge variant is that variant's failure, not the search's time
    ptxas = RuntimeError("compile failed: TimeoutExpired: Command '['ptxas', '-arch=sm_90a']' timed out after "
                         "120 seconds")
    assert not _timed_out(ptxas, far)
    assert not _timed_out(ValueError("input_precision 'fp8' unsupported"), far)
    assert _timed_out(WorkerTimeout("candidate worker timed out (killed at the deadline)"), far)
    assert _timed_out(RuntimeError("compile failed: harness timed out after 42 s"), far)
    assert _timed_out(ValueError("anything"), time.monotonic() - 1), "past the deadline nothing is the variant's"
