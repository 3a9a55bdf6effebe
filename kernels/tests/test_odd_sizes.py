"""The contract check's odd sizes (triton/check.py `odd_shapes`): every integer size made odd and
different from its first size and from the others, `[shapes] exact` and non-sizes kept."""
from types import SimpleNamespace

from kernels.harness.triton.check import odd_shapes


def manifest(cpu, exact=None):
    shapes = {"cpu": cpu, "gpu": [], "bench": {}}
    if exact is not None:
        shapes["exact"] = exact
    return SimpleNamespace(shapes=shapes)


def test_each_size_becomes_odd_and_new():
    assert odd_shapes(manifest([{"M": 1, "N": 64}])) == [{"M": 3, "N": 65}]
    assert odd_shapes(manifest([{"T": 3}])) == [{"T": 5}]


def test_sizes_that_would_meet_are_kept_apart():
    # N -> 5 and then T would be 5 as well: the second takes the next odd number
    (odd,) = odd_shapes(manifest([{"N": 4, "T": 3}]))
    assert odd == {"N": 5, "T": 7}
    assert len(set(odd.values())) == len(odd)


def test_exact_variables_flags_and_non_sizes_keep_their_values():
    shape = {"H": 2, "HV": 4, "K": 16, "causal": True, "dtype": "bf16", "zero": 0}
    (odd,) = odd_shapes(manifest([shape], exact=["H", "HV"]))
    assert odd == {"H": 2, "HV": 4, "K": 17, "causal": True, "dtype": "bf16", "zero": 0}


def test_a_shape_with_nothing_to_change_is_left_out_and_duplicates_once():
    assert odd_shapes(manifest([{"K": 16}], exact=["K"])) == []
    assert odd_shapes(manifest([{"N": 2}, {"N": 2}])) == [{"N": 3}]
