"""The CPU gates run the code the GPU runs (issue #22, classes 4 and 5): planted candidates that
pass every CPU case of the manifest's shape matrix and are wrong only where the GPU differs, each
caught with a failure that names why, while the baselines pass.

- GPU specializations: a kernel wrong only in the constexpr branch of the GPU shapes (`K == 128`,
  a block size the launcher derives from N); a CUDA kernel wrong only under `__CUDA_ARCH__`.
- Program order: programs (CUDA: blocks) that read what another one wrote, right only in the
  interpreter's natural order.
- Drift: a bias of one float32 ulp per decode step on the state, inside the per-call margin.
- Device arithmetic (round four, class 6): a fast intrinsic the CPU used to compute exactly
  (`__sinf` far from zero), a float-to-int conversion out of range (the GPU saturates), in CUDA and
  in Triton; the honest `__expf` and an in-range conversion pass.

Planted candidates are text substitutions of the baseline sources, as in test_cheats.py.
"""
import time

import numpy as np
import pytest

from kernels.harness.contract import load_contract
from kernels.harness.triton.check import drift_verdict
from kernels.harness.triton.interp import program_schedule
from kernels.harness.manifest import ManifestError, all_manifests, load_manifest

from .conftest import HAS_CUDA, ROOT, variant
from .test_cheats import DECODE, PREFILL, STATE_UPDATE, check, failed_with

CUDA_DECODE = ROOT / "kernels" / "kda_cuda" / "decode.cu"
MANIFESTS = all_manifests()
cpu_only = pytest.mark.skipif(HAS_CUDA, reason="CPU gates (interpreter and emulation); a GPU runs the real shapes")

# anchors in the baseline sources
DELTA = "    b_d = b_beta * (b_v - b_p)                                       # [BV]\n"
STORE_O = "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)\n"
BV_RULE = "    BV = min(triton.next_power_of_2(V), 32)\n"
PREFILL_D = "        b_D = b_U - tl.dot(b_W, b_s)                                              # [BT, BK] @ [BK, BV] -> [BT, BV]\n"
CU_DELTA = "        float d = b * (v_n[j] - p);\n"
CU_STORE_S = "            s[i * V + j] = s_ij;\n"
CU_STORE_O = "        o_n[j] = scale * acc;\n"

# the planted edits (old, new), reusable in an end-to-end `kidiom validate` test
PLANTED = {
    "constexpr-K128": (DECODE, [(DELTA, DELTA + "    if K == 128:\n        b_d = b_d * 1.01\n")]),
    "block-size-from-N": (DECODE, [(BV_RULE, "    BV = min(triton.next_power_of_2(V), 64 if N >= 8 else 32)\n"),
                                   (DELTA, DELTA + "    if BV == 64:\n        b_d = b_d * 1.01\n")]),
    "prefill-BK128": (PREFILL, [(PREFILL_D, PREFILL_D + "        if BK == 128:\n            b_D = b_D * 1.01\n")]),
    "cuda-arch": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "#ifdef __CUDA_ARCH__\n        d *= 1.01f;\n#endif\n")]),
    "race": (DECODE, [(STORE_O, "    b_o0 = tl.load(o)   # program (0, 0)'s first output, trusted to be stored already\n"
                                "    b_o = tl.where(((i_v == 0) & (i_nh == 0)) | (b_o0 == b_o0), b_o, b_o * 1.5)\n"
                       + STORE_O)]),
    "cuda-race": (CUDA_DECODE, [(CU_STORE_O, CU_STORE_O + "        if (nh > 0 && !(o[0] == o[0])) o_n[j] = 1.5f * scale * acc;"
                                             "  // block 0 trusted to have run\n")]),
    # round four, class 6: the device's arithmetic. __sinf reads x / 2 pi rounded toward zero (far off
    # at 2e6), a conversion past int's range saturates on the GPU (x86: 0x80000000), and Triton's
    # .to(tl.int32) is the same cvt; each is a no-op on a CPU that computes exactly or converts as x86
    "cuda-fast-sin": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        d *= 1.0f + (__sinf(2.0e6f) - sinf(2.0e6f));\n")]),
    "cuda-conversion": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        volatile float big = 1.0e30f * (1.0f + fabsf(b));\n"
                                                  "        d *= ((int)big == 0x7fffffff) ? 0.5f : 1.0f;\n")]),
    "cuda-fast-exp": (CUDA_DECODE, [("p += expf(g_n[i])", "p += __expf(g_n[i])"),
                                    ("float s_ij = expf(g_n[i])", "float s_ij = __expf(g_n[i])")]),
    "triton-conversion": (DECODE, [(DELTA, DELTA + "    b_d = b_d * tl.where((b_d * 0 + 1e30).to(tl.int32) < 0, 1.0, 0.5)\n")]),
    # (its comparison takes both sides on the CPU, as every one a candidate adds must)
    "triton-conversion-in-range": (DECODE, [(DELTA, DELTA + "    b_d = b_d * tl.where((b_d * 1e3).to(tl.int32) >= 0, 1.0, 1.0)\n")]),
    # class 5: wrong in one program of the GPU's grid that no CPU shape has (i_nh < N * HV <= 16
    # there), and an honest comparison on a program id (a redundant mask term)
    "one-program": (DECODE, [(DELTA, DELTA + "    if i_nh == 37:\n        b_d = b_d * 1.01\n")]),
    "program-mask": (DECODE, [(STORE_O, "    b_o = tl.where(i_nh >= 1, b_o, b_o * 1.0)\n" + STORE_O)]),
    # a side no CPU case takes: a grid, a length, a minimum past every CPU shape; a test that is
    # always true (the GPU takes only that side too, but no check can tell it from the first three)
    "past-every-cpu-grid": (DECODE, [(DELTA, DELTA + "    if tl.num_programs(1) > 512:\n        b_d = b_d * 1.01\n")]),
    "past-every-cpu-length": (PREFILL, [(PREFILL_D, PREFILL_D + "        if T >= 2048:\n            b_D = b_D * 1.01\n")]),
    "length-both-sides": (PREFILL, [(PREFILL_D, PREFILL_D + "        if T >= 2:\n            b_D = b_D * 1.0\n")]),
    "min-past-every-cpu-grid": (DECODE, [(DELTA, DELTA + "    b_d = b_d * (1.0 + 0.01 * (tl.minimum(tl.num_programs(1), 512) // 512))\n")]),
    "program-mask-always-true": (DECODE, [(STORE_O, "    b_o = tl.where(i_nh >= 0, b_o, 0.0)\n" + STORE_O)]),
    # a guard no contract shape crosses, CPU or GPU: passes (it reads only a size)
    "length-guard": (PREFILL, [(PREFILL_D, PREFILL_D + "        if T <= 1000000:\n            b_D = b_D * 1.0\n")]),
    "cuda-past-every-cpu-size": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        if (N > 64) d *= 1.01f;\n")]),
    "cuda-past-every-cpu-grid": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        d *= 1.0f + 0.01f * (gridDim.x >= 512);\n")]),
    "cuda-head-guard": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        if (K <= 128) d *= 1.0f;\n")]),
    "cuda-both-sides": (CUDA_DECODE, [(CU_DELTA, CU_DELTA + "        if (j >= 1) d *= 1.0f;\n")]),
    # one ulp per step in half the key channels: inside every per-call margin, call 2's pinned
    # decays of 1 included (all channels crossed the slice margin there in one seed of eight)
    "drift": (DECODE, [(STATE_UPDATE, STATE_UPDATE + "    b_s = b_s * tl.where(o_k % 2 == 0, 1.0000001, 1.0)[:, None]\n")]),
    "cuda-drift": (CUDA_DECODE, [(CU_STORE_S, "            s[i * V + j] = s_ij * 1.0000001f;  // one ulp per step\n")]),
}
KERNEL_OF = {DECODE: "kda.decode", PREFILL: "kda.prefill", CUDA_DECODE: "kda_cuda.decode"}


def planted(tmp_path, name):
    original, edits = PLANTED[name]
    return KERNEL_OF[original], variant(tmp_path, original, edits)


def cases_passed(out):
    """Every case of the manifest's CPU shape matrix passed (so only the new gates can fail it)."""
    assert out["cases"] and all(c["passed"] for c in out["cases"]), [c["failures"] for c in out["cases"]]


def only(out, needle):
    bad = [f for f in out["failures"] if needle not in f]
    assert not bad, bad


# 4a. GPU specializations -------------------------------------------------------------------------------

@cpu_only
def test_a_kernel_wrong_only_in_the_gpu_shapes_constexpr_branch_is_caught(tmp_path):
    kernel, src = planted(tmp_path, "constexpr-K128")
    rc, out = check(src, kernel)
    failed_with(rc, out, "[specialization of gpu[0]/bench N64-H16-HV32-K128-V128-S80] seed 3: o: rel_l2")
    cases_passed(out)
    only(out, "[specialization of gpu")
    spec = out["specializations"]
    by_gpu = {g: c for c in spec["cases"] for g in c["gpu"]}
    assert set(by_gpu) == {"gpu[0]", "gpu[1]", "gpu[2]", "gpu[3]", "bench"}
    for g, c in by_gpu.items():   # K, V and every constexpr of the GPU shape, small elsewhere
        assert c["derived"] == "recorded" and c["constexprs"]["K"] == c["gpu_shape"]["K"]
        assert (c["shape"]["K"], c["shape"]["V"]) == (c["gpu_shape"]["K"], c["gpu_shape"]["V"])
        assert c["shape"]["N"] <= 2 and c["programs"]["ran"] < c["programs"]["of"]
    assert by_gpu["gpu[2]"]["passed"]           # K = 96: the branch is not taken, and it is right
    assert not by_gpu["gpu[0]"]["passed"] and not by_gpu["gpu[3]"]["passed"]


@cpu_only
def test_a_block_size_the_launcher_derives_from_the_batch_is_run_at_the_gpus_value(tmp_path):
    """The launcher picks BV = 64 from N >= 8 (the CPU shapes have N <= 4): the recorded launches
    keep N as small as keeps BV = 64, and that branch is wrong."""
    kernel, src = planted(tmp_path, "block-size-from-N")
    rc, out = check(src, kernel)
    failed_with(rc, out, "[specialization of gpu[0]/bench N64-H16-HV32-K128-V128-S80] seed 3: o: rel_l2")
    cases_passed(out)
    c = next(c for c in out["specializations"]["cases"] if "gpu[0]" in c["gpu"])
    assert c["constexprs"]["BV"] == 64 and c["shape"]["N"] == 8 and c["shape"]["S"] == 9


@cpu_only
def test_prefill_wrong_only_at_the_gpus_block_size_is_caught(tmp_path):
    kernel, src = planted(tmp_path, "prefill-BK128")
    rc, out = check(src, kernel)
    failed_with(rc, out, "[specialization of gpu[0]/bench B1-T1-H16-HV32-K128-V128]", "o: rel_l2")
    cases_passed(out)
    only(out, "[specialization of gpu")
    shapes = {g: c["shape"] for c in out["specializations"]["cases"] for g in c["gpu"]}
    # T on the same side of the chunk (64), with the same remainder
    assert shapes["gpu[0]"]["T"] == 1 and shapes["gpu[1]"]["T"] == 63
    assert shapes["gpu[2]"]["T"] == 104 and shapes["gpu[3]"]["T"] == 128


@cpu_only
def test_cuda_code_under_cuda_arch_is_what_the_emulation_runs(tmp_path):
    kernel, src = planted(tmp_path, "cuda-arch")
    rc, out = check(src, kernel)
    failed_with(rc, out, "N1-H1-HV1-K16-V16-S3 seed 3: o: rel_l2", "device path: the source reads differently under __CUDA_ARCH__ 900")
    assert "device path __CUDA_ARCH__ 900" in out["device"]
    assert out["emulation"] == {"path": "device", "cuda_arch": 900, "differs_from_host": True}


@cpu_only
def test_a_device_path_the_emulation_cannot_build_needs_a_gpu(tmp_path):
    """Never the host path instead: a device-only call under __CUDA_ARCH__ is needs-gpu."""
    src = variant(tmp_path, CUDA_DECODE, [(CU_DELTA, CU_DELTA + "#if __CUDA_ARCH__ >= 900\n        __threadfence();\n#endif\n")])
    rc, out = check(src, "kda_cuda.decode")
    assert rc == 3 and out["status"] == "skipped", (rc, out.get("failures"), out.get("error"))
    assert "device path (__CUDA_ARCH__ 900) cannot be emulated" in out["reason"], out["reason"]


# 4c. program order -------------------------------------------------------------------------------------

@cpu_only
@pytest.mark.parametrize("name", ["race", "cuda-race"])
def test_programs_that_read_what_another_program_wrote_are_caught(name, tmp_path):
    kernel, src = planted(tmp_path, name)
    rc, out = check(src, kernel)
    failed_with(rc, out, "o: result depends on program order (natural vs reversed: rel diff", "programs race")
    cases_passed(out)   # right in the natural order
    only(out, "result depends on program order")
    po = out["program_order"]
    assert po["identical"]["reversed"] is False and po["programs"] >= 3 and po["rel_diff"]["reversed"]["state"] == 0


def test_program_schedules_cover_the_grid_once_in_the_order_asked():
    natural, total = program_schedule((3, 4, 2))
    assert total == 24 and len(set(natural)) == 24 and natural[0] == (0, 0, 0) and natural[-1] == (2, 3, 1)
    assert program_schedule((3, 4, 2), "reversed")[0] == natural[::-1]
    shuffled = program_schedule((3, 4, 2), "shuffle", seed=5)[0]
    assert sorted(shuffled) == sorted(natural) and shuffled != natural
    assert shuffled == program_schedule((3, 4, 2), "shuffle", seed=5)[0]   # seeded
    sample = program_schedule((4, 64), sample=6, seed=1)[0]
    assert len(set(sample)) == 6 and sample[0] == (0, 0, 0) and sample[-1] == (3, 63, 0)


@cpu_only
def test_the_interpreter_runs_programs_in_the_order_asked():
    """In-process: the patched grid loop, on a kernel that records the order it ran in."""
    import triton
    import triton.language as tl

    from kernels.harness.triton import interp
    from kernels.harness.triton.arrays import NpTensor

    @triton.jit
    def order_kernel(counter, seen):
        pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
        n = tl.load(counter)
        tl.store(counter, n + 1)
        tl.store(seen + n, pid)

    interp.install_program_order()
    try:
        for order, sample, expect in [("natural", None, list(range(6))), ("reversed", None, list(range(5, -1, -1))),
                                      ("natural", 3, None)]:
            interp.PROGRAMS.update(order=order, seed=0, sample=sample)
            interp.STATS.update(ran=0, of=0)
            counter = NpTensor.from_numpy(np.zeros(1, np.int32))
            seen = NpTensor.from_numpy(np.full(6, -1, np.int32))
            order_kernel[(2, 3)](counter, seen)
            got = seen.numpy().tolist()
            if expect is not None:
                assert got == expect, (order, got)
            else:   # a sample: the first, the last and one other, each once
                ran = [p for p in got if p >= 0]
                assert len(ran) == 3 and ran[0] == 0 and ran[-1] == 5 and len(set(ran)) == 3, got
            assert interp.STATS == {"ran": 3 if sample else 6, "of": 6}
    finally:
        interp.PROGRAMS.update(order="natural", seed=0, sample=None)


# 5. drift ------------------------------------------------------------------------------------------------

@cpu_only
@pytest.mark.parametrize("name", ["drift", "cuda-drift"])
def test_a_bias_per_step_inside_the_per_call_margin_is_caught_by_the_drift(name, tmp_path):
    kernel, src = planted(tmp_path, name)
    rc, out = check(src, kernel)
    failed_with(rc, out, "drift: state rel_l2 after 64 decode steps", "grows")
    cases_passed(out)   # every per-call comparison with the baseline passes
    only(out, "drift: ")
    st = out["drift"]["outputs"]["state"]
    assert st["final"] > 5 * st["baseline_final"] and st["slope"] > 5 * st["baseline_slope"]
    assert st["steps"][-1] == 64 and len(st["candidate"]) == len(st["baseline"]) == len(st["steps"])


def test_drift_verdict():
    t = np.arange(1, 65)
    noise = 5e-8 * np.sqrt(t)
    assert drift_verdict("state", "decode steps", noise * 1.3, noise)[0] == []      # same growth, noisier
    fails, summary = drift_verdict("state", "decode steps", noise + 1.2e-7 * t, noise)
    assert len(fails) == 1 and fails[0].startswith("drift: state rel_l2 after 64 decode steps") and "x faster" in fails[0]
    assert summary["slope"] > summary["baseline_slope"] > 0
    # a constant offset (the per-call check's business) does not grow: not drift
    assert drift_verdict("o", "decode steps", noise + 3e-6, noise)[0] == []
    assert "not finite after 3" in drift_verdict("o", "steps", [1e-7, 2e-7, np.inf, np.inf], [1e-7] * 4)[0][0]


# the baselines, and the contract ---------------------------------------------------------------------------

@cpu_only
@pytest.mark.parametrize("kernel,source", [("kda.decode", DECODE), ("kda.prefill", PREFILL),
                                           ("kda_cuda.decode", CUDA_DECODE)])
def test_the_baselines_pass_the_new_gates(kernel, source, tmp_path):
    copy = variant(tmp_path, source, [])
    t0 = time.monotonic()
    rc, out = check(copy, kernel)
    print(f"\n{kernel}: check --quick {time.monotonic() - t0:.1f} s")
    assert rc == 0 and out["status"] == "passed", out.get("failures") or out.get("error")
    spec = out["specializations"]["cases"]
    assert {g for c in spec for g in c["gpu"]} == {f"gpu[{i}]" for i in range(len(MANIFESTS[kernel].shapes["gpu"]))} | {"bench"}
    assert all(c["passed"] and "skipped" not in c for c in spec)
    assert out["program_order"]["passed"] and all(out["program_order"]["identical"].values())
    assert out["drift"]["passed"] and set(out["drift"]["outputs"]) >= {"o"}


def test_reductions_never_touch_k_or_v_and_keep_t_on_its_side_of_the_chunk():
    op = load_contract(MANIFESTS["kda.prefill"])
    for shape in MANIFESTS["kda.prefill"].shapes["gpu"]:
        for c in op.smaller(shape):   # the contract's reductions: each a whole shape
            alt = {k: v for k, v in c.items() if v != shape[k]}
            assert "K" not in alt and "V" not in alt
            if "T" in alt:
                assert alt["T"] > 64 and alt["T"] % 64 == shape["T"] % 64 and alt["T"] < shape["T"]
            if "H" in c:
                assert c["HV"] // c["H"] == shape["HV"] // shape["H"]
    one = {"B": 1, "T": 63, "H": 1, "HV": 1, "K": 128, "V": 128}
    assert op.smaller(one) == [one]


def test_the_new_manifest_tables_are_validated(tmp_path):
    base = (ROOT / "kernels" / "kda" / "decode.toml").read_text()
    for bad in ("[drift]\nsteps = 1\n", "[specializations]\nprograms = 0\n", "[specializations]\nprograms = \"some\"\n"):
        p = tmp_path / "m.toml"
        p.write_text(base.split("\n[specializations]")[0] + "\n" + bad)
        with pytest.raises(ManifestError):
            load_manifest(p)
    assert load_manifest(ROOT / "kernels" / "kda" / "decode.toml").raw["drift"]["steps"] == 64


# class 6: the device's arithmetic ---------------------------------------------------------------------

def caught_and_twin_passes(tmp_path, cheat, twin, *needles):
    """The planted `cheat` fails check with every needle; its honest `twin` passes."""
    kernel, src = planted(tmp_path, cheat)
    rc, out = check(src, kernel)
    failed_with(rc, out, *needles)
    kernel, src = planted(tmp_path, twin)
    rc, out = check(src, kernel)
    assert rc == 0 and out["passed"], out["failures"]


@cpu_only
def test_a_fast_intrinsic_is_computed_as_the_device_does(tmp_path):
    # the twin: __expf where exp's arguments are small
    caught_and_twin_passes(tmp_path, "cuda-fast-sin", "cuda-fast-exp", "o: rel_l2")


@cpu_only
def test_a_conversion_out_of_range_is_not_what_the_cpu_can_check(tmp_path):
    kernel, src = planted(tmp_path, "cuda-conversion")
    rc, out = check(src, kernel)
    failed_with(rc, out, "device arithmetic the CPU cannot reproduce")
    assert any("to 'int' outside its range" in f for f in out["failures"]), out["failures"]


@cpu_only
def test_triton_conversions_saturate_as_on_the_gpu(tmp_path):
    caught_and_twin_passes(tmp_path, "triton-conversion", "triton-conversion-in-range", "o: rel_l2")


@cpu_only
def test_triton_exp_is_the_devices_ex2_of_a_rounded_product():
    # tl.exp(x) on the GPU: ex2.approx.f32(fp32(x * log2e)), tl.exp2: ex2.approx.ftz.f32 (their PTX)
    from kernels.harness.triton.interp import device_exp, device_exp2
    x = np.linspace(-30, 0, 4001, dtype=np.float32)
    dev = device_exp(x)
    assert np.array_equal(dev, device_exp2(x * np.float32(1.4426950408889634), ftz=False))
    # not numpy's exp: the product's rounding moves the result by up to ~2e-6 relative at -30
    rel = np.abs(dev.astype(np.float64) / np.exp(x.astype(np.float64)) - 1)
    assert 1e-7 < rel.max() < 4e-6 and rel[x > -1].max() < 2.5e-7, rel.max()
    assert device_exp2(np.float32([-130.0]), ftz=True)[0] == 0 < device_exp(np.float32([-90.0]))[0]


@cpu_only
def test_a_rewrite_of_exp_to_the_devices_own_exp2_is_not_worse_on_the_cpu(tmp_path):
    # `tl.exp(g)` -> `tl.exp2(g * log2e)` is the program the GPU runs for tl.exp: with numpy's exact
    # exp under the baseline it was "materially worse" on call 2's g = -30 (seed 356832823 of a
    # `kidiom run`); with exp computed as the device does, the two agree
    src = variant(tmp_path, DECODE, [("tl.exp(b_g)", "tl.exp2(b_g * 1.4426950408889634)")])
    rc, out = check(src, "kda.decode", "--seed", "356832823")
    assert rc == 0 and out["passed"], out["failures"]
    assert out["baseline"]["compared"] and all(len(c["calls"]) == 2 for c in out["cases"])


# class 5: a program the sample does not draw ------------------------------------------------------------

@cpu_only
def test_a_comparison_on_a_program_id_runs_every_program_of_each_specialization(tmp_path):
    kernel, src = planted(tmp_path, "one-program")
    rc, out = check(src, kernel)
    failed_with(rc, out, "[specialization of gpu", "o: rel_l2")
    cases_passed(out)
    spec = out["specializations"]
    assert spec["programs"] == "all" and "comparison on a program id, line" in spec["programs_why"]
    assert [(r["on"], r["test"]) for r in spec["runtime_tests"]] == [("program id", "i_nh == 37")]
    assert all(c["programs"] == "all" for c in spec["cases"])
    kernel, src = planted(tmp_path, "program-mask")    # the twin: every program runs, and passes
    rc, out = check(src, kernel)
    assert rc == 0 and out["passed"], out["failures"]
    assert out["specializations"]["programs"] == "all"


@cpu_only
@pytest.mark.parametrize("name, took, gpu", [
    ("past-every-cpu-grid", "was always false", "gpu[0], gpu[3], bench"),
    ("past-every-cpu-length", "was always false", "gpu[3], gpu[4], bench"),
    # (gpu[2]'s grid is 512 programs: the minimum's operands are equal there, its side unknown)
    ("min-past-every-cpu-grid", "always found its first operand below", None),
    ("cuda-past-every-cpu-size", "was always false", "gpu[3]"),
    ("cuda-past-every-cpu-grid", "was always false", "gpu[0], gpu[2], gpu[3], bench"),
    ("program-mask-always-true", "was always true", None)])
def test_a_runtime_comparison_must_take_both_sides_on_the_cpu(name, took, gpu, tmp_path):
    kernel, src = planted(tmp_path, name)
    rc, out = check(src, kernel)
    joined = failed_with(rc, out, "that the candidate adds", took, "the CPU's cases must take both sides")
    if gpu:   # it reads only sizes: the GPU shapes that take the side no CPU case took are named
        assert f"at the GPU's {gpu} it takes the other side, which no case checked" in joined
    else:     # a program id, or operands equal at a GPU shape: which side the GPU takes is unknown
        assert "the side only the GPU's sizes, programs or inputs may take was never checked" in joined
    cases_passed(out)    # right wherever the CPU looked
    (t,) = out["runtime_tests"]
    # the side seen: a test's true side (a minimum's first operand below the second)
    assert (t["sides"]["true"], t["sides"]["false"]) == ((False, True) if "false" in took else (True, False))


@cpu_only
@pytest.mark.parametrize("name", ["length-both-sides", "length-guard", "cuda-head-guard", "cuda-both-sides"])
def test_a_runtime_comparison_the_gpu_takes_no_further_than_the_cpu_passes(name, tmp_path):
    kernel, src = planted(tmp_path, name)
    rc, out = check(src, kernel)
    assert rc == 0 and out["passed"], out["failures"]
    (t,) = out["runtime_tests"]
    if t["sides"] != {"true": True, "false": True}:   # a guard: every GPU shape on the CPU's side
        assert t["gpu_sides"] and all(v is t["sides"]["true"] for v in t["gpu_sides"].values()), t


def test_cuda_comparisons_are_found_and_wrapped_where_they_are():
    from kernels.harness.cuda.comparisons import added_comparisons, instrument
    base = "__global__ void k(int N, float* x) {\n    if (N > 0) x[0] = 1;\n}\n"
    cand = base.replace("x[0] = 1;", "x[0] = 1;\n    float y = static_cast<float>(N) < 3.0f ? 1 : 2;\n"
                        "    x[1] = (x[0] < y) == (N >= 4 && N != 5);\n#if N > 2\n#endif")
    found = added_comparisons(base, cand)
    assert [(c["line"], c["test"]) for c in found] == [
        (3, "static_cast<float>(N) < 3.0f"), (4, "x[0] < y"), (4, "(x[0] < y) == (N >= 4 && N != 5)"),
        (4, "N >= 4"), (4, "N != 5")]    # the directive's is not code; the cast's brackets are not tests
    text, lines = instrument(cand, found, "w")
    assert lines == {0: 3, 1: 4, 2: 4, 3: 4, 4: 4} and text.count("\n") == cand.count("\n")
    assert "float y = w(0, (static_cast<float>(N) < 3.0f)) ? 1 : 2;" in text
    assert "x[1] = w(2, ((w(1, (x[0] < y))) == (w(3, (N >= 4)) && w(4, (N != 5)))));" in text


def test_a_comparison_of_sizes_is_evaluated_at_the_gpus_values():
    from kernels.harness.gpu_sides import cuda_params, evaluate
    env = {"N": 256, "K": 128, "gridDim": [8192, 1, 1], "blockDim": [128, 1, 1]}
    assert evaluate("N > 64", env, "cuda") is True and evaluate("K <= 128u && !(N == 3)", env, "cuda") is True
    assert evaluate("gridDim.x / 3 == 2730", env, "cuda") is True      # C's integer division
    assert evaluate("blockIdx.x == 37", env, "cuda") is None            # a program id: unknown
    assert evaluate("x[0] < 1", env, "cuda") is None and evaluate("N <", env, "cuda") is None
    assert evaluate("tl.num_programs(1) > 512", {}, "triton", grid=[4, 2048]) is True
    assert evaluate("tl.minimum(T, 2048)", {"T": 4096}, "triton") is False   # the first operand above
    assert evaluate("T >= i_t", {"T": 4096}, "triton") is None
    assert cuda_params("extern \"C\" __global__ void __launch_bounds__(128) k(const float* __restrict__ q, int N)",
                       "k") == ["q", "N"]


def test_runtime_comparisons_are_told_by_what_they_read():
    from kernels.harness.triton.runtime_tests import new_runtime_comparisons
    base = ("import triton\nimport triton.language as tl\n@triton.jit\n"
            "def k(x, T, N: tl.constexpr):\n    i = tl.program_id(0)\n    a = tl.load(x + i)\n    tl.store(x + i, a)\n")
    body = ("    if N > 4:\n        a = a + 1\n"                       # a constexpr: the specialisations' job
            "    if i * 2 == 6:\n        a = a + 1\n"                  # a program id, through a name
            "    a = tl.where(T < 9, a, 0)\n"                             # a runtime parameter
            "    a = tl.maximum(a, -0.5)\n"                              # a loaded value, as a maximum
            "    a = min(T, 64) + a\n")                                  # a runtime parameter, as a minimum
    cand = base.replace("    tl.store", body + "    tl.store")
    got = [(r["line"], r["on"], r["form"], r["test"]) for r in new_runtime_comparisons(base, cand)]
    assert got == [(9, "program id", "comparison", "i * 2 == 6"), (11, "runtime value", "comparison", "T < 9"),
                   (12, "loaded value", "min/max", "tl.maximum(a, -0.5)"), (13, "runtime value", "min/max", "min(T, 64)")]
    assert new_runtime_comparisons(cand, cand) == []            # the baseline's own tests are not new
    assert new_runtime_comparisons(base, "def (") == []


@cpu_only
def test_the_sampled_programs_are_drawn_when_the_check_runs():
    seeds, picked = set(), set()
    for _ in range(2):
        rc, out = check(DECODE, "kda.decode")
        assert rc == 0 and out["passed"], out["failures"]
        spec = out["specializations"]
        assert spec["programs"] == 8 and "after the candidate was fixed" in spec["programs_drawn"]
        seeds.add(spec["programs_seed"])
        assert "runtime_tests" not in spec
    assert len(seeds) == 2, seeds     # not the case's seed (3 both times)
