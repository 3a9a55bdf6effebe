"""Launch specs under the GPU machine's Triton (3.6) against those of our pinned Triton.

The GPU machine brings Triton 3.6; `spec` must work there and describe the same launch: the same
grid, block, parameter names, roles, dtypes and scalars, and a cubin whose `.nv.info` agrees with
its own spec (the compilers may differ in the code, not in the contract). scripts/test.sh makes
.venv-triton36 (kernels/requirements-triton36.txt); outside CI, without it, the test skips with
the reason; under CI it must run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_spec import nv_info


def _triton36():
    py = Path(os.environ.get("KIDIOM_TRITON36_PYTHON") or ROOT / ".venv-triton36" / "bin" / "python")
    try:
        r = subprocess.run([str(py), "-c", "import numpy, triton; print(triton.__version__)"], capture_output=True,
                           text=True, timeout=120)
        version = r.stdout.strip() if r.returncode == 0 else None
    except OSError:
        version = None
    if not (version or "").startswith("3.6"):
        why = f"no Python with Triton 3.6 at {py} (found {version}); scripts/test.sh makes it"
        assert not os.environ.get("CI"), why + " (CI must run this)"
        pytest.skip(why)
    return str(py)


def _emit(python, kernel, out, shapes):
    r = subprocess.run([python, "-m", "kernels.harness", "spec", "--kernel", kernel, "--out", str(out), "--seed", "7",
                        "--sets", "0", "--shapes", shapes], cwd=ROOT, capture_output=True, text=True, timeout=900)
    res = json.loads(r.stdout)
    assert r.returncode == 0 and res["status"] == "ok", (kernel, res.get("error"), r.stderr[-2000:])
    specs = {}
    for s in res["specs"]:
        d = Path(s["dir"])
        spec = json.loads((d / "launch.json").read_text())
        specs[s["label"]] = (spec, (d / "kernel.cubin").read_bytes())
    return res, specs


def _contract(spec):
    """What a spec says about the launch, without what the compiler chose (code, tool versions)."""
    keep = ("kernel", "grid", "block", "shape", "num_ctas", "cooperative", "pdl", "tensor_descriptors")
    params = [{k: v for k, v in p.items() if k != "divisible_by_16"} for p in spec["params"]]
    return {**{k: spec[k] for k in keep}, "params": params}


@pytest.mark.parametrize("kernel,shapes", [("kda.decode", "gpu1,bench"), ("kda.prefill", "gpu0,gpu1")])
def test_triton_3_6_specs_describe_the_same_launch(tmp_path, kernel, shapes):
    py36 = _triton36()
    r36, s36 = _emit(py36, kernel, tmp_path / "t36", shapes)
    rpin, spin = _emit(sys.executable, kernel, tmp_path / "pinned", shapes)
    assert r36["tools"]["triton"].startswith("3.6") and not rpin["tools"]["triton"].startswith("3.6")
    assert sorted(s36) == sorted(spin) == sorted(shapes.split(","))
    for label in s36:
        (a, cubin), (b, _) = s36[label], spin[label]
        assert _contract(a) == _contract(b), label
        # the 3.6 cubin's own parameter table is the one its spec packs against
        params, cbank, reqntid = nv_info(cubin, a["kernel"])
        assert len(params) == len(a["params"]) and reqntid == a["block"], label
        offsets = [params[i][0] for i in range(len(params))]
        assert offsets == sorted(offsets) and cbank >= offsets[-1] + params[len(params) - 1][1]
