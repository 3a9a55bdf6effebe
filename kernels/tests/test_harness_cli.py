"""The harness as the validator calls it: `python -m kernels.harness ...` printing JSON.
compile without a GPU, check (also catching planted bugs in altered copies), bench skipping."""
from pathlib import Path

import pytest

from .conftest import HAS_CUDA, ROOT, harness, needs_gpu, variant

KDA = ROOT / "kernels" / "kda"
CUDA = ROOT / "kernels" / "kda_cuda"


def test_list_names_every_kernel():
    rc, out = harness("list", "--json")
    assert rc == 0 and out["wire"] == "kidiom-harness" and out["version"] == 1
    names = {k["name"] for k in out["kernels"]}
    # the precision variants of the decodes (issue #27) are contracts of their own, listed beside them
    variants = {n for n in names if ".state-" in n}
    assert names - variants == {"kda.decode", "kda.prefill", "kda_cuda.decode", "kv_transfer"}
    assert variants == {f"{d}.state-{s}" for d in ("kda.decode", "kda_cuda.decode")
                        for s in ("bf16", "fp8", "int8", "int8-uniform")}


def test_device_says_what_auto_picks():
    # kidiom's own `--device auto` asks this (kidiom_exec::gpu_present)
    from kernels.harness.cli import _has_cuda
    rc, out = harness("device")
    assert rc == 0 and out["command"] == "device" and out["status"] == "ok"
    assert out["cuda"] is _has_cuda()


@pytest.mark.parametrize("kernel", ["kda.decode", "kda.prefill", "kda_cuda.decode"])
def test_compile_for_sm90_without_gpu(kernel):
    rc, out = harness("compile", "--kernel", kernel, "--json")
    assert rc == 0, out
    assert out["status"] == "ok" and out["arch"] == "sm_90a"
    res, mix = out["resources"], out["instructions"]
    assert res["registers"] > 0 and "spill_store_bytes" in res and "shared_static_bytes" in res
    assert mix["total"] > 0 and mix["by_class"]["global_load"] > 0 and mix["by_class"]["global_store"] > 0
    if kernel == "kda.prefill":
        assert mix["by_class"].get("tensor", 0) > 0          # tl.dot -> HMMA/HGMMA
        assert out["triton"]["constexprs"]["BT"] == 64
    if kernel == "kda_cuda.decode":
        assert out["cuda"]["nvrtc_version"].startswith("12.")
        assert res["spill_store_bytes"] == 0
    print(f"\n{kernel}: {res} {mix['by_class']}")


def test_check_cli_reports_the_wire_format():
    rc, out = harness("check", "--kernel", "kda.decode", "--seeds", "2", "--seed", "11", "--no-consistency", "--json")
    assert rc == 0, out.get("failures") or out.get("error")
    assert out["status"] == "passed" and out["seeds"] == [11, 12]
    case = out["cases"][0]
    for key in ("id", "shape", "seed", "passed", "outputs", "padding", "out_of_bounds", "failures"):
        assert key in case
    for key in ("rel_l2", "max_abs", "max_abs_rel", "worst_slice", "nonfinite"):
        assert key in case["outputs"]["o"]
    # the candidate ran in a sandboxed worker, twice per case, the entry kernel launched each time
    assert case["launches"]["entry"] == [1, 1] and len(case["calls"]) == 2
    assert case["inputs_unchanged"] == {n: True for n in ("q", "k", "v", "g", "beta", "slots")}
    assert "baseline" not in case   # the baseline itself: no comparison
    sb = out["sandbox"]
    assert sb["rlimits"]["CORE"] == 0 and sb["crashes"] == 0 and sb["calls_per_case"] == 2
    assert "filesystem" in sb and "capabilities" in sb and "network" in sb
    if not HAS_CUDA:
        assert out["mode"] == "interpreter-tf32" and out["device"] == "cpu (triton interpreter)"
        assert case["out_of_bounds"] == [] and case["provenance"] == {"o": True, "state": True}
    else:
        assert case["out_of_bounds"] == "not checked" and case["provenance"] == "not checked"


def test_unknown_kernel_is_an_error():
    rc, out = harness("check", "--kernel", "nope")
    assert rc == 2 and "error" in out


PLANTED = [
    pytest.param("kda.decode", KDA / "decode.py",
                 [("tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)",
                   "tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v & (o_v != V - 1))")],
                 "non-finite", id="decode-unwritten-output-element"),
    pytest.param("kda.decode", KDA / "decode.py",
                 [("tl.load(p_v, mask=m_v, other=0.)", "tl.load(p_v)")],
                 "out-of-bounds read", id="decode-out-of-bounds-read"),
    pytest.param("kda.prefill", KDA / "prefill.py",
                 [("b_G = tl.cumsum(b_g, axis=0)", "b_G = tl.cumsum(-b_g, axis=0)")],
                 "rel_l2", id="prefill-wrong-gate-sign"),
    pytest.param("kda_cuda.decode", CUDA / "decode.cu",
                 [("j < V; j += blockDim.x", "j <= V; j += blockDim.x")],
                 "padding", id="cuda-decode-out-of-bounds-write"),
]


@pytest.mark.parametrize("kernel,original,edits,expect", PLANTED)
def test_planted_bug_is_caught(kernel, original, edits, expect, tmp_path):
    src = variant(tmp_path, original, edits)
    rc, out = harness("check", "--kernel", kernel, "--source", str(src), "--quick", "--seed", "3", "--json")
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    joined = "\n".join(out["failures"])
    assert expect in joined, joined
    print(f"\n{kernel} planted bug -> {out['failures'][0]}")


def test_ieee_variant_passes_check_via_source(tmp_path):
    from .conftest import add_kwarg_to_calls
    src = tmp_path / "prefill.py"
    src.write_text(add_kwarg_to_calls((KDA / "prefill.py").read_text(), "tl.dot", 'input_precision="ieee"'))
    rc, out = harness("check", "--kernel", "kda.prefill", "--source", str(src), "--quick", "--seed", "5")
    assert rc == 0, out.get("failures") or out.get("error")
    worst = max(c["outputs"]["o"]["rel_l2"] for c in out["cases"])
    assert worst < 1e-5  # no TF32 rounding left
    # judged against the baseline (TF32) on the same inputs: far more accurate, so it passes
    assert all(c["baseline"]["outputs"]["o"]["rel_l2"] > 10 * c["outputs"]["o"]["rel_l2"] for c in out["cases"])


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU path")
def test_bench_without_gpu_is_skipped():
    rc, out = harness("bench", "--kernel", "kda.decode", "--json")
    assert rc == 3 and out["status"] == "skipped" and "GPU" in out["reason"]


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("command", ["check", "bench"])
def test_device_cuda_without_cuda_is_skipped_naming_what_is_missing(command):
    # a check that cannot run here is never the candidate's failure: no worker starts
    from kernels.harness.cli import _cuda_missing
    missing = _cuda_missing()
    assert missing and ("libcuda.so" in missing or "torch" in missing)
    rc, out = harness(command, "--kernel", "kda.decode", "--device", "cuda", "--json")
    assert rc == 3 and out["status"] == "skipped", out
    assert out["reason"] == f"--device cuda on a machine without CUDA: {missing}"
    assert "sandbox" not in out and "cases" not in out


@needs_gpu
@pytest.mark.parametrize("kernel", ["kda.decode", "kda.prefill", "kda_cuda.decode"])
def test_check_and_bench_on_gpu(kernel):
    rc, out = harness("check", "--kernel", kernel, "--seeds", "1", "--no-curve")
    assert rc == 0, out.get("failures") or out.get("error")
    rc, out = harness("bench", "--kernel", kernel, "--iters", "20")
    assert rc == 0 and out["status"] == "ok", out
