"""A kernel body is Triton on every path the CPU's checks take (issue #45): `compile` sends every
CPU case's specialisation through Triton's frontend for sm_90 as well as compiling the bench
shape whole, so a branch that only the CPU's constexprs take cannot hold Python that only the
interpreter runs. Under both Triton versions the harness supports (3.9 pinned, 3.6 on the GPU
machine)."""
import json
import os
import subprocess

import pytest

from kernels.harness.manifest import find_manifest

from .conftest import ROOT, harness
from .test_spec_triton36 import _triton36

DECODE = find_manifest("kda.decode")
READOUT = "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)\n"


def _cpu_branch(tmp_path, body):
    """The decode with `body` on a branch only the CPU's shapes take (theirs have K < 128)."""
    text = DECODE.source_path.read_text()
    assert text.count(READOUT) == 1
    line = text[:text.index(READOUT)].count("\n") + 2   # the body's line: after the `if`
    src = tmp_path / "decode.py"
    src.write_text(text.replace(READOUT, f"    if K < 128:\n        {body}\n{READOUT}"))
    return src, line


def test_every_cpu_case_of_the_baselines_is_checked_once_per_specialisation(tmp_path):
    code, out = harness("compile", "--kernel", "kda.decode", env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out.get("error")
    paths = out["triton"]["cpu_paths"]
    assert [p["shape"] for p in paths] == [dict(s) for s in DECODE.shapes["cpu"]]
    distinct = {json.dumps(p["constexprs"], sort_keys=True) for p in paths}
    assert sum(p["checked"] for p in paths) == len(distinct), paths
    assert all(p["constexprs"]["K"] < 128 for p in paths), "the CPU's shapes are the small ones"


@pytest.mark.parametrize("triton", ["pinned", "3.6"])
def test_python_on_a_branch_only_the_cpu_takes_does_not_compile(tmp_path, triton):
    # a list comprehension: nothing the static rules name, but no GPU could run it
    src, line = _cpu_branch(tmp_path, "b_o = b_o * [1.0 for _ in range(1)][0]")
    python = _triton36() if triton == "3.6" else None
    argv = ["compile", "--kernel", "kda.decode", "--source", str(src)]
    env = {"KIDIOM_CACHE": str(tmp_path / "cache")}
    if python:
        r = subprocess.run([python, "-m", "kernels.harness", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={**os.environ, **env})
        code, out = r.returncode, json.loads(r.stdout)
    else:
        code, out = harness(*argv, env=env)
    assert code == 2 and out["status"] == "error", out
    first = out["error"].splitlines()[0]
    assert "not Triton on the path the CPU runs: " in first and "comprehension" in first, first
    assert f", line {line} (CPU case " in first, (line, first)


def test_device_code_on_the_same_branch_compiles(tmp_path):
    src, _ = _cpu_branch(tmp_path, "b_o = b_o * 1.0")
    code, out = harness("compile", "--kernel", "kda.decode", "--source", str(src),
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out.get("error")
    assert any(p["checked"] for p in out["triton"]["cpu_paths"])


def test_each_constexpr_arm_names_the_cpu_cases_and_gpu_shapes_that_reach_it(tmp_path):
    # decode's CPU cases have K of 16 to 32, its GPU shapes 128, 128, 96 and 128
    text = DECODE.source_path.read_text()
    src = tmp_path / "decode.py"
    src.write_text(text.replace(READOUT, "    if K < 64:\n        b_o = b_o * 1.0\n"
                                         "    elif K < 128:\n        b_o = b_o * 1.0\n"
                                         "    else:\n        b_o = b_o * 1.0\n" + READOUT))
    code, out = harness("compile", "--kernel", "kda.decode", "--source", str(src),
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out.get("error")
    arms = {(a["test"], a["arm"]): (a["cpu"], a["gpu"]) for a in out["triton"]["branches"]}
    assert arms[("K < 64", "then")] == ([0, 1, 2, 3], [])
    assert arms[("K < 64", "else")] == ([], [0, 1, 2, 3])
    assert arms[("K < 128", "then")] == ([], [2])
    assert arms[("K < 128", "else")] == ([], [0, 1, 3])


def test_a_branch_on_a_value_the_kernel_loads_is_left_to_run_time():
    from kernels.harness.triton import branches

    def kernel(x, K, BK):
        if K > 8:
            y = x
            if x > 0:          # a loaded value: decided per program, not per specialisation
                if BK == 16:
                    y = x
        return y

    arms = branches.coverage(kernel, [{"K": 4, "BK": 16}, {"K": 16, "BK": 16}], [{"K": 128, "BK": 32}])
    assert [(a["test"], a["arm"], a["cpu"], a["gpu"]) for a in arms] == [
        ("K > 8", "then", [1], [0]), ("BK == 16", "then", [1], [])]


LIMIT = 64   # a module-level constant a kernel's test may read


def test_a_test_on_a_module_constant_is_decided_per_specialisation():
    from kernels.harness.triton import branches

    def kernel(x, K):
        if K < LIMIT:
            x = x + 1
        return x

    [arm] = branches.coverage(kernel, [{"K": 16}, {"K": 32}], [{"K": 128}])
    assert (arm["test"], arm["cpu"], arm["gpu"]) == ("K < LIMIT", [0, 1], [])


def test_the_branches_a_mode_flag_selects_are_reached_by_the_cases_that_set_it(tmp_path):
    # FLA's decode as it is written: a flag (`use_gate`) the cases vary and an OPTIONAL input whose
    # presence a heuristic turns into a constexpr; case 0 sets the flag and passes the input, case 1
    # neither, and a GPU shape may take both arms whatever its caller passes
    src = tmp_path / "gated.py"
    src.write_text('''import triton
import triton.language as tl


@triton.heuristics({"HAS_BIAS": lambda args: args["bias"] is not None})
@triton.jit
def gated_kernel(x, bias, y, N, USE_GATE: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    b_x = tl.load(x + o, mask=m, other=0.0)
    if USE_GATE:
        b_x = b_x * tl.sigmoid(b_x)
    if HAS_BIAS:
        b_x = b_x + tl.load(bias + o, mask=m, other=0.0)
    tl.store(y + o, b_x, mask=m)


def gated(x, bias, y, use_gate: bool = False):
    N = x.shape[0]
    gated_kernel[(triton.cdiv(N, 64),)](x, bias, y, N, USE_GATE=use_gate, BLOCK=64)
''')
    (tmp_path / "gated_contract.py").write_text('''import numpy as np

ARGS = ["x", "bias", "y", "use_gate"]
INPUTS = ["x", "bias", "use_gate"]
INOUTS = []
OUTPUTS = ["y"]
OPTIONAL = ["bias"]


def tensors(shape):
    N = shape["N"]
    return {"x": ((N,), "float32"), "bias": ((N,), "float32"), "y": ((N,), "float32"), "use_gate": False}


def make_inputs(shape, rng, variant=None):
    return {"x": rng.standard_normal(shape["N"]).astype(np.float32),
            "bias": rng.standard_normal(shape["N"]).astype(np.float32), "use_gate": False}


def reference(x):
    v = x["x"].astype(np.float64)
    if x["use_gate"]:
        v = v / (1.0 + np.exp(-v))
    if x["bias"] is not None:
        v = v + x["bias"]
    return {"y": v}
''')
    (tmp_path / "gated.toml").write_text('''format = 2
name = "gated"
language = "triton"
source = "gated.py"
entry = "gated_kernel"
launcher = "gated"
contract = "gated_contract.py"

[tolerance]
rel_l2 = 1e-5
slice_rel_l2 = 1e-4
max_abs_rel = 1e-4

[shapes]
cpu = [{ N = 100 }, { N = 70 }]
gpu = [{ N = 4096 }]
bench = { N = 4096 }

[floor]
bytes = "12 * N"
flops = "4 * N"
''')
    code, out = harness("compile", "--manifest", str(tmp_path / "gated.toml"),
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out.get("error")
    paths = out["triton"]["cpu_paths"]
    assert [(p["constexprs"]["USE_GATE"], p["constexprs"]["HAS_BIAS"]) for p in paths] == [(True, True), (False, False)]
    arms = {(a["test"], a["arm"]): (a["cpu"], a["gpu"]) for a in out["triton"]["branches"]}
    assert arms[("USE_GATE", "then")] == ([0], [0]), arms
    assert arms[("HAS_BIAS", "then")] == ([0], [0]), arms
    code, out = harness("check", "--manifest", str(tmp_path / "gated.toml"), "--quick", "--seed", "0")
    assert code == 0 and out["status"] == "passed", out.get("failures") or out.get("error")
    assert [c["flags"] for c in out["cases"]] == [{"use_gate": True}, {"use_gate": False}]
