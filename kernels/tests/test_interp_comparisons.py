"""Comparisons under the interpreter as the GPU makes them (interp.py, install_comparisons): a
scalar predicate splat into a block mask (`cols < N` and `pid < M`, the mask of every row-and-column
kernel) loads and stores, NaN follows fcmp's predicates, and bfloat16 values compare as numbers,
not as their bits. Each run is a process of its own: the patches are process-wide."""
import json
import subprocess
import sys

import numpy as np
import pytest

from .conftest import HAS_CUDA, ROOT

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the interpreter's own path; a GPU runs compiled kernels")

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def kernel(x, y, M, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)                                       # [BLOCK]
    m = (cols < N) & (pid < M)
    v = tl.load(x + pid * N + cols, mask=m, other=0.0)               # [BLOCK]
    b = v.to(tl.bfloat16)
    half = tl.full([BLOCK], 0.5, tl.bfloat16)
    out = tl.where(v != v, 1.0, 0.0) + tl.where(v == v, 2.0, 0.0) + tl.where(v < 0.0, 4.0, 0.0) \\
        + tl.where(b < half, 8.0, 0.0)
    tl.store(y + pid * N + cols, out, mask=m)
'''

RUNNER = '''
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
import numpy as np
from kernels.harness.triton import interp
from kernels.harness.triton.arrays import NpTensor
interp.install_comparisons()
interp.install_comparisons()   # idempotent
spec = importlib.util.spec_from_file_location("k", sys.argv[1])
k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
x = np.array([[1.0, -1.0, np.nan, 0.25, 3.0], [-0.5, 0.75, 2.0, np.nan, -3.0]], np.float32)
xt, yt = NpTensor.from_numpy(x), NpTensor.from_numpy(np.full(x.shape, -7.0, np.float32))
k.kernel[(3,)](xt, yt, 2, 5, BLOCK=8)   # a third program, wholly masked off by pid < M
print(json.dumps(yt.numpy().tolist()))
'''


def test_a_scalar_predicate_masks_a_block_and_nan_and_bfloat16_compare_as_on_a_gpu(tmp_path):
    (tmp_path / "k.py").write_text(KERNEL)
    (tmp_path / "run.py").write_text(RUNNER.format(root=str(ROOT)))
    r = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "k.py")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    y = np.array(json.loads(r.stdout.strip().splitlines()[-1]))
    x = np.array([[1.0, -1.0, np.nan, 0.25, 3.0], [-0.5, 0.75, 2.0, np.nan, -3.0]])
    nan = np.isnan(x)
    # != is unordered (true on NaN), == and < ordered (false on NaN); bfloat16 -1 < 0.5 though its
    # bits (0xBF80) are above 0.5's (0x3F00)
    want = 1.0 * nan + 2.0 * ~nan + 4.0 * (x < 0) + 8.0 * (np.nan_to_num(x, nan=1.0) < 0.5)
    assert np.array_equal(y, want), (y, want)
