"""The work profile's own reductions (triton/profile.py `default_reductions`, issue #48 item 5): a
contract that names no `counted`/`smaller` is still counted small, at a variable that scales the
grid exactly, and only where twice it counts exactly twice the work; otherwise at the bench shape."""
import textwrap

from kernels.harness.manifest import load_manifest
from kernels.harness.triton.profile import profile_kernel

from .test_contracts import ROWSUM_CONTRACT

# each row's sum: one program a row, the same work in each
ROWS = '''
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, out, M, N, BLOCK: tl.constexpr):
    # x: [M, N]; out: [M]
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        acc += tl.load(x + row * N + offs, mask=offs < N, other=0.0)
    tl.store(out + row, tl.sum(acc, axis=0))


def rows(x, out):
    M, N = x.shape
    rows_kernel[(M,)](x, out, M, N, BLOCK=32)
    return out
'''

# one program a row again, but each reads every row: twice M is four times the work
ALL_ROWS = ROWS.replace("row * N + offs", "r * N + offs").replace(
    "    for c in range(0, N, BLOCK):", "    for r in range(0, M):\n      for c in range(0, N, BLOCK):").replace(
    "        offs = c", "          offs = c").replace("        acc += tl.load", "          acc += tl.load")

# the row sums' contract of test_contracts.py, without its CUDA launch
CONTRACT = ROWSUM_CONTRACT.split("\n\ndef launch")[0] + "\n"


def _manifest(tmp_path, name, source, bench):
    d = tmp_path / name
    d.mkdir()
    (d / "k.py").write_text(textwrap.dedent(source))
    (d / "k_contract.py").write_text(textwrap.dedent(CONTRACT))
    (d / "k.toml").write_text(textwrap.dedent(f'''
        format = 2
        name = "{name}"
        language = "triton"
        source = "k.py"
        entry = "rows_kernel"
        launcher = "rows"
        contract = "k_contract.py"

        [tolerance]
        rel_l2 = 1e-5
        slice_rel_l2 = 1e-4
        max_abs_rel = 1e-4

        [shapes]
        cpu = [{{ M = 3, N = 64 }}]
        gpu = [{{ M = {bench[0]}, N = {bench[1]} }}]
        bench = {{ M = {bench[0]}, N = {bench[1]} }}

        [floor]
        bytes = "4 * (M * N + M)"
        flops = "M * N"
    '''))
    return load_manifest(d / "k.toml")


def test_a_uniform_grid_is_counted_at_one_row_and_scaled_exactly(tmp_path):
    m = _manifest(tmp_path, "rows", ROWS, (256, 96))
    reduced, exact = profile_kernel(m), profile_kernel(m, exact=True)
    c = reduced["counted"]
    # N does not scale the grid (each program's loop): only M is reduced, to one row
    assert c["shape"] == {"M": 1, "N": 96} and c["programs"] == 1 and c["programs_total"] == 256
    assert "M reduced by kidiom" in c["note"] and not c["exact"]
    assert reduced["totals"] == exact["totals"] and reduced["special"] == exact["special"]
    assert [(ln["line"], ln["load_bytes"]) for ln in reduced["lines"]] == \
        [(ln["line"], ln["load_bytes"]) for ln in exact["lines"]]


def test_programs_that_grow_with_the_reduced_size_are_counted_at_the_bench_shape(tmp_path):
    m = _manifest(tmp_path, "all_rows", ALL_ROWS, (16, 32))
    prof = profile_kernel(m)
    c = prof["counted"]
    assert c["shape"] == {"M": 16, "N": 32} and c["exact"], c
    assert "not uniform in M" in c["note"], c["note"]
    # every program reads all M rows: M * M * N loads of 4 bytes
    assert prof["totals"]["load_bytes"] == 16 * 16 * 32 * 4
