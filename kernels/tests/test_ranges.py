"""Inputs over their production range (issue #50, class 5): a contract's RANGES says what each input
takes in production, and the check's second call draws over all of it, both ends included
(docs/CONTRACTS.md). A candidate right on realistic inputs only (a clamp, a cheaper formula that
breaks at strong decay) passes call 1 and fails there."""
import types

import numpy as np
import pytest

from kernels.harness.contract import Contract, ContractError, load_contract
from kernels.harness.manifest import find_manifest, load_manifest
from kernels.harness.triton.check import _Case

from .conftest import HAS_CUDA, ROOT, harness, variant
from .test_contracts import RMSNORM_CONTRACT, write_kernel

KDA = ROOT / "kernels" / "kda"
DECODE_C = KDA / "decode_contract.py"
RANGED = "call 2 (same buffers, inputs over the contract's ranges, extremes included): "


def decode_contract(**attrs):
    """The shipped decode contract with attributes replaced (a module of our own: nothing on disk)."""
    base = load_contract(find_manifest("kda.decode")).mod
    mod = types.SimpleNamespace(**{n: getattr(base, n) for n in dir(base) if not n.startswith("__")})
    for n, v in attrs.items():
        setattr(mod, n, v)
    return Contract(DECODE_C, mod)


# (a) RANGES is validated ----------------------------------------------------------------------------

@pytest.mark.parametrize("ranges,needle", [
    ([("g", -1.0, 0.0)], "RANGES must be a dict {input name: (lo, hi)}, got list"),
    ({"nope": (0.0, 1.0)}, "RANGES names 'nope', which is not an INPUTS or INOUTS name"),
    ({"o": (0.0, 1.0)}, "RANGES names 'o', which is not an INPUTS or INOUTS name"),   # an output
    ({"g": (0.0, -1.0)}, "RANGES['g'] = (0.0, -1.0): lo > hi"),
    ({"g": (float("nan"), 0.0)}, "both ends must be finite"),
    ({"v": (-16.0, float("inf"))}, "both ends must be finite"),
    ({"g": (-1.0,)}, "RANGES['g'] must be a pair of numbers (lo, hi)"),
    ({"g": ("-1", "0")}, "RANGES['g'] must be a pair of numbers (lo, hi)"),
    ({"beta": (False, True)}, "RANGES['beta'] must be a pair of numbers (lo, hi)"),
    ({"g": -1.0}, "RANGES['g'] must be a pair of numbers (lo, hi)"),
], ids=["not-a-dict", "unknown", "output", "lo-above-hi", "nan", "inf", "one-end", "strings", "bools", "number"])
def test_malformed_ranges_are_one_clear_line_at_load(ranges, needle):
    with pytest.raises(ContractError) as e:
        decode_contract(RANGES=ranges)
    msg = str(e.value)
    assert needle in msg and str(DECODE_C) in msg and "\n" not in msg, msg


def test_a_range_on_what_is_not_a_float_tensor_is_an_error_when_drawn():
    # int64 slots and a scalar have no values to draw a range over; which is which depends on
    # tensors(shape), so the first draw says so
    shape = find_manifest("kda.decode").shapes["cpu"][0]
    c = decode_contract(RANGES={"slots": (0, 2)})
    assert c.ranges == {"slots": (0.0, 2.0)}   # ints are numbers: loaded as floats
    with pytest.raises(ContractError, match=r"RANGES names 'slots', a tensor of int64: only float tensors"):
        c.extremes(c.make_inputs(shape, np.random.default_rng(0)), np.random.default_rng(1))


@pytest.mark.skipif(HAS_CUDA, reason="the CPU check's error path")
def test_a_malformed_range_stops_the_check_with_status_error(tmp_path):
    con = RMSNORM_CONTRACT.replace('OUTPUTS = ["y"]\n', 'OUTPUTS = ["y"]\nRANGES = {"x": (1.0, -1.0)}\n')
    rc, out = harness("check", "--manifest", str(write_kernel(tmp_path, "rmsnorm", contract=con)), "--quick",
                      "--seed", "5")
    assert rc == 2 and out["status"] == "error", (rc, out.get("status"), out.get("failures"))
    assert "RANGES['x'] = (1.0, -1.0): lo > hi" in out["error"] and "\n" not in out["error"], out["error"]
    # and a scalar named in RANGES: the same, once the first case is drawn
    con = RMSNORM_CONTRACT.replace('OUTPUTS = ["y"]\n', 'OUTPUTS = ["y"]\nRANGES = {"eps": (0.0, 1.0)}\n')
    rc, out = harness("check", "--manifest", str(write_kernel(tmp_path / "s", "rmsnorm", contract=con)),
                      "--quick", "--seed", "5")
    assert rc == 2 and "RANGES names 'eps', a scalar (1e-05): only float tensors" in out.get("error", ""), out


# (b) the drawing ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["kda.decode", "kda.prefill"])
def test_call_2_draws_every_declared_input_over_its_range_ends_included(kernel):
    m = find_manifest(kernel)
    op = load_contract(m)
    assert op.ranges and set(op.ranges) <= set(op.inputs + op.inouts)
    for i, shape in enumerate(m.shapes["cpu"]):
        c = _Case(op, shape, 11, i)
        real, wide = c.xs
        assert c.ranged and c.prefix(1) == RANGED and c.prefix(0) == ""
        for n, (lo, hi) in op.ranges.items():
            if wide[n] is None:   # an OPTIONAL input this case leaves out stays out
                assert n in op.optional and real[n] is None and not c.optional
                continue
            a = wide[n]
            assert a.dtype == real[n].dtype and a.shape == real[n].shape
            assert a.min() >= lo and a.max() <= hi, (n, a.min(), a.max())
            if a.size == 1:
                assert a.item() in (lo, hi)
                continue
            k = max(1, a.size // 8)
            assert (a == lo).sum() >= k and (a == hi).sum() >= k, (n, (a == lo).sum(), (a == hi).sum(), k)
            # and drawn over the range between them, not just its ends
            inner = a[(a > lo) & (a < hi)]
            if a.size >= 64:
                assert inner.size >= a.size // 2 and inner.max() - inner.min() > 0.5 * (hi - lo), n
        # call 1 stays realistic: nothing there reaches the far end of g's range
        assert real["g"].min() > np.log(0.5) - 1e-6 >= op.ranges["g"][0]
        if kernel == "kda.decode":   # the declared in/out too
            assert wide["state"].max() == op.ranges["state"][1]
        # undeclared inputs untouched: call 2's q, k (and slots) are make_inputs' own
        fresh = op.make_inputs(shape, np.random.default_rng([11, 1]),
                               without=() if c.optional else op.optional)
        for n in op.inputs + op.inouts:
            if n not in op.ranges:
                assert np.array_equal(wide[n], fresh[n]), n


def test_the_drawing_is_deterministic_per_seed_and_leaves_its_input_alone():
    m = find_manifest("kda.decode")
    op, shape = load_contract(m), m.shapes["cpu"][1]
    a, b, other = _Case(op, shape, 5, 1), _Case(op, shape, 5, 1), _Case(op, shape, 6, 1)
    for n in op.ranges:
        assert np.array_equal(a.xs[1][n], b.xs[1][n])
        assert not np.array_equal(a.xs[1][n], other.xs[1][n])
    x = op.make_inputs(shape, np.random.default_rng(0))
    before = {n: v.copy() for n, v in op.arrays(x).items()}
    y = op.extremes(x, np.random.default_rng(1))
    assert all(np.array_equal(x[n], before[n]) for n in before)             # a new dict, new arrays
    assert all(y[n] is x[n] for n in before if n not in op.ranges)
    assert all(not np.shares_memory(y[n], x[n]) for n in op.ranges)


def test_one_input_set_and_a_contract_without_ranges_are_left_as_they_were():
    m = find_manifest("kda.decode")
    op, shape = load_contract(m), m.shapes["cpu"][2]
    one = _Case(op, shape, 5, 0, sets=1, salt=(2, 0))   # a GPU specialization's case
    assert not one.ranged and op.ranges
    plain = decode_contract(RANGES=None)
    c = _Case(plain, shape, 5, 0)
    assert not c.ranged and c.prefix(1) == "call 2 (same buffers, new inputs): "
    assert c.xs[1]["g"].min() > np.log(0.5) - 1e-6


def test_range_ends_a_float32_cannot_hold_are_kept_inside():
    # float32 rounds 0.7 down and 1.1 up, both outside [0.7, 1.1]: the ends drawn are the float32
    # values nearest inside
    shape = find_manifest("kda.decode").shapes["cpu"][1]
    lo, hi = np.float32(0.7), np.float32(1.1)
    assert float(lo) < 0.7 and float(hi) > 1.1
    c = decode_contract(RANGES={"beta": (0.7, 1.1)})
    b = c.extremes(c.make_inputs(shape, np.random.default_rng(0)), np.random.default_rng(1))["beta"]
    assert float(b.min()) >= 0.7 and float(b.max()) <= 1.1
    assert b.min() == np.nextafter(lo, np.float32(2)) and b.max() == np.nextafter(hi, np.float32(0))


# (c) cheats right only on realistic inputs -----------------------------------------------------------------

G_LOAD = "    b_g = tl.load(p_g, mask=m_k, other=0.).to(tl.float32)           # [BK]\n"
BETA_LOAD = "    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)         # []\n"


def check(src, kernel="kda.decode"):
    return harness("check", "--kernel", kernel, "--source", str(src), "--quick", "--seed", "3")


def caught_on_call_2_only(rc, out, output):
    """Failed; the cases failed on call 2 only (call 1, realistic, passed), naming `output`. (A GPU
    specialization may catch it too: its realistic inputs are many heads, its programs sampled.)"""
    assert rc == 1 and out["status"] == "failed", (rc, out.get("status"), out.get("error"))
    fails = [f for c in out["cases"] for f in c["failures"]]
    assert fails and all(f.startswith(RANGED) for f in fails), fails[:3]
    assert any(f.startswith(f"{RANGED}{output}: ") for f in fails), fails[:3]
    assert all(c["calls"][0]["outputs"][output]["rel_l2"] < 1e-6 for c in out["cases"])


@pytest.mark.parametrize("edit,output", [
    # decays stronger than exp(-0.7) treated as exp(-0.7): realistic g is log U(0.5, 1) > -0.694
    ((G_LOAD, G_LOAD + "    b_g = tl.maximum(b_g, -0.7)\n"), "state"),
    # step sizes capped: a realistic draw exceeds 0.99 in 1% of heads, none at seed 3
    ((BETA_LOAD, BETA_LOAD + "    b_beta = tl.minimum(b_beta, 0.99)\n"), "state"),
    # ... or just below 1: a uniform draw rarely lands above 0.9999, the range's end always does
    ((BETA_LOAD, BETA_LOAD + "    b_beta = tl.minimum(b_beta, 0.9999)\n"), "state"),
], ids=["g-clamped-at-0.7", "beta-clamped-at-0.99", "beta-clamped-at-0.9999"])
def test_a_clamp_outside_the_realistic_draws_is_caught(edit, output, tmp_path):
    src = variant(tmp_path, KDA / "decode.py", [edit])
    caught_on_call_2_only(*check(src), output)


PREFILL_G_LOAD = "        b_g = tl.load(p_g, mask=m_tk, other=0.).to(tl.float32)                    # [BT, BK]\n"


def test_a_prefill_right_only_down_to_the_old_kernels_limit_is_caught(tmp_path):
    # decays below -2.5 per token treated as -2.5: where the prefill's range stopped while the
    # baseline itself overflowed below about -2.8 (issue #50); the full range [-30, 0] now reaches it
    src = variant(tmp_path, KDA / "prefill.py", [(PREFILL_G_LOAD, PREFILL_G_LOAD + "        b_g = tl.maximum(b_g, -2.5)\n")])
    rc, out = check(src, "kda.prefill")
    assert rc == 1 and out["status"] == "failed", (rc, out.get("status"), out.get("error"))
    fails = [f for c in out["cases"] for f in c["failures"]]
    assert fails and all(f.startswith(RANGED) for f in fails), fails[:3]
    assert any(f.startswith(f"{RANGED}final_state: ") for f in fails), fails[:3]


def test_the_cuda_kernel_draws_the_same_ranges(tmp_path):
    # |v| capped at 5: a standard normal v passes 5 once in 2 million draws
    src = variant(tmp_path, ROOT / "kernels" / "kda_cuda" / "decode.cu",
                  [("float d = b * (v_n[j] - p);", "float d = b * (fminf(fmaxf(v_n[j], -5.0f), 5.0f) - p);")])
    caught_on_call_2_only(*check(src, "kda_cuda.decode"), "o")


@pytest.mark.parametrize("kernel,worst", [("kda.decode", 1e-6), ("kda_cuda.decode", 1e-6), ("kda.prefill", 5e-3)])
def test_the_baselines_pass_over_the_ranges(kernel, worst):
    rc, out = harness("check", "--kernel", kernel, "--quick", "--seed", "3")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    # call 2 ran on the ranges, as accurately as call 1 (decode: float32 rounding; prefill: TF32 dots)
    assert all(max(m["rel_l2"] for m in c["calls"][1]["outputs"].values()) < worst for c in out["cases"])
