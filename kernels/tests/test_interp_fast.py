"""Device-function calls skip the interpreter's redundant language patch (interp.py,
install_fast_device_calls): what a kernel computes is bit for bit the same, whichever language
modules its device functions reach (tl's helpers from triton.language.standard, which see
`core`; a @jit helper of the kernel's own module, which sees `tl`), and the skip saves time.

Each side runs in a process of its own: the patches are process-wide.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .conftest import HAS_CUDA, ROOT

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the interpreter's own path; a GPU runs compiled kernels")

# a kernel of our own: a module-local @jit helper, tl.sum and tl.cdiv (standard.py's @jit), a loop
KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def scaled(x, s):
    return x * s + tl.sum(x, axis=0) / tl.cdiv(4, 2)


@triton.jit
def kernel(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = i * BLOCK + tl.arange(0, BLOCK)                              # [BLOCK]
    m = o < n
    a = tl.load(x + o, mask=m, other=0.)                              # [BLOCK]
    for _ in range(3):
        a = scaled(a, 0.5) + tl.max(a, axis=0)
    tl.store(y + o, a, mask=m)
'''

RUNNER = '''
import importlib.util, json, os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
import numpy as np
from kernels.harness.triton import interp
from kernels.harness.triton.arrays import NpTensor
interp.install_bounds_check(); interp.install_program_order(); interp.install_tf32_dot()
if sys.argv[1] == "fast":
    interp.install_fast_device_calls()
spec = importlib.util.spec_from_file_location("k", sys.argv[2])
k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
x = np.random.default_rng(7).standard_normal(100).astype(np.float32)
xt, yt = NpTensor.from_numpy(x), NpTensor.from_numpy(np.zeros(100, np.float32))
t0 = time.perf_counter()
k.kernel[(4,)](xt, yt, 100, BLOCK=32)
seconds = time.perf_counter() - t0
np.save(sys.argv[3], yt.numpy())
print(json.dumps({{"seconds": seconds, "installed": interp._ORIGINAL_DEVICE_CALL is not None}}))
'''


def _run(tmp_path, mode):
    src = tmp_path / "kern.py"
    src.write_text(KERNEL)
    runner = tmp_path / "run.py"
    runner.write_text(RUNNER.format(root=str(ROOT)))
    out = tmp_path / f"{mode}.npy"
    p = subprocess.run([sys.executable, str(runner), mode, str(src), str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return np.load(out), json.loads(p.stdout.strip().splitlines()[-1])


def test_device_calls_without_the_repeated_patch_compute_the_same_bits(tmp_path):
    slow, s_info = _run(tmp_path, "slow")
    fast, f_info = _run(tmp_path, "fast")
    assert f_info["installed"], "this Triton's interpreter calls device functions as interp.py expects"
    assert not s_info["installed"]
    assert np.isfinite(slow).all()
    assert np.array_equal(slow, fast), "the skip changed what the kernel computes"


def test_the_kda_prefill_kernel_is_bit_identical_with_the_skip(tmp_path):
    code = textwrap.dedent('''
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, {root!r})
        import numpy as np
        from kernels.harness.triton import interp
        from kernels.harness.triton.backend import NumpyBackend
        from kernels.harness.contract import load_contract
        from kernels.harness.manifest import find_manifest
        interp.install_bounds_check(); interp.install_program_order(); interp.install_tf32_dot()
        if sys.argv[1] == "fast":
            interp.install_fast_device_calls()
        from kernels.kda import prefill
        op, be = load_contract(find_manifest("kda.prefill")), NumpyBackend()
        x = op.make_inputs(dict(B=2, T=45, H=1, HV=2, K=24, V=20), np.random.default_rng(3))
        be.begin()
        t = {{n: be.put(x[n], name=n) for n in ("q", "k", "v", "g", "beta", "initial_state")}}
        o = be.poisoned(op.result_shape("o", x), name="o")
        s = be.poisoned(op.result_shape("final_state", x), name="final_state")
        prefill.kda_prefill(t["q"], t["k"], t["v"], t["g"], t["beta"], o, t["initial_state"], s)
        np.savez(sys.argv[2], o=be.get(o), s=be.get(s))
    ''').format(root=str(ROOT))
    runner = tmp_path / "prefill.py"
    runner.write_text(code)
    got = {}
    for mode in ("slow", "fast"):
        p = subprocess.run([sys.executable, str(runner), mode, str(tmp_path / f"{mode}.npz")], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        got[mode] = np.load(tmp_path / f"{mode}.npz")
    for name in ("o", "s"):
        assert np.isfinite(got["slow"][name]).all()
        assert np.array_equal(got["slow"][name], got["fast"][name]), name
