"""A kernel written the upstream way (issue #48), checked as it is: tests/fixtures/upstream/
gated_norm.py (our own), a torch launcher that allocates and returns its outputs, `*g.shape`
unpacking, an autograd Function, `@triton.autotune` over three configs, `@triton.heuristics` and
four mode flags. On the CPU the worker hands the launcher torch tensors that view the harness's own
buffers; what the launcher allocates itself is watched from the launch that first passes it."""
import importlib.util

import pytest

from .conftest import HAS_CUDA, ROOT, harness
from .test_contracts import TOLERANCE

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (scripts/setup-python.sh installs it)")
cpu_only = pytest.mark.skipif(HAS_CUDA, reason="the CPU's checks (the interpreter's bounds and provenance)")

GATED_NORM = (ROOT / "tests" / "fixtures" / "upstream" / "gated_norm.py").read_text()

CONTRACT = '''
import numpy as np
import torch

ARGS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid"]
INPUTS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid"]
INOUTS = []
OPTIONAL = ["weight", "bias"]
OUTPUTS = ["y", "rstd"]
RETURNS = ["y", "rstd"]


def tensors(s):
    B, T, H, D = s["B"], s["T"], s["H"], s["D"]
    return {"x": ((B, T, H, D), "float32"), "g": ((B, T, H), "float32"), "weight": ((D,), "float32"),
            "bias": ((D,), "float32"), "eps": 1e-5, "is_rms": True, "gate_sigmoid": False,
            "y": ((B, T, H, D), "float32"), "rstd": ((B, T, H), "float32")}


def make_inputs(s, rng, variant=None):
    t = tensors(s)
    x = {n: rng.standard_normal(t[n][0]).astype(np.float32) for n in ("x", "g", "weight", "bias")}
    return dict(x, eps=t["eps"], is_rms=t["is_rms"], gate_sigmoid=t["gate_sigmoid"])


def reference(x):
    # in torch, float64: a contract may compute in its launcher's own language
    v = torch.from_numpy(x["x"]).double()
    if not x["is_rms"]:
        v = v - v.mean(-1, keepdim=True)
    r = 1.0 / torch.sqrt((v * v).mean(-1) + x["eps"])
    y = v * r[..., None]
    if x["weight"] is not None:
        y = y * torch.from_numpy(x["weight"]).double()
    if x["bias"] is not None:
        y = y + torch.from_numpy(x["bias"]).double()
    g = torch.from_numpy(x["g"]).double()
    return {"y": y * (torch.sigmoid(g) if x["gate_sigmoid"] else g)[..., None], "rstd": r}


def smaller(s):
    return [dict(s, T=t) for t in (1, 2) if t < s["T"]]
'''

MANIFEST = '''
format = 2
name = "mine.gated_norm"
language = "triton"
source = "gated_norm.py"
entry = "gated_norm_fwd_kernel"
launcher = "gated_norm_fwd"
contract = "gated_norm_contract.py"
''' + TOLERANCE + '''
[shapes]
cpu = [{ B = 2, T = 5, H = 1, D = 40 }, { B = 1, T = 3, H = 2, D = 64 }]
gpu = [{ B = 4, T = 64, H = 4, D = 128 }]
bench = { B = 4, T = 64, H = 4, D = 128 }

[floor]
bytes = "4 * (2 * B * T * H * D + 2 * B * T * H + 2 * D)"
flops = "8 * B * T * H * D"
'''


def _kernel(d, source=GATED_NORM, contract=CONTRACT):
    d.mkdir(parents=True, exist_ok=True)
    (d / "gated_norm.py").write_text(source)
    (d / "gated_norm_contract.py").write_text(contract)
    (d / "gated_norm.toml").write_text(MANIFEST)
    return d / "gated_norm.toml"


def _check(manifest, *extra):
    return harness("check", "--manifest", str(manifest), "--quick", "--seed", "5", *extra)


@needs_torch
@cpu_only
def test_a_torch_launcher_is_checked_as_written(tmp_path):
    manifest = _kernel(tmp_path / "k")
    rc, out = _check(manifest)
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    # the returned outputs were judged like any other: their values, their provenance
    # the optional tensors present and absent (HAS_WEIGHT, HAS_BIAS), the bool flags both ways
    assert {(c["weight"], c["bias"]) for c in out["cases"]} == {(True, True), (False, False)}, out["cases"]
    assert {tuple(c["flags"].items()) for c in out["cases"]} == {
        (("is_rms", True), ("gate_sigmoid", True)), (("is_rms", False), ("gate_sigmoid", False))}, out["cases"]
    for c in out["cases"]:
        assert c["passed"] and set(c["outputs"]) == {"y", "rstd"}, c
        assert c["provenance"] == {"y": True, "rstd": True}, c["provenance"]
        assert c["out_of_bounds"] == [], c["out_of_bounds"]
    at = out["autotune"]
    assert at["configs"] == 3 and all(c["passed"] for c in at["cases"]), at
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    cx = out["triton"]["constexprs"]
    assert (cx["HAS_WEIGHT"], cx["HAS_BIAS"], cx["IS_RMS"], cx["GATE_SIGMOID"]) == (True, True, True, False), cx


@needs_torch
@cpu_only
def test_a_torch_launcher_that_computes_on_the_host_is_caught(tmp_path):
    """The launcher changes part of the kernel's output with torch on the host: the elements host
    code wrote are counted, as they are for an output the harness allocates."""
    manifest = _kernel(tmp_path / "k")
    cheat = tmp_path / "gated_norm_host.py"
    assert GATED_NORM.count("\n    return y, rstd\n") == 1
    cheat.write_text(GATED_NORM.replace("\n    return y, rstd\n", "\n    y[0] = y[0] * 2.0\n    return y, rstd\n"))
    rc, out = _check(manifest, "--source", str(cheat))
    assert rc == 1 and out["status"] == "failed", (out.get("failures"), out.get("error"))
    # y[0] is half of B2-T5-H1-D40's y, a third of B1-T3-H2-D64's: all of it
    assert any("y: 200 of 400 elements were written by host code" in f for f in out["failures"]), out["failures"]
    assert any("y: 384 of 384 elements were written by host code" in f for f in out["failures"]), out["failures"]
    assert not any("rstd: " in f and "host code" in f for f in out["failures"]), out["failures"]


@needs_torch
@cpu_only
def test_a_wrong_autotune_config_of_a_torch_launcher_fails_naming_it(tmp_path):
    manifest = _kernel(tmp_path / "k")
    wrong = tmp_path / "gated_norm_unmasked.py"
    assert GATED_NORM.count("m = m_d & (i_m < M)") == 1
    wrong.write_text(GATED_NORM.replace("m = m_d & (i_m < M)", "m = m_d"))
    rc, out = _check(manifest, "--source", str(wrong))
    assert rc == 1 and out["status"] == "failed", (out.get("failures"), out.get("error"))
    assert all(c["passed"] for c in out["cases"]), "config 0 (one row per program) is right"
    named = [f for f in out["failures"] if "autotune config" in f]
    assert any("autotune config 2 of 3 of gated_norm_fwd_kernel (ROWS=4" in f for f in named), out["failures"]
    assert not any("autotune config 0 " in f for f in out["failures"]), out["failures"]


@needs_torch
@cpu_only
def test_a_change_no_case_runs_is_unverified_until_a_case_runs_it(tmp_path):
    """A rewrite inside `if not IS_RMS:` passes every case while the contract FIXES is_rms (the
    branch never runs): the check says which changed lines no case ran, and that the change is
    unverified. With the flag left free the odd cases run it, and it is verified."""
    branch = "            b_x = tl.where(m, b_x - tl.sum(b_x, axis=0) / D, 0.0)"
    assert GATED_NORM.count(branch) == 1
    line = GATED_NORM[:GATED_NORM.index(branch)].count("\n") + 1
    cand = tmp_path / "gated_norm_branch.py"
    cand.write_text(GATED_NORM.replace(branch, branch.replace("/ D, 0.0)", "* (1.0 / D), 0.0)")))
    fixed = _kernel(tmp_path / "fixed", contract=CONTRACT.replace('OPTIONAL = ["weight", "bias"]',
                                                                   'OPTIONAL = ["weight", "bias"]\nFIXED = ["is_rms"]'))
    rc, out = _check(fixed, "--source", str(cand))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    assert all(c["flags"] == {"gate_sigmoid": c["flags"]["gate_sigmoid"]} for c in out["cases"]), out["cases"]
    cov = out["coverage"]
    assert cov["changed"] == [line] and cov["unrun"] == [line], cov
    assert f"no CPU case ran the change (line {line})" in cov["unverified"], cov
    rc, out = _check(_kernel(tmp_path / "free"), "--source", str(cand))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    assert out["coverage"] == {"changed": [line], "watched": [line], "unrun": []}, out["coverage"]


@needs_torch
@cpu_only
def test_a_change_to_a_function_no_case_calls_is_unverified(tmp_path):
    """The autograd Function's forward is not the contract's launcher: a change there (host code,
    watched from the file's import) runs in no case."""
    save = "        ctx.save_for_backward(x, g, weight, bias, rstd)"
    assert GATED_NORM.count(save) == 1
    line = GATED_NORM[:GATED_NORM.index(save)].count("\n") + 1
    cand = tmp_path / "gated_norm_forward.py"
    cand.write_text(GATED_NORM.replace(save, "        ctx.save_for_backward(x, g, rstd)"))
    rc, out = _check(_kernel(tmp_path / "k"), "--source", str(cand))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    assert out["coverage"]["unrun"] == [line] and "unverified" in out["coverage"], out["coverage"]


@needs_torch
@cpu_only
def test_a_returned_value_that_is_no_output_holds_its_place(tmp_path):
    """`return out, final_state` where `out` is a parameter (FLA's fused recurrent): RETURNS names
    the outputs by their place, None for the others."""
    assert GATED_NORM.count("\n    return y, rstd\n") == 1
    source = GATED_NORM.replace("\n    return y, rstd\n", "\n    return x, y, rstd\n")
    contract = CONTRACT.replace('RETURNS = ["y", "rstd"]', 'RETURNS = [None, "y", "rstd"]')
    rc, out = _check(_kernel(tmp_path / "k", source=source, contract=contract))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    # without the place, x is judged as y: wrong
    rc, out = _check(_kernel(tmp_path / "w", source=source))
    assert rc == 1 and any("y: " in f for f in out["failures"]), out.get("failures")


@needs_torch
@cpu_only
def test_an_autograd_functions_apply_is_a_launcher_and_a_str_a_scalar(tmp_path):
    """The launcher `GatedNormFunction.apply` (what `kidiom init` writes where the launch is in a
    Function's forward: FLA's fused chunk kernels), and a mode passed by name (`reduction: str`)."""
    marker = "\ndef gated_norm(x, g,"
    assert GATED_NORM.count(marker) == 1
    source = GATED_NORM.replace(marker, '''
def by_name(x, g, weight, bias, eps, is_rms, gate_sigmoid, gate: str = "sigmoid"):
    assert gate in ("sigmoid", "identity"), gate
    return GatedNormFunction.apply(x, g, weight, bias, eps, is_rms, gate == "sigmoid")
''' + marker)
    d = tmp_path / "k"
    _kernel(d, source=source)
    (d / "gated_norm.toml").write_text(MANIFEST.replace('launcher = "gated_norm_fwd"',
                                                        'launcher = "GatedNormFunction.apply"'))
    rc, out = _check(d / "gated_norm.toml")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    contract = CONTRACT.replace('ARGS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid"]',
                                'ARGS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid", "gate"]')
    contract = contract.replace('INPUTS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid"]',
                                'INPUTS = ["x", "g", "weight", "bias", "eps", "is_rms", "gate_sigmoid", "gate"]')
    contract = contract.replace('"gate_sigmoid": False,', '"gate_sigmoid": False, "gate": "identity",')
    contract = contract.replace("gate_sigmoid=t[\"gate_sigmoid\"])", "gate_sigmoid=t[\"gate_sigmoid\"], gate=t[\"gate\"])")
    contract = contract.replace('if x["gate_sigmoid"] else g', 'if x["gate"] == "sigmoid" else g')
    (d / "gated_norm_contract.py").write_text(contract)
    (d / "gated_norm.toml").write_text(MANIFEST.replace('launcher = "gated_norm_fwd"', 'launcher = "by_name"'))
    rc, out = _check(d / "gated_norm.toml")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))


@needs_torch
def test_a_launcher_that_computes_on_its_tensors_values_is_recorded_on_zeros(tmp_path):
    """FLA's varlen launchers size their grids with `repeat_interleave` without `output_size`,
    which the shape-only (meta) tensors a launch is recorded on cannot run: the record runs the
    launcher again on zero-filled CPU tensors, under a memory budget it names when exceeded."""
    marker = "    M = B * T * H\n"
    assert GATED_NORM.count(marker) == 1
    source = GATED_NORM.replace(marker, "    rows = torch.repeat_interleave(torch.arange(B, device=x.device), "
                                        "torch.full((B,), T * H, device=x.device))\n    M = rows.numel()\n")
    d = tmp_path / "k"
    manifest = _kernel(d, source=source)
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    # at sizes whose real tensors would not fit the budget, the error says so and what to change
    (d / "gated_norm.toml").write_text(MANIFEST.replace("bench = { B = 4, T = 64, H = 4, D = 128 }",
                                                        "bench = { B = 4096, T = 4096, H = 16, D = 128 }"))
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc != 0 and "meta tensor" in out.get("error", "") and "smaller sizes" in out["error"], out.get("error")
