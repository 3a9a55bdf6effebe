"""`spec`: launch specs for the Rust GPU gate (kernels/harness/triton/spec.py), made without a GPU.

The grids, blocks and parameters are checked against what the launchers do, the cubins' own
parameter layout (`.nv.info.<kernel>`, read here with a few lines of ELF) against the table the
design notes measured (shared/gpu-gate.md, section 1.2), and the files against the layout of
validator/src/gpu/spec.rs; the Rust side checks the same specs with its own ELF reader
(validator/src/gpu/check.rs)."""
import hashlib
import json
import struct

import numpy as np
import pytest

from kernels.harness.manifest import find_manifest
from kernels.harness.contract import load_contract
from kernels.kda import reference as ref

from .conftest import harness

TRITON_SCRATCH = [{"kind": "scratch", "which": "global"}, {"kind": "scratch", "which": "profile"}]


def nv_info(cubin, kernel):
    """{ordinal: (offset, size)}, CBANK_PARAM_SIZE and REQNTID of `.nv.info.<kernel>`."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    for h in heads:
        name = cubin[names_at + h[0]:cubin.index(b"\0", names_at + h[0])].decode()
        if name != f".nv.info.{kernel}":
            continue
        d, at, params, cbank, reqntid = cubin[h[4]:h[4] + h[5]], 0, {}, None, None
        while at < len(d):
            fmt, attr = d[at], d[at + 1]
            n = struct.unpack_from("<H", d, at + 2)[0] if fmt == 4 else 0
            value = d[at + 4:at + 4 + n] if fmt == 4 else d[at + 2:at + 4]
            if attr == 0x17:
                _, ordinal, offset, flags = struct.unpack("<IHHI", value)
                params[ordinal] = (offset, flags >> 18)
            elif attr == 0x19:
                cbank = struct.unpack("<H", value)[0]
            elif attr == 0x10:
                reqntid = list(struct.unpack("<III", value))
            at += 4 + n
        return params, cbank, reqntid
    raise AssertionError(f"no .nv.info.{kernel}")


def emit(tmp_path, kernel, *extra):
    rc, r = harness("spec", "--kernel", kernel, "--out", str(tmp_path / "specs"), "--seed", "7", *extra, timeout=900)
    assert rc == 0 and r["status"] == "ok", r
    specs = {}
    for s in r["specs"]:
        d = tmp_path / "specs" / s["dir"].rsplit("/", 1)[-1]
        spec = json.loads((d / "launch.json").read_text())
        cubin = (d / "kernel.cubin").read_bytes()
        assert spec["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
        assert spec["format"] == 1 and spec["cubin"] == "kernel.cubin" and spec["shape"] == s["shape"]
        assert spec["num_ctas"] == 1 and not spec["cooperative"] and not spec["pdl"]
        assert spec["tensor_descriptors"] == 0 and spec["profile_scratch_bytes"] == 0
        # the manifest's floor at the shape, from the harness (the gate's achieved bandwidth)
        assert s["floor_bytes"] == float(find_manifest(kernel).floor_bytes(s["shape"])) > 0
        specs[s["label"]] = (spec, cubin, d)
    return r, specs


def test_decode_specs_every_shape_the_cubin_agrees(tmp_path):
    r, specs = emit(tmp_path, "kda.decode", "--sets", "0")
    assert sorted(specs) == ["bench", "gpu0", "gpu1", "gpu2", "gpu3"]   # every gpu shape and bench
    assert r["tools"]["triton"] and r["tools"]["ptxas"]
    for label, (spec, cubin, d) in specs.items():
        N, HV, V, K = (spec["shape"][x] for x in ("N", "HV", "V", "K"))
        BV = min(1 << (V - 1).bit_length(), 32)
        assert spec["grid"] == [-(-V // BV), N * HV, 1], label           # the launcher's grid
        assert spec["block"] == [128, 1, 1] and spec["kernel"] == "kda_decode_kernel"
        tensors = [(p["name"], p["role"], p["dtype"], p["align"]) for p in spec["params"][:8]]
        assert tensors == [("q", "input", "fp32", 16), ("k", "input", "fp32", 16), ("v", "input", "fp32", 16),
                           ("g", "input", "fp32", 16), ("beta", "input", "fp32", 16),
                           ("state", "in_out", "fp32", 16), ("slots", "input", "i64", 16),
                           ("o", "output", "fp32", 16)]
        assert spec["params"][8] == {"kind": "float", "name": "scale", "value": K ** -0.5}
        assert spec["params"][9:] == TRITON_SCRATCH
        assert not (d / "inputs").exists()                               # --sets 0: the specs only
    # the bench cubin's own layout is the design notes' table (gpu-gate.md 1.2)
    params, cbank, reqntid = nv_info(specs["bench"][1], "kda_decode_kernel")
    assert params == {**{i: (8 * i, 8) for i in range(8)}, 8: (0x40, 4), 9: (0x48, 8), 10: (0x50, 8)}
    assert (cbank, reqntid) == (0x58, [128, 1, 1])


def test_decode_input_sets_and_expected_values(tmp_path):
    _, specs = emit(tmp_path, "kda.decode", "--sets", "2", "--shapes", "gpu1")
    spec, _, d = specs["gpu1"]
    op = load_contract(find_manifest("kda.decode"))
    for j in range(2):
        x = {p["name"]: np.load(d / "inputs" / f"set{j}" / f"{p['name']}.npy") for p in spec["params"][:8]}
        assert np.isnan(x["o"]).all() and x["o"].dtype == np.float32          # outputs arrive poisoned
        assert x["slots"].dtype == np.int64 and x["state"].dtype == np.float32
        o, pool = ref.naive_decode_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], x["slots"])
        exp_o = np.load(d / "expected" / f"set{j}" / "o.npy")
        exp_s = np.load(d / "expected" / f"set{j}" / "state.npy")
        assert exp_o.dtype == np.float64 and np.array_equal(exp_o, o) and np.array_equal(exp_s, pool)
        written = np.load(d / "expected" / f"set{j}" / "state.written.npy")
        assert written.dtype == np.uint8 and written.shape == x["state"].shape
        assert np.array_equal(np.flatnonzero(written.reshape(len(written), -1).any(axis=1)), np.sort(x["slots"]))
        assert not (d / "expected" / f"set{j}" / "q.npy").exists()             # read-only: nothing expected
    s0, s1 = (np.load(d / "inputs" / f"set{j}" / "v.npy") for j in range(2))
    assert not np.array_equal(s0, s1)                                           # fresh sets
    assert list(op.inouts) == ["state"]


def test_prefill_specs_one_cubin_per_specialisation(tmp_path):
    _, specs = emit(tmp_path, "kda.prefill", "--sets", "1", "--shapes", "gpu0,gpu1")
    names = ["q", "k", "v", "g", "beta", "o", "initial_state", "final_state"]
    roles = ["input"] * 5 + ["output", "input", "output"]
    for label, (spec, cubin, d) in specs.items():
        assert [p["name"] for p in spec["params"][:8]] == names
        assert [p["role"] for p in spec["params"][:8]] == roles
        assert spec["params"][-2:] == TRITON_SCRATCH and spec["shared_bytes"] > 48 * 1024
        params, cbank, reqntid = nv_info(cubin, "kda_prefill_kernel")
        assert len(params) == len(spec["params"]) and reqntid == [128, 1, 1]
        assert params[8] == (0x40, 4) and cbank == 0x58
        for j, p in enumerate(spec["params"][:8]):
            f = d / "inputs" / "set0" / f"{p['name']}.npy"
            assert f.exists(), f
        assert np.load(d / "expected" / "set0" / "final_state.npy").dtype == np.float64
    # T = 1 is a constexpr (no T parameter); T = 63 an i32 the cubin does not assume divisible by 16
    assert [p.get("name") for p in specs["gpu0"][0]["params"] if p["kind"] == "int"] == []
    t = [p for p in specs["gpu1"][0]["params"] if p["kind"] == "int"]
    assert t == [{"kind": "int", "name": "T", "value": 63, "bits": 32, "divisible_by_16": False}]
    assert nv_info(specs["gpu1"][1], "kda_prefill_kernel")[0][9] == (0x44, 4)
    assert specs["gpu0"][0]["cubin_sha256"] != specs["gpu1"][0]["cubin_sha256"]


def test_cuda_decode_specs(tmp_path):
    _, specs = emit(tmp_path, "kda_cuda.decode", "--sets", "0")
    assert sorted(specs) == ["bench", "gpu0", "gpu1", "gpu2", "gpu3"]
    for label, (spec, cubin, d) in specs.items():
        sh = spec["shape"]
        assert spec["grid"] == [sh["N"] * sh["HV"], 1, 1] and spec["block"] == [min(sh["V"], 128), 1, 1]
        assert [p["kind"] for p in spec["params"]] == ["tensor"] * 8 + ["int"] * 5 + ["float"]
        assert [p["value"] for p in spec["params"][8:13]] == [sh[x] for x in ("N", "H", "HV", "K", "V")]
        assert spec["params"][6]["dtype"] == "i64" and spec["params"][6]["align"] == 8
        assert "nvrtc" in spec["tools"] and "ptxas" in spec["tools"]
        params, cbank, reqntid = nv_info(cubin, "kda_decode_kernel")
        assert params == {**{i: (8 * i, 8) for i in range(8)}, **{8 + i: (0x40 + 4 * i, 4) for i in range(6)}}
        assert cbank == 0x58 and reqntid is None


def test_a_candidate_that_passes_a_buffer_of_its_own_is_refused(tmp_path):
    src = (harness_root() / "kernels" / "kda" / "decode.py").read_text()
    bad = src.replace("q=q, k=k,", "q=k, k=q,")
    # a launcher that hands the kernel a tensor of its own making (not one of the call's)
    own = src.replace("    kda_decode_kernel[grid](", "    o = _Copy(o)\n    kda_decode_kernel[grid](") + \
        "\n\nclass _Copy:\n    def __init__(self, t):\n        self.t = t\n\n    def __getattr__(self, n):\n" \
        "        return getattr(self.t, n)\n"
    f = tmp_path / "decode_own.py"
    f.write_text(own)
    rc, r = harness("spec", "--kernel", "kda.decode", "--source", str(f), "--out", str(tmp_path / "o"), "--sets", "0",
                    "--shapes", "gpu1")
    assert rc == 2 and r["status"] == "error" and "not one of the call's tensors" in r["error"], r
    # swapping two tensors is not refused here (the cubin cannot tell): the gate's full check fails it
    f.write_text(bad)
    rc, r = harness("spec", "--kernel", "kda.decode", "--source", str(f), "--out", str(tmp_path / "b"), "--sets", "0",
                    "--shapes", "gpu1")
    assert rc == 0, r
    spec = json.loads(next((tmp_path / "b").glob("*/launch.json")).read_text())
    assert [p["name"] for p in spec["params"][:2]] == ["k", "q"]


def harness_root():
    from .conftest import ROOT
    return ROOT


@pytest.mark.parametrize("labels", ["gpu9", "bench,nope"])
def test_unknown_shape_labels_are_errors(tmp_path, labels):
    rc, r = harness("spec", "--kernel", "kda.decode", "--out", str(tmp_path), "--shapes", labels)
    assert rc == 2 and r["status"] == "error" and "unknown shape label" in r["error"]


def test_a_cuda_entry_taking_another_element_type_is_refused(tmp_path):
    src = (harness_root() / "kernels" / "kda_cuda" / "decode.cu").read_text()
    assert "const long long* slots" in src
    f = tmp_path / "decode.cu"
    f.write_text(src.replace("const long long* slots", "const int* slots"))
    rc, r = harness("spec", "--kernel", "kda_cuda.decode", "--source", str(f), "--out", str(tmp_path / "o"),
                    "--sets", "0", "--shapes", "gpu1")
    assert rc == 2 and "tensor slots: the kernel takes i32, the contract's tensor is i64" in r["error"], r
