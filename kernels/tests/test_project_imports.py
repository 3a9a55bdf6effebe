"""A kernel file that imports its own project (FLA's import `fla.utils`, `fla.ops.utils`; issue
#48): the manifest's `[python] path` names where the project lies, and its packages are copied
into the sandbox, without the manifest and the contract; without the setting the failure names
the import and the setting."""
import json

from .conftest import harness
from .test_contracts import TOLERANCE

KERNEL = '''
import triton
import triton.language as tl

from myproj.ops.helpers import cdiv_rows
from myproj.ops.math import halve


@triton.jit
def halve_kernel(x, y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(y + offs, halve(tl.load(x + offs, mask=m, other=0.0)), mask=m)


def halve_rows(x, y):
    N = x.shape[0]
    halve_kernel[(cdiv_rows(N, 64),)](x, y, N, BLOCK=64)
    return y
'''

CONTRACT = '''
import numpy as np

ARGS = ["x", "y"]
INPUTS = ["x"]
INOUTS = []
OUTPUTS = ["y"]


def tensors(s):
    return {"x": ((s["N"],), "float32"), "y": ((s["N"],), "float32")}


def make_inputs(s, rng, variant=None):
    return {"x": rng.standard_normal(s["N"]).astype(np.float32)}


def reference(x):
    return {"y": x["x"].astype(np.float64) * 0.5}


def slices(name, a):
    return [(i, a[i:i + 16]) for i in range(0, a.size, 16)]
'''

MANIFEST = '''
format = 2
name = "myproj.halve"
language = "triton"
source = "halve.py"
entry = "halve_kernel"
launcher = "halve_rows"
contract = "halve_contract.py"
''' + TOLERANCE + '''
[shapes]
cpu = [{ N = 100 }]
gpu = [{ N = 4096 }]
bench = { N = 4096 }

[floor]
bytes = "8 * N"
flops = "N"
'''


def _project(root, python_path=True):
    """root/myproj/ a package (its ops the kernel's helpers, the kernel, contract and manifest
    beside them, as a project keeps its kernels)."""
    ops = root / "myproj" / "ops"
    ops.mkdir(parents=True)
    (root / "myproj" / "__init__.py").write_text("")
    (ops / "__init__.py").write_text("")
    (ops / "helpers.py").write_text("def cdiv_rows(n, block):\n    return (n + block - 1) // block\n")
    (ops / "math.py").write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                 "def halve(v):\n    return v * 0.5\n")
    (ops / "halve.py").write_text(KERNEL)
    (ops / "halve_contract.py").write_text(CONTRACT)
    (ops / "halve.toml").write_text(MANIFEST + ('\n[python]\npath = ["../.."]\n' if python_path else ""))
    return ops / "halve.toml"


def test_a_kernel_imports_its_own_project_from_the_manifests_python_path(tmp_path):
    manifest = _project(tmp_path)
    rc, out = harness("check", "--manifest", str(manifest), "--quick", "--seed", "3")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")


def test_the_copy_leaves_the_contract_and_manifest_out(tmp_path):
    """A candidate that reads the contract through the project's package finds nothing there."""
    manifest = _project(tmp_path)
    cheat = tmp_path / "cheat.py"
    cheat.write_text(KERNEL.replace("def halve_rows(x, y):\n", "def halve_rows(x, y):\n"
                                    "    import myproj.ops, os\n"
                                    "    here = os.path.dirname(myproj.ops.__file__)\n"
                                    "    assert not os.path.exists(os.path.join(here, 'halve_contract.py')), 'contract'\n"
                                    "    assert not os.path.exists(os.path.join(here, 'halve.toml')), 'manifest'\n"
                                    "    assert os.path.exists(os.path.join(here, 'helpers.py'))\n"))
    rc, out = harness("check", "--manifest", str(manifest), "--quick", "--seed", "3", "--source", str(cheat))
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))


def test_without_the_setting_the_failure_names_the_import_and_the_setting(tmp_path):
    manifest = _project(tmp_path, python_path=False)
    rc, out = harness("check", "--manifest", str(manifest), "--quick", "--seed", "3")
    assert rc != 0, out
    text = json.dumps(out)
    assert "No module named 'myproj'" in text and "[python] path" in text, text[:2000]


def test_a_validation_tree_reads_the_project_where_the_manifest_came_from(tmp_path):
    """The validator copies a manifest's directory alone into its tree, with a marker naming the
    root it came from (validator/src/tree.rs): `[python] path` is read from the original."""
    from kernels.harness.manifest import load_manifest
    original = _project(tmp_path / "user")
    tree = tmp_path / "tree"
    copied = tree / "myproj" / "ops"
    copied.mkdir(parents=True)
    for f in ("halve.py", "halve_contract.py", "halve.toml"):
        (copied / f).write_text((original.parent / f).read_text())
    (tree / ".kidiom-source-root").write_text(str(tmp_path / "user"))
    m = load_manifest(copied / "halve.toml")
    assert m.python_path == [(tmp_path / "user").resolve()], m.python_path
    # without the marker, relative to the copy: the tree's root, which holds no project
    (tree / ".kidiom-source-root").unlink()
    assert load_manifest(copied / "halve.toml").python_path == [tree.resolve()]


def test_a_kernel_that_imports_relatively_runs_in_its_package(tmp_path):
    """`from .helpers import cdiv_rows` (FLA's cyfa and deltaformer files): the file is imported
    as a module of the package it lies in under `[python] path`, whose top is copied although
    the file never names it; outside any package the manifest says none."""
    from kernels.harness.manifest import load_manifest
    manifest = _project(tmp_path)
    kernel = manifest.parent / "halve.py"
    kernel.write_text(KERNEL.replace("from myproj.ops.helpers import", "from .helpers import")
                      .replace("from myproj.ops.math import", "from .math import"))
    assert "myproj" not in kernel.read_text()
    assert load_manifest(manifest).python_package == "myproj.ops"
    rc, out = harness("check", "--manifest", str(manifest), "--quick", "--seed", "3")
    assert rc == 0 and out["status"] == "passed", (out.get("failures"), out.get("error"))
    rc, out = harness("compile", "--manifest", str(manifest))
    assert rc == 0 and out["status"] == "ok", out.get("error")
    # a folder without __init__.py is no package: nothing to be relative to
    (tmp_path / "myproj" / "ops" / "__init__.py").unlink()
    assert load_manifest(manifest).python_package is None


def test_arguments_beyond_a_launchers_places_go_to_its_keyword_only_parameters():
    """FLA's `qk_rmsnorm_fwd(x, weight, eps, *, store_rstd)`: the contract's ARGS are passed by
    place, those beyond the positional parameters bound to the keyword-only ones in order."""
    import types

    from kernels.harness.triton.arrays import launcher_of

    def norm(x, weight, eps=1e-6, *, store_rstd, dtype=None):
        return (x, weight, eps, store_rstd, dtype)

    mod = types.SimpleNamespace(norm=norm, Fn=types.SimpleNamespace(apply=max))
    f = launcher_of(mod, "norm")
    assert f(1, 2, 3, True) == (1, 2, 3, True, None)
    assert f(1, 2, 3, False, "bf16") == (1, 2, 3, False, "bf16")
    # without keyword-only parameters, or a builtin whose signature is unknown: the function itself
    mod.plain = lambda x, y: x + y
    assert launcher_of(mod, "plain") is mod.plain
    assert launcher_of(mod, "Fn.apply") is max
    assert launcher_of(mod, "missing") is None
