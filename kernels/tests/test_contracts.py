"""Contracts as data (issue #26, docs/CONTRACTS.md): kernels of our own, written by the test outside
kernels/ with a format-2 manifest and a contract module beside each, checked through
`--manifest PATH`. The harness knows nothing of them but what those two files say: the baseline
passes, a planted wrong variant fails at correctness, and a broken contract is one line naming its
file and function, with status "error" (never a verdict on the kernel)."""
import os
import subprocess
import sys
import json
import textwrap

import numpy as np
import pytest

from .conftest import HAS_CUDA, ROOT, harness

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="the checks of these kernels are written for the CPU paths")

# 1. a row-wise Triton kernel with a scalar argument ---------------------------------------------

RMSNORM = '''
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x, w, y, eps, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    v = tl.load(x + row * N + offs, mask=m, other=0.0)
    ms = tl.sum(v * v, axis=0) / N
    r = 1.0 / tl.sqrt(ms + eps)
    ww = tl.load(w + offs, mask=m, other=0.0)
    tl.store(y + row * N + offs, v * r * ww, mask=m)


def rmsnorm(x, w, eps, y):
    M, N = x.shape
    rmsnorm_kernel[(M,)](x, w, y, eps, N, BLOCK=triton.next_power_of_2(N))
    return y
'''

RMSNORM_CONTRACT = '''
import numpy as np

ARGS = ["x", "w", "eps", "y"]
INPUTS = ["x", "w", "eps"]
INOUTS = []
OUTPUTS = ["y"]


def tensors(s):
    M, N = s["M"], s["N"]
    return {"x": ((M, N), "float32"), "w": ((N,), "float32"), "eps": 1e-5, "y": ((M, N), "float32")}


def make_inputs(s, rng, variant=None):
    M, N = s["M"], s["N"]
    return {"x": rng.standard_normal((M, N)).astype(np.float32),
            "w": rng.uniform(0.5, 1.5, N).astype(np.float32), "eps": 1e-5}


def reference(x):
    v = x["x"].astype(np.float64)
    r = 1.0 / np.sqrt((v * v).mean(axis=1, keepdims=True) + x["eps"])
    return {"y": v * r * x["w"].astype(np.float64)}


def smaller(s):
    return [dict(s, M=m) for m in (1, 2, 4) if m < s["M"]]
'''

TOLERANCE = '''
[tolerance]
rel_l2 = 1e-5
slice_rel_l2 = 1e-4
max_abs_rel = 1e-4
'''

RMSNORM_TOML = '''
format = 2
name = "mine.rmsnorm"
language = "triton"
source = "rmsnorm.py"
entry = "rmsnorm_kernel"
launcher = "rmsnorm"
contract = "rmsnorm_contract.py"
''' + TOLERANCE + '''
[shapes]
cpu = [{ M = 3, N = 64 }, { M = 5, N = 40 }]
gpu = [{ M = 64, N = 256 }]
bench = { M = 64, N = 256 }

[floor]
bytes = "4 * (2 * M * N + N)"
flops = "4 * M * N"
'''

# 2. two outputs and an in-place buffer ------------------------------------------------------------

TWO_OUT = '''
import triton
import triton.language as tl


@triton.jit
def two_out_kernel(x, acc, y, z, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m, other=0.0)
    a = tl.load(acc + offs, mask=m, other=0.0)
    tl.store(y + offs, 2.0 * v, mask=m)
    tl.store(z + offs, v + 1.0, mask=m)
    tl.store(acc + offs, a + v, mask=m)


def two_out(x, acc, y, z):
    n = x.shape[0]
    two_out_kernel[(triton.cdiv(n, 32),)](x, acc, y, z, n, BLOCK=32)
'''

TWO_OUT_CONTRACT = '''
import numpy as np

ARGS = ["x", "acc", "y", "z"]
INPUTS = ["x"]
INOUTS = ["acc"]
OUTPUTS = ["y", "z"]


def tensors(s):
    n = (s["L"],)
    return {"x": (n, "float32"), "acc": (n, "float32"), "y": (n, "float32"), "z": (n, "float32")}


def make_inputs(s, rng, variant=None):
    return {"x": rng.standard_normal(s["L"]).astype(np.float32),
            "acc": rng.standard_normal(s["L"]).astype(np.float32)}


def reference(x):
    v = x["x"].astype(np.float64)
    return {"y": 2 * v, "z": v + 1, "acc": x["acc"].astype(np.float64) + v}
'''

TWO_OUT_TOML = '''
format = 2
name = "mine.two_out"
language = "triton"
source = "two_out.py"
entry = "two_out_kernel"
launcher = "two_out"
contract = "two_out_contract.py"
''' + TOLERANCE + '''
[shapes]
cpu = [{ L = 100 }, { L = 32 }]
gpu = [{ L = 4096 }]
bench = { L = 4096 }

[floor]
bytes = "4 * 5 * L"
flops = "3 * L"
'''

# 3. a CUDA row reduction (a 2-D grid: one row per blockIdx.y) ------------------------------------

ROWSUM = '''
extern "C" __global__ void rowsum_kernel(const float* x, float* out, int N)
{
    int row = blockIdx.y, t = threadIdx.x;
    float acc = 0.0f;
    for (int i = t; i < N; i += blockDim.x) acc += x[row * N + i];
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if (t == 0) out[row] = acc;
}
'''

ROWSUM_CONTRACT = '''
import numpy as np

ARGS = ["x", "out"]
INPUTS = ["x"]
INOUTS = []
OUTPUTS = ["out"]


def tensors(s):
    return {"x": ((s["M"], s["N"]), "float32"), "out": ((s["M"],), "float32")}


def make_inputs(s, rng, variant=None):
    return {"x": rng.standard_normal((s["M"], s["N"])).astype(np.float32)}


def reference(x):
    return {"out": x["x"].astype(np.float64).sum(axis=1)}


def launch(s):
    return {"grid": [1, s["M"]], "block": [32], "params": ["x", "out", {"int": s["N"]}]}


def slices(name, a):
    yield (0,), a
'''

ROWSUM_TOML = '''
format = 2
name = "mine.rowsum"
language = "cuda"
source = "rowsum.cu"
entry = "rowsum_kernel"
contract = "rowsum_contract.py"

[tolerance]
rel_l2 = 1e-5
slice_rel_l2 = 1e-5
max_abs_rel = 1e-5

[shapes]
cpu = [{ M = 3, N = 100 }, { M = 2, N = 7 }]
gpu = [{ M = 64, N = 1000 }]
bench = { M = 64, N = 1000 }

[floor]
bytes = "4 * (M * N + M)"
flops = "M * N"
'''

KERNELS = {
    "rmsnorm": ("rmsnorm.py", RMSNORM, RMSNORM_CONTRACT, RMSNORM_TOML,
                ("ms = tl.sum(v * v, axis=0) / N", "ms = tl.sum(v * v, axis=0) / (N - 1)"), "y"),
    "two_out": ("two_out.py", TWO_OUT, TWO_OUT_CONTRACT, TWO_OUT_TOML,
                ("tl.store(acc + offs, a + v, mask=m)", "tl.store(acc + offs, a + 2.0 * v, mask=m)"), "acc"),
    "rowsum": ("rowsum.cu", ROWSUM, ROWSUM_CONTRACT, ROWSUM_TOML,
               ("for (int i = t; i < N;", "for (int i = t; i < N - 1;"), "out"),
}


def write_kernel(d, which, contract=None):
    """The kernel, its contract and its manifest in the directory `d` (outside kernels/)."""
    src, text, con, toml, _, _ = KERNELS[which]
    d.mkdir(parents=True, exist_ok=True)
    (d / src).write_text(text)
    (d / f"{which}_contract.py").write_text(textwrap.dedent(contract if contract is not None else con))
    (d / f"{which}.toml").write_text(toml)
    return d / f"{which}.toml"


def check(manifest, *extra):
    return harness("check", "--manifest", str(manifest), "--quick", "--seed", "5", *extra)


@cpu_only
@pytest.mark.parametrize("which", list(KERNELS))
def test_a_kernel_of_our_own_passes_and_a_planted_bug_fails(which, tmp_path):
    d = tmp_path / "mykernels"
    manifest = write_kernel(d, which)
    rc, out = check(manifest)
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    assert out["kernel"] == f"mine.{which}" and out["manifest"] == str(manifest)
    assert out["specializations"]["cases"] and out["program_order"]["passed"]
    src, _, _, _, (old, new), bad_output = KERNELS[which]
    wrong = tmp_path / f"wrong_{src}"
    text = (d / src).read_text()
    assert text.count(old) == 1
    wrong.write_text(text.replace(old, new))
    rc, out = check(manifest, "--source", str(wrong))
    assert rc == 1 and out["status"] == "failed", (out.get("failures"), out.get("error"))
    assert any(f.split(": ", 1)[-1].startswith(f"{bad_output}: ") for f in out["failures"]), out["failures"]


@cpu_only
def test_the_in_place_buffer_is_compared_after_the_call(tmp_path):
    manifest = write_kernel(tmp_path / "k", "two_out")
    rc, out = check(manifest)
    assert rc == 0, out.get("failures")
    assert set(out["cases"][0]["outputs"]) == {"y", "z", "acc"}


@cpu_only
def test_a_manifest_outside_the_repository_runs_from_anywhere(tmp_path):
    """cwd elsewhere, the harness found through PYTHONPATH, the manifest path relative to cwd."""
    d = tmp_path / "work"
    write_kernel(d / "mykernels", "rmsnorm")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "kernels.harness", "check", "--manifest", "mykernels/rmsnorm.toml",
                        "--quick", "--seed", "1"], cwd=d, env=env, capture_output=True, text=True, timeout=600)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"), r.stderr[-2000:])
    # and the other subcommands take it too
    rc, out = harness("profile", "--manifest", str(d / "mykernels" / "rmsnorm.toml"))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    assert out["kernel"] == "mine.rmsnorm" and out["totals"]["load_bytes"] > 0
    # the GPU gate's launch specs of a CUDA kernel: grid, block and parameters from its contract
    m = write_kernel(d / "mykernels", "rowsum")
    rc, out = harness("spec", "--manifest", str(m), "--out", str(tmp_path / "specs"), "--sets", "1", "--seed", "2")
    assert rc == 0 and out["status"] == "ok", out.get("error")
    spec = json.loads((tmp_path / "specs" / "M64-N1000" / "launch.json").read_text())
    assert (spec["grid"], spec["block"]) == ([1, 64, 1], [32, 1, 1])
    assert [p["kind"] for p in spec["params"]] == ["tensor", "tensor", "int"] and spec["params"][2]["value"] == 1000


def _broken(body_from, body_to):
    con = RMSNORM_CONTRACT
    assert con.count(body_from) == 1, body_from
    return con.replace(body_from, body_to)


BROKEN = {
    "raises": (_broken('    v = x["x"].astype(np.float64)\n', '    raise ValueError("not written yet")\n'),
               "reference(): raised ValueError: not written yet"),
    "missing": (_broken("def reference(x):", "def reference_unused(x):"), "reference missing"),
    "wrong shape": (_broken('return {"y": v * r * x["w"].astype(np.float64)}',
                            'return {"y": (v * r * x["w"].astype(np.float64))[:, :-1]}'),
                    "reference(): y: shape"),
    "nan": (_broken('return {"y": v * r * x["w"].astype(np.float64)}',
                    'return {"y": v * r * x["w"].astype(np.float64) * np.nan}'),
            "reference(): y: "),
    "bad dtype": (_broken('"w": rng.uniform(0.5, 1.5, N).astype(np.float32)', '"w": rng.uniform(0.5, 1.5, N)'),
                  "make_inputs(): w: got float64"),
    "import fails": ("import numpy as np\nimport no_such_module_here\n" + RMSNORM_CONTRACT,
                     "import raised ModuleNotFoundError"),
}


@cpu_only
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_contract_is_one_line_and_an_error(case, tmp_path):
    con, needle = BROKEN[case]
    manifest = write_kernel(tmp_path / "k", "rmsnorm", contract=con)
    rc, out = check(manifest)
    assert rc == 2 and out["status"] == "error", (rc, out.get("status"), out.get("failures"))
    err = out["error"]
    assert "\n" not in err and str(tmp_path / "k" / "rmsnorm_contract.py") in err and needle in err, err
    assert "traceback" not in out


def test_contract_validation_without_a_worker(tmp_path):
    """The loader's own checks, in-process (the contract is trusted code of the checker's side)."""
    from kernels.harness.contract import ContractError, load_contract
    from kernels.harness.manifest import load_manifest
    m = load_manifest(write_kernel(tmp_path / "a", "rowsum"))
    c = load_contract(m)
    assert c.launch({"M": 3, "N": 5}) == {"grid": [1, 3, 1], "block": [32, 1, 1],
                                           "params": [{"ptr": "x"}, {"ptr": "out"}, {"int": 5}]}
    bad = RMSNORM_CONTRACT.replace('INOUTS = []', 'INOUTS = ["w"]')
    with pytest.raises(ContractError, match="name every ARGS and RETURNS name once"):
        load_contract(load_manifest(write_kernel(tmp_path / "b", "rmsnorm", contract=bad)))
    # an output neither passed in nor returned: the two ways to say it, not that the roles do not add up
    bad = RMSNORM_CONTRACT.replace('ARGS = ["x", "w", "eps", "y"]', 'ARGS = ["x", "w", "eps"]')
    with pytest.raises(ContractError, match=r"y not among ARGS or RETURNS: an output is either a parameter"):
        load_contract(load_manifest(write_kernel(tmp_path / "e", "rmsnorm", contract=bad)))
    # ... and one the launcher returns (RETURNS) loads, with y among the tensors
    c = load_contract(load_manifest(write_kernel(tmp_path / "f", "rmsnorm", contract=bad + '\nRETURNS = ["y"]\n')))
    assert list(c.returns) == ["y"] and "y" not in c.args and c.tensors({"M": 3, "N": 4})["y"] == ((3, 4), "float32")
    bad_returns = RMSNORM_CONTRACT + '\nRETURNS = ["y"]\n'
    with pytest.raises(ContractError, match="RETURNS names y: each must be one of OUTPUTS, once, and not among ARGS"):
        load_contract(load_manifest(write_kernel(tmp_path / "g", "rmsnorm", contract=bad_returns)))
    # a slice's index may be a bare int (runs of a 1-D output); what is no (index, sub-array) pair is one line
    con = ROWSUM_CONTRACT.replace("    yield (0,), a\n", "    return [(i, a[i:i + 2]) for i in range(0, a.size, 2)]\n")
    c = load_contract(load_manifest(write_kernel(tmp_path / "c", "rowsum", contract=con)))
    got = list(c.slices("out", np.arange(5.0)))
    assert [i for i, _ in got] == [(0,), (2,), (4,)] and got[2][1].tolist() == [4.0]
    con = ROWSUM_CONTRACT.replace("    yield (0,), a\n", "    return [a]\n")
    c = load_contract(load_manifest(write_kernel(tmp_path / "d", "rowsum", contract=con)))
    with pytest.raises(ContractError, match=r"slices\(\): out: ndarray is not an \(index, sub-array\) pair"):
        list(c.slices("out", np.arange(5.0)))


@cpu_only
def test_a_format_1_manifest_finds_its_shipped_contract(tmp_path):
    """`op` names a contract module kidiom ships (OP = "kda_decode" in kernels/kda/decode_contract.py)."""
    text = (ROOT / "kernels" / "kda" / "decode.toml").read_text()
    text = text.replace("format = 2", "format = 1").replace(
        'contract = "decode_contract.py"', 'op = "kda_decode"\nreference = "kernels.kda.reference:naive_decode_kda"')
    (tmp_path / "decode.toml").write_text(text)
    (tmp_path / "decode.py").write_text((ROOT / "kernels" / "kda" / "decode.py").read_text())
    rc, out = check(tmp_path / "decode.toml")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    (tmp_path / "decode.toml").write_text(text.replace('op = "kda_decode"', 'op = "no_such_op"'))
    rc, out = check(tmp_path / "decode.toml")
    assert rc == 2 and out["status"] == "error" and "no contract module implements op 'no_such_op'" in out["error"]


RELATION = '''

def doubled(run, shape, rng):
    """rmsnorm(2 x) == rmsnorm(x): x doubled by the two_out kernel (its y), then normalised."""
    M, N = shape["M"], shape["N"]
    x = make_inputs(shape, rng)
    twice = run("with", {"L": M * N}, {"x": x["x"].reshape(-1), "acc": np.zeros(M * N, np.float32)})["y"]
    a = run("self", shape, dict(x, x=twice.reshape(M, N)))["y"]
    b = run("self", shape, x)["y"]
    return [("y", a, b.astype(np.float64))]


def broken(run, shape, rng):
    raise RuntimeError("not yet")
'''


@cpu_only
def test_relations_run_the_other_kernel_and_a_broken_one_is_an_error(tmp_path):
    d = tmp_path / "k"
    write_kernel(d, "two_out")
    m = write_kernel(d, "rmsnorm", contract=RMSNORM_CONTRACT + RELATION)
    rel = '\n[[relation]]\nwith = "mine.two_out"\ncheck = "rmsnorm_contract:doubled"\ncpu = { M = 3, N = 64 }\n'
    m.write_text(m.read_text() + rel + rel.replace("M = 3", "M = 2"))
    rc, out = harness("check", "--manifest", str(m), "--seeds", "1", "--seed", "4")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    c = out["consistency"]
    assert c["with"] == "mine.two_out" and c["passed"] and c["y_rel_l2"] < 1e-5, c
    assert [r["shape"]["M"] for r in out["relations"]] == [3, 2]
    m.write_text(m.read_text().replace("rmsnorm_contract:doubled", "rmsnorm_contract:broken"))
    rc, out = harness("check", "--manifest", str(m), "--seeds", "1", "--seed", "4")
    assert rc == 2 and out["status"] == "error", out.get("failures")
    assert out["error"].endswith("rmsnorm_contract.py: broken(): raised RuntimeError: not yet"), out["error"]
