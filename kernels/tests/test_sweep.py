"""The split precisions' emulation and the `sweep` command a per-site search measures with."""
import json

import numpy as np
import pytest

from kernels.harness.triton.interp import emulated_dot, round_to_bf16, round_to_tf32, truncate_to_tf32

from .conftest import HAS_CUDA, add_kwarg_to_calls, harness


def _dots(seed=0, n=48):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    err = lambda x: float(np.linalg.norm(x - exact) / np.linalg.norm(exact))  # noqa: E731
    return a, b, np.zeros((n, n), np.float32), err


def test_split_precisions_sit_between_tf32_and_ieee():
    a, b, acc, err = _dots()
    tf32 = err(emulated_dot(a, b, acc, "tf32"))
    bf16x3 = err(emulated_dot(a, b, acc, "bf16x3"))
    bf16x6 = err(emulated_dot(a, b, acc, "bf16x6"))
    tf32x3 = err(emulated_dot(a, b, acc, "tf32x3"))
    ieee = err(np.matmul(a, b))
    assert emulated_dot(a, b, acc, "ieee") is None   # the interpreter's own product is faithful
    # TF32 keeps 10 mantissa bits; bf16x3 about 16; tf32x3 and bf16x6 about float32's 23
    assert 2e-4 < tf32 < 5e-3, tf32
    assert 20 * bf16x3 < tf32 and bf16x3 > 3 * tf32x3, (bf16x3, tf32x3)
    assert tf32x3 < 10 * ieee and bf16x6 < 10 * ieee, (tf32x3, bf16x6, ieee)


def test_tf32x3_is_the_three_tf32_products_triton_emits():
    a, b, acc, _ = _dots(1, 16)
    # big: an explicit cvt.rna; small: the remainder, which the tensor core reads truncated
    big_a, big_b = round_to_tf32(a), round_to_tf32(b)
    small_a, small_b = (a - big_a).astype(np.float32), (b - big_b).astype(np.float32)
    t = lambda x, y: np.matmul(truncate_to_tf32(x), truncate_to_tf32(y), dtype=np.float32)  # noqa: E731
    want = t(big_a, big_b) + (t(big_a, small_b) + (t(small_a, big_b) + acc))
    assert np.array_equal(emulated_dot(a, b, acc, "tf32x3"), want)


def test_plain_tf32_reads_operands_truncated():
    x = np.array([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -11, -(1.0 + 2.0 ** -11), np.inf], dtype=np.float32)
    t = truncate_to_tf32(x)
    assert t[0] == 1.0 and t[1] == 1.0 + 2.0 ** -10 and t[2] == -1.0 and np.isinf(t[3])
    a = np.full((1, 1), 1.0 + 2.0 ** -11 + 2.0 ** -12, np.float32)
    # rounding would give 1 + 2^-10; the tensor core's truncation gives 1
    assert emulated_dot(a, np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32), "tf32")[0, 0] == 1.0


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9, np.inf], dtype=np.float32)
    r = round_to_bf16(x)
    assert r[0] == 1.0 and r[1] == 1.0          # tie: to the even mantissa (1.0)
    assert r[2] == 1.0 + 2.0 ** -6              # tie: up to the even neighbour
    assert r[3] == 1.0 and np.isinf(r[4])


def _variants(tmp_path, texts, compile=False):
    items = []
    for i, t in enumerate(texts):
        d = tmp_path / f"v{i}"
        d.mkdir()
        (d / "prefill.py").write_text(t)
        items.append({"id": f"v{i}", "source": str(d / "prefill.py")})
    spec = tmp_path / "variants.json"
    spec.write_text(json.dumps({"variants": items, "compile": compile}))
    return spec


@pytest.mark.skipif(HAS_CUDA, reason="the sweep's curves run in the interpreter")
def test_sweep_measures_caches_and_reports_a_broken_variant(tmp_path, monkeypatch):
    from kernels.harness.manifest import find_manifest
    monkeypatch.setenv("KIDIOM_CACHE", str(tmp_path / "cache"))
    src = find_manifest("kda.prefill").source_path.read_text()
    first = add_kwarg_to_calls(src, "tl.dot", 'input_precision="bf16x3"')
    assert first.count("bf16x3") == 10
    broken = src.replace("b_o += tl.dot(b_A, b_D)", "b_o += tl.dot(b_A, b_D, input_precision=\"fp8\")", 1)
    spec = _variants(tmp_path, [src, first, broken])
    code, out = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec), "--jobs", "2",
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out
    v = {x["id"]: x for x in out["variants"]}
    assert out["measured"] == 3 and not any(x["cached"] for x in v.values())
    base, one = v["v0"]["curve"][-1]["rel_l2"], v["v1"]["curve"][-1]["rel_l2"]
    assert 1e-4 < base < 1e-2 and one < base / 20, (base, one)   # bf16x3 everywhere: about 7e-6
    assert "input_precision" in v["v2"]["error"] and "curve" not in v["v2"], v["v2"]
    # again: nothing measured twice
    code, out = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec),
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["measured"] == 1, out   # only the broken one, which was never cached
    assert [x["curve"] for x in out["variants"][:2]] == [v["v0"]["curve"], v["v1"]["curve"]]


def test_sweep_refuses_a_kernel_without_a_curve(tmp_path):
    spec = tmp_path / "v.json"
    spec.write_text(json.dumps({"variants": []}))
    code, out = harness("sweep", "--kernel", "kda.decode", "--variants", str(spec))
    assert code == 2 and "no [curve]" in out["error"], out


@pytest.mark.skipif(HAS_CUDA, reason="the sweep's curves run in the interpreter")
def test_one_worker_serves_many_variants_and_a_broken_one_fails_alone(tmp_path):
    from kernels.harness.manifest import find_manifest
    from kernels.harness.triton import check
    m = find_manifest("kda.prefill")
    src = m.source_path.read_text()
    bf16x3 = add_kwarg_to_calls(src, "tl.dot", 'input_precision="bf16x3"')
    # fails to load: a worker hosting it with the others could host none of them
    unloadable = src + "\nraise ImportError('planted: this variant does not load')\n"
    texts = [src, bf16x3, unloadable, bf16x3.replace("# ", "#  ")]
    paths = []
    for i, t in enumerate(texts):
        p = tmp_path / f"v{i}" / "prefill.py"
        p.parent.mkdir()
        p.write_text(t)
        paths.append(str(p))
    lengths = [64, 128]
    # as a group: the unloadable one makes the group's worker fail to start, so nothing is answered
    curves, failed = check.error_curves(m, {"a": paths[0], "c": paths[2]}, lengths, seed=0)
    assert curves == {} and failed == {}, (curves, failed)
    # the sweep measures such variants alone: the good ones get the curve each would get alone
    (tmp_path / "s").mkdir()
    spec = _variants(tmp_path / "s", texts)
    code, out = harness("sweep", "--kernel", "kda.prefill", "--variants", str(spec), "--jobs", "2",
                        env={"KIDIOM_CACHE": str(tmp_path / "cache")})
    assert code == 0 and out["status"] == "ok", out
    v = {x["id"]: x for x in out["variants"]}
    assert "planted" in v["v2"]["error"] and "curve" not in v["v2"], v["v2"]
    for i in (0, 1, 3):
        alone = check.error_curve(m, paths[i], list(m.curve["cpu_T"]), seed=0)
        assert v[f"v{i}"]["curve"] == alone, i
    assert v["v1"]["curve"] == v["v3"]["curve"], "a comment changes no number"
