"""`@triton.autotune` and `@triton.heuristics` as upstream kernels use them (issue #48): under
Triton's interpreter nothing can time the configs (Triton itself fails with "0 active drivers"),
so the check runs every case under every config the GPU may pick, and a failure names the
config. The kernel is our own, written the upstream way: an autotuned, heuristics-sized row norm
whose grid is a function of the chosen config, with a bool mode flag (a scalar input)."""
import pytest

from .conftest import HAS_CUDA, harness
from .test_contracts import TOLERANCE

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="the configs are chosen by the harness on the CPU only")

ROWNORM = '''
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"ROWS": 1}, num_warps=1), triton.Config({"ROWS": 2}, num_warps=2),
             triton.Config({"ROWS": 4}, num_warps=4)],
    key=["N"],
)
@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["N"])})
@triton.jit
def rownorm_kernel(x, w, y, eps, M, N, USE_W: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)                                   # [BLOCK]
    cm = cols < N
    ww = tl.load(w + cols, mask=cm, other=0.0)                   # [BLOCK]
    for r in range(ROWS):
        row = pid * ROWS + r
        rm = row < M
        v = tl.load(x + row * N + cols, mask=cm & rm, other=0.0)  # [BLOCK]
        ms = tl.sum(v * v, axis=0) / N
        out = v / tl.sqrt(ms + eps)
        if USE_W:
            out = out * ww
        tl.store(y + row * N + cols, out, mask=cm & rm)


def rownorm(x, w, eps, y, use_w: bool = True):
    M, N = x.shape
    grid = lambda meta: (triton.cdiv(M, meta["ROWS"]),)  # noqa: E731
    rownorm_kernel[grid](x, w, y, eps, M, N, USE_W=use_w)
    return y
'''

CONTRACT = '''
import numpy as np

ARGS = ["x", "w", "eps", "y", "use_w"]
INPUTS = ["x", "w", "eps", "use_w"]
INOUTS = []
OUTPUTS = ["y"]


def tensors(s):
    M, N = s["M"], s["N"]
    return {"x": ((M, N), "float32"), "w": ((N,), "float32"), "eps": 1e-5, "y": ((M, N), "float32"),
            "use_w": True}


def make_inputs(s, rng, variant=None):
    M, N = s["M"], s["N"]
    return {"x": rng.standard_normal((M, N)).astype(np.float32),
            "w": rng.uniform(0.5, 1.5, N).astype(np.float32), "eps": 1e-5,
            "use_w": True}   # a mode flag, a bool: the check runs odd cases with it False


def reference(x):
    v = x["x"].astype(np.float64)
    y = v / np.sqrt((v * v).mean(axis=1, keepdims=True) + x["eps"])
    return {"y": y * x["w"].astype(np.float64) if x["use_w"] else y}


def smaller(s):
    return [dict(s, M=m) for m in (1, 2, 4) if m < s["M"]]
'''

MANIFEST = '''
format = 2
name = "mine.rownorm"
language = "triton"
source = "rownorm.py"
entry = "rownorm_kernel"
launcher = "rownorm"
contract = "rownorm_contract.py"
''' + TOLERANCE + '''
[shapes]
cpu = [{ M = 5, N = 40 }, { M = 3, N = 64 }]
gpu = [{ M = 64, N = 256 }]
bench = { M = 64, N = 256 }

[floor]
bytes = "4 * (2 * M * N + N)"
flops = "4 * M * N"
'''


def _kernel(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "rownorm.py").write_text(ROWNORM)
    (d / "rownorm_contract.py").write_text(CONTRACT)
    (d / "rownorm.toml").write_text(MANIFEST)
    return d / "rownorm.toml"


def _check(manifest, *extra):
    return harness("check", "--manifest", str(manifest), "--quick", "--seed", "5", *extra)


@cpu_only
def test_every_config_of_an_autotuned_kernel_is_checked(tmp_path):
    rc, out = _check(_kernel(tmp_path / "k"))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    at = out["autotune"]
    assert at["kernels"] == ["rownorm_kernel"] and at["configs"] == 3 and at["default"] == "config 0", at
    # configs 1 and 2 on each of the two cases (config 0 ran as the cases themselves)
    assert sorted((c["autotune"], c["id"]) for c in at["cases"]) == sorted(
        (i, c["id"]) for i in (1, 2) for c in out["cases"]), at["cases"]
    assert all(c["passed"] for c in at["cases"])
    # one launch per call: the config asked for ran, nothing was benchmarked
    assert all(c["launches"]["entry"] == [1, 1] for c in at["cases"] + out["cases"])


@cpu_only
def test_the_compile_says_which_config_it_compiled_and_the_profile_counts_one(tmp_path):
    manifest = _kernel(tmp_path / "k")
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    at = out["triton"]["autotune"]
    assert at["configs"] == 3 and at["compiled"] == "config 0 (ROWS=1, num_warps=1, num_stages=3)", at
    assert "check runs every config" in at["why"]
    cx = out["triton"]["constexprs"]
    assert (cx["ROWS"], cx["BLOCK"], cx["USE_W"]) == (1, 256, True), cx   # the bool flag reached a constexpr
    rc, out = harness("profile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    assert out["launches"] == 1 and out["totals"]["load_bytes"] > 0


@cpu_only
def test_a_config_that_is_wrong_fails_naming_it(tmp_path):
    """A rewrite that drops the row mask is right with one row per program (config 0, the only one
    a check of the default config sees) and wrong wherever a program's rows pass the last."""
    manifest = _kernel(tmp_path / "k")
    wrong = tmp_path / "rownorm_unmasked.py"
    assert ROWNORM.count("rm = row < M") == 1
    wrong.write_text(ROWNORM.replace("rm = row < M", "rm = row >= 0"))
    rc, out = _check(manifest, "--source", str(wrong))
    assert rc == 1 and out["status"] == "failed", (out.get("failures"), out.get("error"))
    assert all(c["passed"] for c in out["cases"]), "config 0 (one row per program) is right"
    named = [f for f in out["failures"] if "autotune config" in f]
    assert named and all(" of 3 of rownorm_kernel (" in f for f in named), out["failures"]
    # M = 5 with ROWS = 2 or 4, M = 3 with either: both other configs fail, config 0 never does
    assert any("autotune config 1 of 3 of rownorm_kernel (ROWS=2, num_warps=2, num_stages=3)" in f for f in named), named
    assert any("autotune config 2 of 3 of rownorm_kernel (ROWS=4, num_warps=4, num_stages=3)" in f for f in named), named
    assert not any("autotune config 0 " in f for f in out["failures"]), out["failures"]
