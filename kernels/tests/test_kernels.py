"""The kernels against the float64 reference on the manifests' CPU shape matrices (under the
TF32-faithful interpreter when there is no GPU), prefill/decode consistency, and the
error-versus-length curve of the default-precision prefill against an `input_precision="ieee"`
variant made by text substitution. Every kernel runs in the check's sandboxed workers (one
check per kernel, shared by the tests of that kernel)."""
import time

import pytest

from kernels.harness.triton.check import error_curve, run_check
from kernels.harness.manifest import all_manifests, shape_id

from .conftest import HAS_CUDA, add_kwarg_to_calls

MANIFESTS = all_manifests()
DEVICE = "cuda" if HAS_CUDA else "cpu"
KERNELS = ["kda.decode", "kda.prefill", "kda_cuda.decode"]


@pytest.fixture(scope="module")
def checks():
    """name -> run_check of the manifest's own source: CPU shapes, one seed, consistency."""
    cache = {}

    def get(name):
        if name not in cache:
            m = MANIFESTS[name]
            cache[name] = run_check(m, None, seeds=[1234], device=DEVICE, shapes=m.shapes["cpu"],
                                    with_curve=False, with_consistency=True,
                                    deadline=time.monotonic() + 300)
        return cache[name]
    return get


def cases(device):
    for name in KERNELS:
        for i, shape in enumerate(MANIFESTS[name].shapes[device]):
            yield pytest.param(name, i, shape, id=f"{name}-{shape_id(shape)}")


@pytest.mark.parametrize("name,index,shape", list(cases("cpu")))
def test_kernel_matches_reference(name, index, shape, checks):
    if HAS_CUDA:
        pytest.skip("CPU shape matrix: covered by the GPU matrix on a GPU (harness check)")
    res = checks(name)
    if "skipped" in res:
        pytest.skip(res["skipped"][:200])
    c = res["cases"][index]
    assert c["shape"] == shape
    assert c["passed"], c["failures"]
    assert c["launches"]["entry"] == [1, 1]
    assert all(c["inputs_unchanged"].values()) and all(c["padding"].values())
    if MANIFESTS[name].language == "triton":
        assert c["out_of_bounds"] == [] and all(c["provenance"].values())
    else:   # native code: the interpreter sees none of its accesses
        assert c["out_of_bounds"] == "not checked" and c["provenance"] == "not checked"


@pytest.mark.parametrize("name", KERNELS)
def test_prefill_then_decode_equals_longer_prefill(name, checks):
    res = checks(name)
    if "skipped" in res:
        pytest.skip(res["skipped"][:200])
    assert res["consistency"]["passed"], res["consistency"]


def test_tf32_error_grows_with_length_and_ieee_fixes_it(tmp_path):
    m = MANIFESTS["kda.prefill"]
    ieee_src = tmp_path / "prefill_ieee.py"
    text = add_kwarg_to_calls(m.source_path.read_text(), "tl.dot", 'input_precision="ieee"')
    assert text.count('input_precision="ieee"') == 10
    ieee_src.write_text(text)
    lengths = m.curve["gpu_T" if HAS_CUDA else "cpu_T"]
    tf32 = error_curve(m, None, lengths, seed=0, device=DEVICE)
    ieee = error_curve(m, ieee_src, lengths, seed=0, device=DEVICE)
    print("\nerror vs T (kda.prefill, long-memory inputs, K=V=32)")
    print(f"{'T':>6} {'tf32 rel_l2':>12} {'tf32 max_abs':>13} {'ieee rel_l2':>12} {'ieee max_abs':>13}")
    for a, b in zip(tf32, ieee):
        print(f"{a['T']:>6} {a['rel_l2']:>12.3e} {a['max_abs']:>13.3e} {b['rel_l2']:>12.3e} {b['max_abs']:>13.3e}")
    tol = m.tolerance["rel_l2"]
    assert ieee[-1]["rel_l2"] <= tol
    assert ieee[-1]["state_rel_l2"] <= tol
    # the TF32 rounding is visible without a GPU: far above the ieee error at every length ...
    for a, b in zip(tf32, ieee):
        assert a["rel_l2"] > 20 * b["rel_l2"], (a, b)
    # ... and the absolute error grows with the length of the context
    assert tf32[-1]["max_abs"] > 1.3 * tf32[0]["max_abs"], tf32


def test_tf32_emulation_rounds_only_where_the_gpu_would():
    if HAS_CUDA:
        pytest.skip("interpreter-only")
    import numpy as np
    from kernels.harness.triton.interp import round_to_tf32
    x = np.array([1.0, 1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -12, -3.0000002, np.inf, np.nan], dtype=np.float32)
    r = round_to_tf32(x)
    assert r[0] == 1.0 and r[1] == 1.0 + 2.0 ** -10  # tie rounds away from zero (cvt.rna)
    assert r[2] == 1.0 + 2.0 ** -10 and r[3] == -3.0 and np.isinf(r[4]) and np.isnan(r[5])
