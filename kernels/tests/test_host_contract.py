"""The host (C++) harness keeps no operation-specific code: a pybind11 module of our own (a float32
axpy, y += a * x in place, with a scalar), its own host contract and format-2 manifest in a temp
dir, checked by the generic harness through `--manifest`. The right module passes (within the
manifest's tolerance), a planted wrong one is rejected, and a contract that cannot be used is one
line, status error, error_kind "contract", never a verdict.

Cost: two small compiles at once (the right module and the planted one; cached by source hash
across runs: about 14 s on 2 cores uncached, 5 s cached) and a few harness runs; the broken
contracts stop before any build.
"""
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import harness

SOURCE = r"""
#include <pybind11/pybind11.h>

namespace py = pybind11;

// y += a * x over float32 buffers of one size; the GIL is released around the loop
void axpy(float a, py::buffer x, py::buffer y) {
    py::buffer_info xi = x.request(), yi = y.request(true);
    if (xi.format != py::format_descriptor<float>::format() || yi.format != py::format_descriptor<float>::format())
        throw py::type_error("axpy: x and y must be float32 buffers");
    if (xi.size != yi.size)
        throw py::value_error("axpy: x has " + std::to_string(xi.size) + " elements, y " + std::to_string(yi.size));
    const float* xp = static_cast<const float*>(xi.ptr);
    float* yp = static_cast<float*>(yi.ptr);
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < xi.size; ++i) yp[i] += a * xp[i];
}

PYBIND11_MODULE(axpy, m) { m.def("axpy", &axpy); }
"""

CONTRACT = '''
"""Host contract of axpy(a, x, y): y += a * x in place (float32)."""
import numpy as np

from kernels.harness.host.cases import IN_SENTINEL, OUT_SENTINEL, Arr, Case, scalar

FUNCTIONS = ["axpy"]
FAMILIES = ["axpy/random", "axpy/concurrent"]
A = 0.75


def cases(family, shape, seed, rng, params):
    N = shape["N"]
    x0 = rng.standard_normal(N).astype(np.float32)
    y0 = rng.standard_normal(N).astype(np.float32)
    want = A * x0.astype(np.float64) + y0
    x = Arr("x", x0, 16, np.float32(IN_SENTINEL))
    y = Arr("y", y0, 16, np.float32(OUT_SENTINEL), expected=want)
    cid = f"{family} N={N}"
    if family == "axpy/random":
        spec = {"kind": "call", "fn": "axpy", "args": [scalar(A), x.arg(), y.arg()]}
    else:   # two threads on the two halves
        h = N // 2
        halves = [(0, h), (h, N - h)]
        spec = {"kind": "threads", "fn": "axpy", "repeat": 1,
                "threads": [[scalar(A), x.arg(start=x.pad + s, count=n, shape=[n]),
                             y.arg(start=y.pad + s, count=n, shape=[n])] for s, n in halves]}
    return [Case(cid, family, dict(shape), seed, spec, [x, y], {"y": "y"}, page_bytes=max(1, N // 4))]


def bad_cases(shape, seed, rng, params):
    N = shape["N"]
    x = Arr("x", rng.standard_normal(N).astype(np.float32), 16, np.float32(IN_SENTINEL))
    y = Arr("y", rng.standard_normal(N - 1).astype(np.float32), 16, np.float32(OUT_SENTINEL))
    spec = {"kind": "call", "fn": "axpy", "args": [scalar(A), x.arg(), y.arg()]}
    return [Case(f"axpy/bad-sizes N={N}", "axpy/bad-sizes", dict(shape), seed, spec, [x, y], {},
                 expect_exc=("ValueError", [str(N), str(N - 1)]))]
'''

MANIFEST = """
format = 2
name = "test.axpy"
language = "cpp"
source = "axpy.cpp"
entry = "axpy"
launcher = "axpy"
contract = "axpy_contract.py"

[tolerance]
rel_l2 = 1e-6
slice_rel_l2 = 1e-6
max_abs_rel = 1e-6

[shapes]
cpu = [{ N = 100 }, { N = 7 }]
gpu = []
bench = { N = 4096 }

[floor]
bytes = "12 * N"
flops = "2 * N"
"""

# name -> (how the contract is broken, the function its one-line error names)
BROKEN = {
    "raises": (CONTRACT.replace("    N = shape[\"N\"]\n    x0 =", "    N = shape[\"N\"]\n    raise RuntimeError('no')\n"
                                "    x0 ="), "cases(): raised RuntimeError: no"),
    "wrong-size": (CONTRACT.replace("want = A * x0.astype(np.float64) + y0", "want = np.zeros(N + 1)"),
                   "cases(): case 'axpy/random N=100': y: expected 101 elements, the array has 100"),
    "nan": (CONTRACT.replace("want = A * x0.astype(np.float64) + y0", "want = np.full(N, np.nan)"),
            "non-finite expected values"),
    "lacks-cases": (CONTRACT.replace("def cases(", "def cases_renamed("), "cases missing"),
    "unknown-function": (CONTRACT.replace('"fn": "axpy", "args": [scalar(A), x.arg(), y.arg()]}\n    else',
                                          '"fn": "saxpy", "args": [scalar(A), x.arg(), y.arg()]}\n    else'),
                         "calls 'saxpy', not one of FUNCTIONS"),
}


def _kernel(root, source=SOURCE, contract=CONTRACT):
    root.mkdir(parents=True, exist_ok=True)
    (root / "axpy.cpp").write_text(source)
    (root / "axpy_contract.py").write_text(textwrap.dedent(contract))
    (root / "axpy.toml").write_text(MANIFEST)
    return root / "axpy.toml"


def _check(manifest, *extra):
    return harness("check", "--manifest", str(manifest), "--quick", "--seed", "5", "--no-tsan", "--json", *extra)


def test_our_own_module_passes_and_a_planted_bug_is_rejected(tmp_path):
    # planted: y = a * x (the in-place accumulation forgotten); both built and checked at once
    wrong = _kernel(tmp_path / "wrong", source=SOURCE.replace("yp[i] += a * xp[i]", "yp[i] = a * xp[i]"))
    with ThreadPoolExecutor(max_workers=2) as ex:
        right_run = ex.submit(_check, _kernel(tmp_path / "right"))
        wrong_run = ex.submit(_check, wrong)
        (rc, out), (wrong_rc, wrong_out) = right_run.result(), wrong_run.result()
    assert rc == 0 and out["status"] == "passed", out.get("failures") or out.get("error")
    ids = [c["id"] for c in out["cases"]]
    assert ids == ["axpy/bad-sizes N=100", "axpy/random N=100", "axpy/concurrent N=100", "axpy/random N=7",
                   "axpy/concurrent N=7"], ids
    m = next(c for c in out["cases"] if c["id"] == "axpy/random N=100")["outputs"]["y"]
    assert m["rel_l2"] <= 1e-6 and m["nonfinite"] == 0
    rc, out = wrong_rc, wrong_out
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    assert any("y: beyond the tolerance: rel_l2" in f for f in out["failures"]), out["failures"]
    assert not any("bad-sizes" in f for f in out["failures"]), out["failures"]   # it still raises right
    print(f"\nplanted axpy -> {out['failures'][0][:200]}")


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_host_contract_is_one_line_error(name, tmp_path):
    contract, words = BROKEN[name]
    assert contract != CONTRACT
    manifest = _kernel(tmp_path, contract=contract)
    rc, out = _check(manifest)
    assert rc == 2 and out["status"] == "error" and out.get("error_kind") == "contract", out
    err = out["error"]
    assert "\n" not in err and err.startswith(f"contract {tmp_path.resolve() / 'axpy_contract.py'}"), err
    assert words in err, err
    assert "cases" not in out and "passed" not in out


def test_a_format_1_host_manifest_finds_the_shipped_contract(tmp_path):
    """`op = "kv_transfer"` (format 1, no `contract`) finds kernels/kv_transfer/kv_transfer_contract.py,
    and its cases are the format-2 manifest's (no build: the cases only)."""
    from kernels.harness.host import commands as host
    from kernels.harness.manifest import find_manifest, load_manifest
    two = find_manifest("kv_transfer")
    text = two.path.read_text().replace("format = 2", "format = 1").replace(
        'contract = "kv_transfer_contract.py"', 'op = "kv_transfer"\nreference = "kernels.kv_transfer.reference:gather"')
    (tmp_path / "kv.toml").write_text(text)
    (tmp_path / "kv_transfer.cpp").write_text("")
    one = load_manifest(tmp_path / "kv.toml")
    assert one.format == 1 and one.contract_path == two.contract_path
    a, b = host.make_cases(one, [3]), host.make_cases(two, [3])
    assert [c.id for c in a] == [c.id for c in b] and len(a) > 50
    assert all((x.expected is None) == (y.expected is None) and (x.expected is None or (x.expected == y.expected).all())
               for ca, cb in zip(a, b) for x, y in zip(ca.arrays, cb.arrays))


def test_bench_without_a_service_workload_is_a_contract_error(tmp_path):
    """The bench's workload is the contract's `service`; without one, bench stops before any build."""
    rc, out = harness("bench", "--manifest", str(_kernel(tmp_path)), "--rounds", "1", "--json")
    assert rc == 2 and out["status"] == "error" and out.get("error_kind") == "contract", out
    assert out["error"] == f"contract {tmp_path.resolve() / 'axpy_contract.py'}: service() is missing", out["error"]
