"""The harness's `profile` (kernels/harness/profile.py, workprofile.py): work counted per source
line under the interpreter in the check's sandboxed worker, scaled to the bench shape.

(a) scaled counts equal a whole count (within 1%) at shapes small enough to count whole;
(b) the Triton decode's counts agree with arithmetic from its source;
(c) a planted second read of the decode state shows as re-read bytes, traffic ratio about 1.5;
(d) what the worker reports is validated: a malformed, huge or implausible report is an error;
(e) redundant computation (issue #24): special calls a program evaluates again on the same
    argument (repeat_calls) and those another program of the launch evaluated first
    (uniform_calls), on kernels of our own counted in a process of their own, and on our decode.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from kernels.harness.manifest import all_manifests
from kernels.harness.triton.profile import (FIELDS, MAX_REPORT_BYTES, ProfileError, profile_kernel, read_report,
                                     validate_report)

from .conftest import ROOT, harness, variant

MANIFESTS = all_manifests()
DECODE, PREFILL = MANIFESTS["kda.decode"], MANIFESTS["kda.prefill"]


def _deadline():
    return time.monotonic() + 300


def _line(profile, source, statement):
    """The profile's entry for the source line that starts with `statement`."""
    lines = source.read_text().splitlines()
    nums = [i + 1 for i, t in enumerate(lines) if t.strip().startswith(statement)]
    assert len(nums) == 1, (statement, nums)
    hits = [e for e in profile["lines"] if e["line"] == nums[0]]
    assert hits, f"no counts at line {nums[0]} ({statement})"
    return hits[0]


def _close(a, b, rel=0.01):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1)


# (a) scaling ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("manifest,bench", [
    # K, V not powers of two: the last value block is partial (the grid's x is counted whole)
    (DECODE, {"N": 3, "H": 2, "HV": 4, "K": 24, "V": 40, "S": 5}),
    # T = 3 chunks + 8: counted at 72 and 136 tokens, one sequence, extrapolated; against all of it
    (PREFILL, {"B": 2, "T": 200, "H": 1, "HV": 2, "K": 16, "V": 24}),
], ids=["decode", "prefill"])
def test_scaled_counts_equal_a_whole_count(manifest, bench):
    whole = profile_kernel(manifest, bench=bench, exact=True, deadline=_deadline())
    scaled = profile_kernel(manifest, bench=bench, deadline=_deadline())
    assert whole["counted"]["exact"] and whole["counted"]["scale"] == 1.0
    assert not scaled["counted"]["exact"] and scaled["counted"]["programs"] < whole["counted"]["programs"]
    assert scaled["counted"]["programs_total"] == whole["counted"]["programs_total"] == whole["counted"]["programs"]
    for f in FIELDS:
        assert _close(scaled["totals"][f], whole["totals"][f]), (f, scaled["totals"], whole["totals"])
    for k in set(whole["special"]) | set(scaled["special"]):
        assert _close(scaled["special"].get(k, 0), whole["special"].get(k, 0)), k
    by_line = {e["line"]: e for e in whole["lines"]}
    assert {e["line"] for e in scaled["lines"]} == set(by_line)
    for e in scaled["lines"]:
        for f in FIELDS:
            assert _close(e[f], by_line[e["line"]][f]), (e, by_line[e["line"]])
    assert scaled["launches"] == whole["launches"] == 1
    assert scaled["traffic_ratio"] == pytest.approx(whole["traffic_ratio"], rel=0.01)


# (b) the decode's counts from its source ------------------------------------------------------------------

@pytest.fixture(scope="module")
def decode_profile():
    return profile_kernel(DECODE, deadline=_deadline())


def test_decode_counts_agree_with_its_source(decode_profile):
    p, src = decode_profile, DECODE.source_path
    s = DECODE.shapes["bench"]
    N, H, HV, K, V = (s[x] for x in ("N", "H", "HV", "K", "V"))
    BK, BV = K, min(V, 32)            # the launcher's blocks (K, V powers of two here)
    programs = (V // BV) * N * HV     # grid (cdiv(V, BV), N * HV)
    state = N * HV * K * V * 4
    assert p["shape"] == s
    c = p["counted"]
    assert (c["programs"], c["programs_total"]) == ((V // BV) * (HV // H), programs)
    assert c["scale"] == programs / c["programs"] and c["exact"] is False
    assert c["shape"]["K"] == K and c["shape"]["V"] == V and c["shape"]["HV"] // c["shape"]["H"] == HV // H
    # the state: read once and written once per (sequence, value head)
    assert _line(p, src, "b_s = tl.load(p_s")["load_bytes"] == state
    assert _line(p, src, "tl.store(p_s")["store_bytes"] == state
    # per program: q, k, g of K fp32 values, v of BV, beta one, the slot one int64; o BV stored
    for stmt in ("b_q = tl.load", "b_k = tl.load", "b_g = tl.load"):
        assert _line(p, src, stmt)["load_bytes"] == programs * BK * 4
    assert _line(p, src, "b_v = tl.load")["load_bytes"] == programs * BV * 4
    assert _line(p, src, "b_beta = tl.load")["load_bytes"] == programs * 4
    assert _line(p, src, "i_slot = tl.load")["load_bytes"] == programs * 8
    assert _line(p, src, "tl.store(p_o")["store_bytes"] == programs * BV * 4
    # tl.exp(b_g) on a [BK] vector per program, then the [BK, BV] decay product
    decay = _line(p, src, "b_s = b_s * tl.exp(b_g)")
    assert (decay["special_calls"], decay["flops"]) == (programs * BK, programs * BK * BV)
    assert p["special"] == {"exp": programs * BK}
    # predict: BK*BV products, a sum of BK rows (BK-1 adds per column); delta: a sub and a mul per column
    assert _line(p, src, "b_p = tl.sum")["flops"] == programs * (BK * BV + (BK - 1) * BV)
    assert _line(p, src, "b_d = b_beta")["flops"] == programs * 2 * BV
    assert _line(p, src, "b_s = b_s + b_k")["flops"] == programs * 2 * BK * BV
    assert _line(p, src, "b_o = tl.sum")["flops"] == programs * (BK * BV + (BK - 1) * BV)
    assert _line(p, src, "b_q = tl.load")["flops"] == programs * BK          # * scale
    t = p["totals"]
    assert t["load_bytes"] == state + programs * (3 * BK * 4 + BV * 4 + 4 + 8)
    assert t["store_bytes"] == state + programs * BV * 4
    assert (t["reread_bytes"], t["dot_macs"]) == (0, 0)
    assert t["special_calls"] == programs * BK
    assert t["load_bytes"] == sum(e["load_bytes"] for e in p["lines"])
    assert p["launches"] == 1
    assert p["floor"] == {"bytes": DECODE.floor_bytes(s), "flops": DECODE.floor_flops(s)}
    assert p["traffic_ratio"] == pytest.approx((t["load_bytes"] + t["store_bytes"]) / p["floor"]["bytes"])
    assert 1.0 < p["traffic_ratio"] < 1.1
    texts = src.read_text().splitlines()
    assert all(e["text"] == texts[e["line"] - 1].strip() for e in p["lines"])
    assert [e["line"] for e in p["lines"]] == sorted(e["line"] for e in p["lines"])


# (c) a planted re-read ------------------------------------------------------------------------------------

def test_a_second_read_of_the_state_is_a_reread(tmp_path, decode_profile):
    planted = variant(tmp_path, DECODE.source_path, [(
        "    b_p = tl.sum(b_s * b_k[:, None], axis=0)                         # [BV]\n",
        "    b_p = tl.sum(tl.load(p_s, mask=m_s, other=0.) * tl.exp(b_g)[:, None] * b_k[:, None], axis=0)\n")])
    p = profile_kernel(DECODE, planted, deadline=_deadline())
    s = DECODE.shapes["bench"]
    state = s["N"] * s["HV"] * s["K"] * s["V"] * 4
    assert p["totals"]["reread_bytes"] == state
    assert _line(p, planted, "b_p = tl.sum(tl.load(p_s")["reread_bytes"] == state
    assert p["totals"]["load_bytes"] == decode_profile["totals"]["load_bytes"] + state
    assert p["traffic_ratio"] == pytest.approx(1.5, abs=0.06)
    assert decode_profile["totals"]["reread_bytes"] == 0


# (d) the worker's report is data, validated ----------------------------------------------------------------

def _entry(**kw):
    e = {f: 0 for f in FIELDS}
    e["special"] = {}
    e.update(kw)
    return e


def _entry1(**kw):
    """A line of a format-1 report: no repeat_calls, uniform_calls."""
    e = _entry(**kw)
    del e["repeat_calls"], e["uniform_calls"]
    return e


@pytest.mark.parametrize("report,why", [
    ("not a dict", "malformed"),
    ({"format": 3, "lines": {}}, "malformed"),
    ({"format": True, "lines": {}}, "malformed"),
    # format 1 has no redundancy counts, format 2 has them
    ({"format": 1, "lines": {"5": _entry(special_calls=2, special={"exp": 2})}}, "fields"),
    ({"format": 2, "lines": {"5": _entry1(special_calls=2, special={"exp": 2})}}, "fields"),
    # repeat or uniform calls beyond the line's special calls
    ({"format": 2, "lines": {"5": _entry(special_calls=2, special={"exp": 2}, repeat_calls=3)}}, "exceed"),
    ({"format": 2, "lines": {"5": _entry(special_calls=2, special={"exp": 2}, uniform_calls=3)}}, "exceed"),
    ({"format": 2, "lines": {"5": _entry(repeat_calls=1)}}, "exceed"),
    ({"format": 2, "lines": {"5": _entry(special_calls=2, special={"exp": 2}, uniform_calls=-1)}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry(special_calls=2, special={"exp": 2}, repeat_calls=1.0)}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry()}, "extra": 1}, "unknown keys"),
    ({"format": 2, "lines": {"999": _entry(load_bytes=4)}}, "past the source"),
    ({"format": 2, "lines": {"-3": _entry()}}, "malformed"),
    ({"format": 2, "lines": {"5": _entry(load_bytes=-4)}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry(load_bytes=4.5)}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry(load_bytes=True)}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry(load_bytes="4")}}, "not a count"),
    ({"format": 2, "lines": {"5": _entry(flops=1 << 60)}}, "not a count"),
    ({"format": 2, "lines": {"5": dict(_entry(), bogus=1)}}, "fields"),
    ({"format": 2, "lines": {"5": _entry(special_calls=3, special={"exp": 3, "fork": 0})}}, "special functions"),
    ({"format": 2, "lines": {"5": _entry(special_calls=3, special={"exp": 2})}}, "sum"),
    ({"format": 2, "lines": {"5": _entry(load_bytes=4, reread_bytes=8)}}, "re-reads more"),
    ({"format": 2, "lines": {str(i): _entry() for i in range(60)}}, "lines for a source"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_a_malformed_report_is_an_error(report, why):
    with pytest.raises(ProfileError, match=why):
        validate_report(report, nlines=50)


def test_a_valid_report_reads_as_counts():
    lines, special, programs = validate_report(
        {"format": 2, "lines": {"0": _entry(flops=2), "7": _entry(load_bytes=8, reread_bytes=4, special_calls=3,
                                                                  special={"exp": 2, "div": 1}, repeat_calls=3,
                                                                  uniform_calls=1)}, "programs": 4},
        nlines=50)
    assert lines == {0: [0, 0, 0, 0, 2, 0, 0, 0], 7: [8, 0, 4, 3, 0, 0, 3, 1]} and special[7] == {"exp": 2, "div": 1}
    assert programs == 4
    # a format-1 report (before the redundancy counts) reads with them 0
    lines, _, _ = validate_report({"format": 1, "lines": {"7": _entry1(special_calls=3, special={"exp": 3})}}, 50)
    assert lines == {7: [0, 0, 0, 3, 0, 0, 0, 0]}


def test_report_files_are_read_with_limits(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "big.json").write_text(" " * (MAX_REPORT_BYTES + 1))
    with pytest.raises(ProfileError, match="larger"):
        read_report(tmp_path, "out/big.json")
    (tmp_path / "secret.json").write_text("{}")
    os.symlink(tmp_path / "secret.json", tmp_path / "out" / "link.json")
    with pytest.raises(ProfileError, match="no report"):
        read_report(tmp_path, "out/link.json")
    with pytest.raises(ProfileError, match="outside"):
        read_report(tmp_path / "out", "../secret.json")
    with pytest.raises(ProfileError, match="no report"):
        read_report(tmp_path, "out/missing.json")


FORGERS = {
    # the worker's writer replaced by the candidate at import: a line far past the source
    "a line past the source": ("past the source", {"format": 1, "programs": 1, "lines": {
        "100000": {"load_bytes": 1, "store_bytes": 0, "reread_bytes": 0, "special_calls": 0, "flops": 0,
                   "dot_macs": 0, "special": {}}}}),
    # redundancy claimed beyond the calls made (the decode's exp line, 57)
    "more repeats than calls": ("exceed", {"format": 2, "programs": 1, "lines": {
        "57": {"load_bytes": 1, "store_bytes": 0, "reread_bytes": 0, "special_calls": 1, "flops": 0,
               "dot_macs": 0, "repeat_calls": 2, "uniform_calls": 0, "special": {"exp": 1}}}}),
    # a report far over the size limit
    "a huge report": ("larger than", "HUGE"),
    # a well-formed report of (almost) no work: below the floor every correct kernel moves
    "no work at all": ("implausible", {"format": 1, "programs": 1, "lines": {
        "40": {"load_bytes": 4, "store_bytes": 4, "reread_bytes": 0, "special_calls": 0, "flops": 0,
               "dot_macs": 0, "special": {}}}}),
}


@pytest.mark.parametrize("name", list(FORGERS))
def test_a_candidate_cannot_forge_its_counts(tmp_path, name):
    why, report = FORGERS[name]
    forge = (
        "import json as _json\n"
        "import kidiom_rt.workprofile as _wp\n"
        "def _forged(path, _orig=_wp.finish):\n"
        "    _orig(path)\n"
        "    with open(path, 'w') as f:\n"
        f"        f.write(' ' * {MAX_REPORT_BYTES + 10}) if {report!r} == 'HUGE' else _json.dump({report!r}, f)\n"
        "    return path\n"
        "_wp.finish = _forged\n")
    planted = variant(tmp_path, DECODE.source_path, [("__all__ = [\"kda_decode\"]\n",
                                                      "__all__ = [\"kda_decode\"]\n" + forge)])
    with pytest.raises(ProfileError, match=why):
        profile_kernel(DECODE, planted, deadline=_deadline())


# the command --------------------------------------------------------------------------------------------

def test_the_command_speaks_the_wire_format():
    rc, out = harness("profile", "--kernel", "kda.decode", "--json", "--timeout", "120")
    assert rc == 0, out
    assert (out["wire"], out["version"], out["command"], out["status"]) == ("kidiom-harness", 1, "profile", "ok")
    for k in ("kernel", "source", "manifest", "device", "mode", "versions", "seconds", "shape", "counted", "totals",
              "special", "floor", "traffic_ratio", "launches", "lines"):
        assert k in out, k
    assert set(out["counted"]) >= {"shape", "programs", "programs_total", "scale", "exact", "note"}
    assert set(out["totals"]) == set(FIELDS) and all(isinstance(v, int) for v in out["totals"].values())
    assert all(set(e) == {"line", "text", *FIELDS} for e in out["lines"])
    json.dumps(out)
    # the baseline's own launch defect: grid axis 1 is N * HV, capped at 65535 on the GPU
    limits = out["launch_limits"]
    assert limits["shapes"] >= 1, limits
    assert any("grid axis 1 grows with N" in f and "from N = 2048" in f for f in limits["findings"]), limits


def test_profile_and_compile_at_a_shape_in_place_of_the_bench_shape():
    """`--shape` (kidiom predict --check): the counts, the launch and the compile's grid are the given
    shape's; the threads per program of a CUDA launch come from the contract's block."""
    shape = {"N": 2, "H": 1, "HV": 4, "K": 64, "V": 64, "S": 2}
    rc, out = harness("profile", "--kernel", "kda.decode", "--shape", json.dumps(shape), "--timeout", "120")
    assert rc == 0, out
    assert out["shape"] == shape and out["counted"]["programs_total"] == 2 * 2 * 4, out["counted"]
    state = 2 * 4 * 64 * 64 * 4
    assert state <= out["totals"]["store_bytes"] < 1.1 * state, out["totals"]
    # a launcher without num_warps: the compile says it
    assert out["threads_per_program"] is None
    rc, comp = harness("compile", "--kernel", "kda.decode", "--shape", json.dumps(shape), "--timeout", "300")
    assert rc == 0, comp
    assert comp["triton"]["grid"] == [2, 8, 1] and comp["triton"]["num_warps"] == 4, comp["triton"]
    rc, cuda = harness("profile", "--kernel", "kda_cuda.decode", "--shape", json.dumps(shape), "--timeout", "120")
    assert rc == 0 and cuda["threads_per_program"] == 64 and cuda["counted"]["programs_total"] == 8, cuda
    # a state-precision variant is profiled as itself: half the state's bytes
    rc, bf16 = harness("profile", "--kernel", "kda.decode.state-bf16", "--shape", json.dumps(shape), "--timeout", "120")
    assert rc == 0, bf16
    assert bf16["totals"]["store_bytes"] < 0.6 * out["totals"]["store_bytes"], (bf16["totals"], out["totals"])


@pytest.mark.parametrize("shape, why", [
    ('{"N": 2}', "have the variables"),
    ('{"N": 2, "H": 1, "HV": 4, "K": 64, "V": 64, "S": 0}', "S = 0 is not a positive integer"),
    ('{"N": 2, "H": 1, "HV": 4, "K": 64, "V": 64, "S": 1.5}', "S = 1.5 is not a positive integer"),
    ('[1, 2]', "have the variables"),
    ('{N: 2', "not JSON"),
])
def test_a_shape_that_is_not_the_kernel_s_is_an_error(shape, why):
    rc, out = harness("profile", "--kernel", "kda.decode", "--shape", shape, "--timeout", "60")
    assert rc != 0 and out["status"] == "error" and why in out["error"], out


def test_launch_limits_name_what_each_axis_grows_with_and_where_it_fails():
    from kernels.harness.triton.profile import GRID_LIMITS, launch_limit_findings
    probes = [("gpu[0]", {"N": 4, "HV": 8}, None), ("gpu[0]", {"N": 8, "HV": 8}, "N"),
              ("gpu[0]", {"N": 4, "HV": 16}, "HV"), ("gpu[1]", {"N": 70000, "HV": 1}, None)]
    # axis 1 is N * HV (proportional to both), axis 2 a constant; the second shape is past the limit
    grids = [[("k", [3, 32, 2])], [("k", [3, 64, 2])], [("k", [3, 64, 2])], [("k", [3, 70000, 2])]]
    args = [[{"shape": [4, 8], "dtype": "float32"}], [None], [None], [{"shape": [1 << 16, 1 << 16], "dtype": "float32"}]]
    found = launch_limit_findings(probes, grids, args)
    assert any("grid axis 1 is 70000 at gpu[1]" in f and "the launch fails" in f for f in found), found
    assert any(f"grows with N" in f and f"from N = {GRID_LIMITS[1] * 4 // 32 + 1}" in f for f in found), found
    assert any("grows with HV" in f for f in found), found
    assert not any("axis 2" in f for f in found), found
    assert any("4294967296 elements" in f and "32 bits" in f for f in found), found
    # a probe that could not be recorded says nothing
    assert launch_limit_findings(probes[:2], [None, None], args[:2]) == []


def test_a_cuda_kernel_the_emulation_cannot_build_is_skipped_with_a_reason(tmp_path):
    cu = ROOT / "kernels/kda_cuda/decode.cu"
    src = tmp_path / "decode.cu"
    src.write_text(cu.read_text().replace("    int nh = blockIdx.x;\n", "    int nh = blockIdx.x;\n    __threadfence();\n"))
    rc, out = harness("profile", "--kernel", "kda_cuda.decode", "--source", str(src), "--timeout", "120")
    assert rc == 3 and out["status"] == "skipped" and "emulat" in out["reason"], out
    assert out["command"] == "profile"


def test_special_functions_are_counted_by_kind(tmp_path):
    planted = variant(tmp_path, DECODE.source_path, [
        ("    b_s = b_s * tl.exp(b_g)[:, None]\n",
         "    b_s = b_s * tl.sigmoid(b_g)[:, None] * tl.exp2(b_g)[:, None]\n"),
        ("    b_d = b_beta * (b_v - b_p)                                       # [BV]\n",
         "    b_d = (b_v - b_p) / (1.0 / b_beta) + tl.sqrt(tl.abs(b_p)) * 0.0\n")])
    s = dict(DECODE.shapes["bench"], N=2, H=1, HV=2, S=3)
    p = profile_kernel(DECODE, planted, bench=s, exact=True, deadline=_deadline())
    programs = (s["V"] // 32) * s["N"] * s["HV"]
    BK, BV = s["K"], 32
    # tl.sigmoid (1 / (1 + exp(-x))) is one evaluation per element, its exp and division not again
    assert p["special"] == {"sigmoid": programs * BK, "exp2": programs * BK,
                            "div": programs * (BV + 1), "sqrt": programs * BV}
    decay = _line(p, planted, "b_s = b_s * tl.sigmoid")
    assert decay["special_calls"] == 2 * programs * BK
    assert decay["flops"] == programs * (BK + 2 * BK * BV)   # sigmoid's 1 + exp(-x), two products
    assert p["totals"]["special_calls"] == sum(p["special"].values())


def test_a_block_size_chosen_by_the_batch_is_counted_at_the_bench_block_size(tmp_path):
    # a launch configuration rewrite: wider value blocks for large batches. The most reduced shape
    # would run BV = 32; the profile counts the smallest shape that still gets the bench's BV = 64
    planted = variant(tmp_path, DECODE.source_path, [(
        "    BV = min(triton.next_power_of_2(V), 32)\n",
        "    BV = min(triton.next_power_of_2(V), 32 if N * HV < 64 else 64)\n")])
    p = profile_kernel(DECODE, planted, deadline=_deadline())
    s = DECODE.shapes["bench"]
    c = p["counted"]
    assert c["shape"]["N"] * c["shape"]["HV"] == 64 and "reduced only as far" in c["note"], c
    programs = (s["V"] // 64) * s["N"] * s["HV"]
    assert c["programs_total"] == programs and c["programs"] == (s["V"] // 64) * 64
    assert p["special"] == {"exp": programs * s["K"]}
    assert _line(p, planted, "b_s = tl.load(p_s")["load_bytes"] == s["N"] * s["HV"] * s["K"] * s["V"] * 4
    assert "not uniform" not in c["note"]


# (e) redundant computation ---------------------------------------------------------------------------------

# kernels of our own; each line's marker comment names it for the test
REDUNDANT = '''
import triton
import triton.language as tl


@triton.jit
def twice(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = i * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    a = tl.load(x + o, mask=m, other=0.)
    b = tl.load(x + n + o, mask=m, other=0.)
    e1 = tl.exp(a)                                  # FIRST
    e2 = tl.exp(a)                                  # AGAIN
    e3 = tl.exp(b)                                  # OTHER
    d1 = a / b                                      # DIV
    d2 = a / (b + 1.0)                              # DIV OTHER
    d3 = a / b                                      # DIV AGAIN
    tl.store(y + o, e1 + e2 + e3 + d1 + d2 + d3, mask=m)


@triton.jit
def shared(x, y, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, BLOCK)
    c = tl.load(x + r)
    e = tl.exp(c)                                   # SAME
    o = BLOCK + i * BLOCK + r
    f = tl.exp(tl.load(x + o))                      # OWN
    tl.store(y + i * BLOCK + r, e + f)
'''

# runs a kernel of REDUNDANT under the interpreter with the worker's patches and counting, in a
# process of its own (the patches are process-wide); prints the report
RUNNER = r"""
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1])
import numpy as np
from kernels.harness.triton import interp, workprofile
from kernels.harness.triton.arrays import NpTensor
interp.install_bounds_check(); interp.install_program_order(); interp.install_fast_device_calls()
interp.install_tf32_dot()
src, name, grid, n, launches, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
spec = importlib.util.spec_from_file_location("redundant", src)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
rng = np.random.default_rng(7)
x = NpTensor.from_numpy(rng.uniform(0.5, 1.5, 4096).astype(np.float32))
y = NpTensor.from_numpy(np.zeros(4096, np.float32))
workprofile.start([src])
for _ in range(launches):
    if name == "twice":
        mod.twice[(grid,)](x, y, n, BLOCK=16)
    else:
        mod.shared[(grid,)](x, y, BLOCK=16)
workprofile.finish(out)
"""


def _count_ours(tmp_path, name, grid, n=0, launches=1):
    """{marker: line counts} of one kernel of REDUNDANT, validated as the harness validates."""
    src = tmp_path / "redundant.py"
    src.write_text(textwrap.dedent(REDUNDANT))
    out = tmp_path / f"{name}-{grid}-{launches}.json"
    r = subprocess.run([sys.executable, "-c", RUNNER, str(ROOT), str(src), name, str(grid), str(n), str(launches),
                        str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    text = src.read_text().splitlines()
    lines, special, programs = validate_report(json.loads(out.read_text()), len(text))
    assert programs == grid * launches
    marked = {}
    for no, t in enumerate(text, 1):
        if "# " in t and t.split("# ")[-1].isupper():
            marked[t.split("# ")[-1]] = dict(zip(FIELDS, lines.get(no, [0] * len(FIELDS))))
    return marked


def test_a_call_again_on_the_same_argument_is_a_repeat(tmp_path):
    # 3 programs of 16 lanes, n = 40: the last program has 8 masked lanes (zeros in a and b alike)
    c = _count_ours(tmp_path, "twice", grid=3, n=40)
    lanes = 3 * 16
    assert c["FIRST"]["special_calls"] == c["AGAIN"]["special_calls"] == c["OTHER"]["special_calls"] == lanes
    # the second exp of the same `a` repeats all of it, the first none; exp of other data none
    # (masked lanes equal to the first's are not redundancy: whole arrays are compared)
    assert (c["FIRST"]["repeat_calls"], c["AGAIN"]["repeat_calls"], c["OTHER"]["repeat_calls"]) == (0, lanes, 0)
    # a division is keyed by both operands: a / (b + 1) is not a / b again; a / b twice is
    assert (c["DIV"]["repeat_calls"], c["DIV OTHER"]["repeat_calls"], c["DIV AGAIN"]["repeat_calls"]) == (0, 0, lanes)
    # each program works on its own data: nothing uniform
    assert all(e["uniform_calls"] == 0 for e in c.values()), c


def test_work_every_program_does_alike_is_uniform(tmp_path):
    # 4 programs: each exps the same first block (SAME) and a block of its own (OWN); two launches
    c = _count_ours(tmp_path, "shared", grid=4, launches=2)
    calls = 2 * 4 * 16
    assert c["SAME"]["special_calls"] == c["OWN"]["special_calls"] == calls
    # the first program of each launch evaluates it first (remembered per launch), 3 of 4 again
    assert c["SAME"]["uniform_calls"] == 2 * 3 * 16
    assert c["OWN"]["uniform_calls"] == 0
    assert c["SAME"]["repeat_calls"] == c["OWN"]["repeat_calls"] == 0
    # one program: nothing is uniform
    one = _count_ours(tmp_path, "shared", grid=1)
    assert one["SAME"]["uniform_calls"] == 0 and one["SAME"]["special_calls"] == 16


def test_our_decode_shows_the_exp_every_value_block_repeats(decode_profile):
    # grid (V / BV, N * HV): the V / BV programs of a (sequence, value head) exp the same b_g
    p, s = decode_profile, DECODE.shapes["bench"]
    blocks = s["V"] // min(s["V"], 32)
    decay = _line(p, DECODE.source_path, "b_s = b_s * tl.exp(b_g)")
    assert decay["uniform_calls"] == decay["special_calls"] * (blocks - 1) // blocks > 0
    assert decay["repeat_calls"] == 0
    assert p["totals"]["uniform_calls"] == decay["uniform_calls"] and p["totals"]["repeat_calls"] == 0
    assert all(e["repeat_calls"] <= e["special_calls"] and e["uniform_calls"] <= e["special_calls"]
               for e in p["lines"])
