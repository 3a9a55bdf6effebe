"""The kernels against the float64 reference on the manifests' CPU shape matrices (under the
TF32-faithful interpreter when there is no GPU), prefill/decode consistency, and the
error-versus-length curve of the default-precision prefill against an `input_precision="ieee"`
variant made by text substitution."""
from pathlib import Path

import pytest

from kernels.harness.check import check_case, consistency, error_curve
from kernels.harness.loader import load_launcher
from kernels.harness.manifest import all_manifests, shape_id
from kernels.harness.ops import OPS

from .conftest import add_kwarg_to_calls

MANIFESTS = all_manifests()


def cases(device):
    for name, m in sorted(MANIFESTS.items()):
        if m.is_host:   # host C++ kernels: their own worker-based check (test_kv_transfer.py)
            continue
        for i, shape in enumerate(m.shapes[device]):
            yield pytest.param(name, i, shape, id=f"{name}-{shape_id(shape)}")


@pytest.mark.parametrize("name,index,shape", list(cases("cpu")))
def test_kernel_matches_reference(name, index, shape, backend, device_kind):
    m = MANIFESTS[name]
    if device_kind == "cuda":
        pytest.skip("CPU shape matrix: covered by the GPU matrix on a GPU (harness check)")
    c = check_case(m, OPS[m.op], load_launcher(m), backend, shape, seed=1234 + index, index=index)
    assert c["passed"], c["failures"]
    assert c["out_of_bounds"] == []


@pytest.mark.parametrize("name", ["kda.decode", "kda.prefill", "kda_cuda.decode"])
def test_prefill_then_decode_equals_longer_prefill(name, backend, device_kind):
    from kernels.kda.decode import kda_decode
    from kernels.kda.prefill import kda_prefill
    m = MANIFESTS[name]
    fn = load_launcher(m)
    dec = fn if m.op == "kda_decode" else kda_decode
    pre = fn if m.op == "kda_prefill" else kda_prefill
    res = consistency(m, dec, pre, backend, m.consistency["gpu" if device_kind == "cuda" else "cpu"], seed=7)
    assert res["passed"], res


def test_tf32_error_grows_with_length_and_ieee_fixes_it(backend, device_kind, tmp_path):
    m = MANIFESTS["kda.prefill"]
    ieee_src = tmp_path / "prefill_ieee.py"
    text = add_kwarg_to_calls(m.source_path.read_text(), "tl.dot", 'input_precision="ieee"')
    assert text.count('input_precision="ieee"') == 8
    ieee_src.write_text(text)
    lengths = m.curve["gpu_T" if device_kind == "cuda" else "cpu_T"]
    op = OPS["kda_prefill"]
    tf32 = error_curve(m, op, load_launcher(m), backend, lengths, seed=0)
    ieee = error_curve(m, op, load_launcher(m, source=ieee_src), backend, lengths, seed=0)
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


def test_tf32_emulation_rounds_only_where_the_gpu_would(device_kind):
    if device_kind == "cuda":
        pytest.skip("interpreter-only")
    import numpy as np
    from kernels.harness.interp import round_to_tf32
    x = np.array([1.0, 1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -12, -3.0000002, np.inf, np.nan], dtype=np.float32)
    r = round_to_tf32(x)
    assert r[0] == 1.0 and r[1] == 1.0 + 2.0 ** -10  # tie rounds away from zero (cvt.rna)
    assert r[2] == 1.0 + 2.0 ** -10 and r[3] == -3.0 and np.isinf(r[4]) and np.isnan(r[5])
