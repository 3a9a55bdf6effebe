"""A candidate that differs from the baseline only in memory hints (check.interpreter_identical):
on a CPU the interpreter runs the baseline's own program, so `check` runs every shape on one seed
(outputs equal to the baseline's) and names the rest as not run, and `profile` counts nothing.
Anything else in the diff, however small, gets the full plan."""
import time

import pytest

from kernels.harness.manifest import all_manifests
from kernels.harness.triton.check import interpreter_identical, run_check

from .conftest import HAS_CUDA, harness, variant

pytestmark = pytest.mark.skipif(HAS_CUDA, reason="the interpreter's reduced plan is a CPU's")
M = all_manifests()["kda.decode"]
LOAD_V = "b_v = tl.load(p_v, mask=m_v, other=0.)"
HINTED = "b_v = tl.load(p_v, mask=m_v, other=0., eviction_policy=\"evict_first\")"


def test_a_hint_only_candidate_runs_the_shapes_once_and_names_what_it_skipped(tmp_path):
    src = variant(tmp_path, M.source_path, [(LOAD_V, HINTED)])
    assert interpreter_identical(M.source_path, src)
    res = run_check(M, str(src), seeds=[5, 6, 7], device="cpu", deadline=time.monotonic() + 600)
    assert res["passed"], res["failures"]
    assert {c["seed"] for c in res["cases"]} == {5} and len(res["cases"]) == len(M.shapes["cpu"])
    assert all(c["outputs"] == c["baseline"]["outputs"] for c in res["cases"])
    not_run = res["same_program"]["not_run"]
    assert "GPU specializations" in not_run and "seeds after the first (2)" in not_run, not_run
    assert "specializations" not in res and "drift" not in res and "program_order" not in res


def test_a_hint_and_anything_else_gets_the_full_plan(tmp_path):
    # the same hint plus a changed constant: not the baseline's program
    src = variant(tmp_path, M.source_path, [(LOAD_V, HINTED.replace("other=0.", "other=1."))])
    assert interpreter_identical(M.source_path, src) is None
    rc, out = harness("profile", "--kernel", "kda.decode", "--source", str(src), "--timeout", "300")
    assert rc == 0 and "same_program" not in out and out["totals"]["load_bytes"] > 0, out


def test_the_profile_of_a_hint_only_candidate_is_the_baselines_without_running(tmp_path):
    src = variant(tmp_path, M.source_path, [(LOAD_V, HINTED)])
    rc, out = harness("profile", "--kernel", "kda.decode", "--source", str(src), "--timeout", "300")
    assert (rc, out["status"]) == (0, "ok"), out
    assert "memory hints" in out["same_program"] and "totals" not in out, out
