"""The baseline's errors per case, computed once per run (triton/basecache.py): the same verdicts
and numbers as computing them per check, a changed baseline never served a stale entry, a damaged
entry measured again, and a candidate that cannot see the cache."""
import json
import time

import pytest

from kernels.harness.manifest import all_manifests
from kernels.harness.triton.check import run_check

from .conftest import HAS_CUDA

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the cache is exercised on the CPU's interpreter")
M = all_manifests()["kda.decode"]


def _check(source, cache, seed=11):
    return run_check(M, str(source), seeds=[seed], device="cpu", shapes=M.shapes["cpu"][:2], with_curve=False,
                     with_consistency=False, with_specializations=False, with_order=False, with_drift=False,
                     deadline=time.monotonic() + 300, baseline_cache=str(cache) if cache else None)


def _numbers(res):
    return [(c["id"], c["passed"], c["outputs"], c.get("baseline")) for c in res["cases"]]


def test_the_second_check_reads_the_baselines_errors_and_judges_the_same(tmp_path):
    cand = tmp_path / "cand" / "decode.py"
    cand.parent.mkdir()
    cand.write_text(M.source_path.read_text())
    plain = _check(cand, None)
    first = _check(cand, tmp_path / "cache")
    second = _check(cand, tmp_path / "cache")
    assert first["baseline"]["cache"] == {"hits": 0, "stored": 2}, first["baseline"]
    assert second["baseline"]["cache"] == {"hits": 2, "stored": 0}, second["baseline"]
    assert _numbers(plain) == _numbers(first) == _numbers(second)
    assert all(c.get("baseline") for c in second["cases"]), "the baseline's errors are still reported"
    # with every figure read, the baseline's worker never starts (nothing asked it for anything)
    assert first["sandbox"]["workers"] == 2 and second["sandbox"]["workers"] == 1, second["sandbox"]
    assert second["sandbox"]["baseline_worker"].startswith("not started"), second["sandbox"]
    # another seed is other inputs: not served from the cache
    other = _check(cand, tmp_path / "cache", seed=12)
    assert other["baseline"]["cache"]["hits"] == 0


def _specializations(source, cache, seed=11):
    return run_check(M, str(source), seeds=[seed], device="cpu", shapes=M.shapes["cpu"][:1], with_curve=False,
                     with_consistency=False, with_specializations=True, with_order=False, with_drift=False,
                     deadline=time.monotonic() + 300, baseline_cache=str(cache))


def test_the_specializations_read_the_baselines_outputs_and_judge_the_same(tmp_path):
    cand = tmp_path / "cand" / "decode.py"
    cand.parent.mkdir()
    cand.write_text(M.source_path.read_text())
    first = _specializations(cand, tmp_path / "cache")
    ran = [c for c in first["specializations"]["cases"] if "skipped" not in c]
    assert ran and all(c.get("baseline") for c in ran), first["specializations"]
    # the sampled programs are drawn by each check (issue #50): the baseline runs the same ones
    # beside the candidate and its outputs are not kept (no later check draws the same sample)
    assert first["specializations"]["programs"] == 8 and not list((tmp_path / "cache").glob("*.npz"))
    second = _specializations(cand, tmp_path / "cache")
    assert second["specializations"]["programs_seed"] != first["specializations"]["programs_seed"]
    assert all(c.get("baseline") and c["passed"] for c in second["specializations"]["cases"] if "skipped" not in c)
    # a candidate that adds a comparison on a program id runs every program, and then the
    # baseline's whole-grid outputs are kept and read back by the next such check
    twin = M.source_path.read_text().replace(
        "    tl.store(p_o,", "    b_o = tl.where(i_nh >= 1, b_o, b_o * 1.0)\n    tl.store(p_o,", 1)
    cand.write_text(twin)
    third = _specializations(cand, tmp_path / "cache")
    assert third["specializations"]["programs"] == "all" and third["passed"], third["failures"][:3]
    ran = [c for c in third["specializations"]["cases"] if "skipped" not in c]
    assert len(list((tmp_path / "cache").glob("*.npz"))) == len(ran)
    fourth = _specializations(cand, tmp_path / "cache")
    assert fourth["baseline"]["cache"]["hits"] == third["baseline"]["cache"]["hits"] + len(ran)
    strip = lambda r: [{k: v for k, v in c.items() if k != "seconds"} for c in r["specializations"]["cases"]]
    assert strip(third) == strip(fourth)
    # a wrong candidate is still judged against the (cached) baseline's outputs and fails
    bad = "b_o = tl.sum(b_s * b_q[:, None], axis=0)"
    assert bad in twin
    cand.write_text(twin.replace(bad, bad + " * 1.01"))
    worse = _specializations(cand, tmp_path / "cache")
    assert not worse["passed"] and any("[specialization of" in f for f in worse["failures"]), worse["failures"][:3]
    # a damaged archive is measured again
    for p in (tmp_path / "cache").glob("*.npz"):
        p.write_bytes(b"PK not a zip")
    cand.write_text(twin)
    again = _specializations(cand, tmp_path / "cache")
    assert strip(again) == strip(third)


def test_a_damaged_entry_is_measured_again(tmp_path):
    cand = tmp_path / "cand" / "decode.py"
    cand.parent.mkdir()
    cand.write_text(M.source_path.read_text())
    first = _check(cand, tmp_path / "cache")
    entries = sorted((tmp_path / "cache").glob("*.json"))
    assert len(entries) == 2
    entries[0].write_text(json.dumps([{"o": {"rel_l2": "not a number"}}]))
    entries[1].write_text("[")
    again = _check(cand, tmp_path / "cache")
    assert again["baseline"]["cache"] == {"hits": 0, "stored": 2}
    assert _numbers(again) == _numbers(first)


def test_a_changed_baseline_is_never_served_an_old_entry(tmp_path, monkeypatch):
    from kernels.harness.triton.basecache import BaselineCache
    from kernels.harness.triton.check import _Case
    from kernels.harness.contract import load_contract
    case = _Case(load_contract(M), M.shapes["cpu"][0], 11, 0)
    a = BaselineCache(tmp_path, M, "cpu", True)
    a.put(case, [{}, {}])
    assert BaselineCache(tmp_path, M, "cpu", True).get(case, 2) == [{}, {}]
    assert BaselineCache(tmp_path, M, "cpu", False).get(case, 2) is None, "another TF32 mode"
    edited = tmp_path / "edited.py"
    edited.write_text(M.source_path.read_text() + "\n# edited\n")
    monkeypatch.setattr(type(M), "source_path", property(lambda self: edited))
    assert BaselineCache(tmp_path, M, "cpu", True).get(case, 2) is None, "another baseline source"


def test_a_candidate_cannot_see_the_cache(tmp_path):
    cache = tmp_path / "cache"
    cand = tmp_path / "cand" / "decode.py"
    cand.parent.mkdir()
    cand.write_text(M.source_path.read_text())
    _check(cand, cache)
    assert list(cache.glob("*.json")), "entries to look for"
    # a candidate that would read the baseline's cached numbers fails to load if it can see them
    spy = (f"import os as _os\nassert not _os.path.exists({str(cache)!r}), 'the baseline cache is visible'\n"
           + M.source_path.read_text())
    cand.write_text(spy)
    res = _check(cand, cache)
    assert res["passed"], res["failures"][:3]
