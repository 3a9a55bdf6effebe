"""Shared fixtures of the kernels/ test suite.

Kernels run only in the check's sandboxed workers (kernels/harness/triton/worker_client.py): without a CUDA
GPU under Triton's interpreter with TF32-faithful dots and the bounds check, as the harness runs
them. TRITON_INTERPRET=1 is set here too, for the tests that import a kernel module directly.
GPU-only tests skip with a printed reason.
"""
import fcntl
import importlib.util
import os
import re
import subprocess
import sys
import time
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cuda():
    # no NVIDIA device node, no GPU: torch (installed for the torch launchers' tests) is not
    # imported for nothing, 2 s in every test process
    if importlib.util.find_spec("torch") is None or not Path("/dev/nvidiactl").exists():
        return False
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _cuda()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
# these tests choose each cache by KIDIOM_CACHE, per test: a shared content cache from the caller's
# environment (kernels/harness/cachedir.py) would serve them another test's entries
os.environ.pop("KIDIOM_CONTENT_CACHE", None)
# The tests that do not choose one share the test suite's own content cache, the one the Rust tests
# fill (tests/util.rs, under target/): a kernel the Rust tests compiled or built is not compiled
# again here. Never the user's ~/.cache/kidiom. Its entries are keyed by every input
# (test_content_cache.py), so one can stand only for exactly its own bytes.
SUITE_CACHE = ROOT / "target" / "tmp" / "kidiom-content-cache"
os.environ["KIDIOM_CACHE"] = str(SUITE_CACHE)

# The CPU as the whole suite shares it (tests/util.rs, `cpu_heavy` and `cpu_alone`): a Rust test that
# times something on this CPU takes it alone. Each test here takes a share for its body: `gate` for a
# moment (held for its whole test by one that takes the CPU alone, so no new share starts while it
# waits), then `cpu` shared. Module fixtures are not covered, so scripts/test.sh runs these tests after
# the Rust tests.
SUITE_LOCKS = ROOT / "target" / "tmp" / "kidiom-cpu-locks"


def take_a_share(locks, name):
    """A share of the CPU under the lock directory `locks`: the open `cpu` file holding it (closing it
    lets go). A wait of 0.1 s or more is recorded in `waits.tsv` under `name`, so the suite's time table
    tells a test's own time from its wait (bench/test_times.py)."""
    locks.mkdir(parents=True, exist_ok=True)
    asked = time.monotonic()
    with open(locks / "gate", "ab") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        cpu = open(locks / "cpu", "ab")
        fcntl.flock(cpu, fcntl.LOCK_SH)
    waited = time.monotonic() - asked
    if waited >= 0.1:
        with open(locks / "waits.tsv", "a") as f:
            f.write(f"pytest\t{name}\t{waited:.3f}\n")
    return cpu


@pytest.fixture(autouse=True)
def _a_share_of_the_cpu(request):
    cpu = take_a_share(SUITE_LOCKS, request.node.nodeid)
    try:
        yield
    finally:
        cpu.close()


needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with torch (none here)")


# The baseline's judged errors per case (triton/basecache.py), shared by every `check` these tests
# run that does not choose its own: most checks here judge one planted kernel against the same
# baseline on the same fixed seed, and ran the baseline's cases again each time. An entry's key is
# the baseline's bytes, the manifest, the harness's sources and reference, versions, device, seed
# and case (test_basecache.py proves a cached baseline judges as a fresh one).
SUITE_BASELINES = SUITE_CACHE / "baseline"


def harness(*args, timeout=600, env=None):
    """Run `python -m kernels.harness ARGS` from the repo root (with `env` added to the
    environment); (exit code, parsed JSON). A `check` keeps the suite's baselines unless it names
    a cache of its own."""
    if args and args[0] == "check" and "--baseline-cache" not in args:
        args = (*args, "--baseline-cache", str(SUITE_BASELINES))
    r = subprocess.run([sys.executable, "-m", "kernels.harness", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, **(env or {})})
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"harness printed no JSON (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r.returncode, out


def add_kwarg_to_calls(source, call, kwarg):
    """Text substitution: add `kwarg` as the last argument of every `call(...)` in `source`."""
    out, i = [], 0
    pat = re.compile(re.escape(call) + r"\(")
    while True:
        m = pat.search(source, i)
        if not m:
            out.append(source[i:])
            return "".join(out)
        depth, j = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(source[j], 0)
            j += 1
        out.append(source[i:j - 1] + f", {kwarg})")
        i = j


def variant(tmp_path, original, replacements, name=None):
    """Write an altered copy of a kernel source; every (old, new) must apply exactly once."""
    text = Path(original).read_text()
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {original}"
        text = text.replace(old, new)
    p = tmp_path / (name or Path(original).name)
    p.write_text(text)
    return p
