"""kv_transfer: the host C++ (pybind11) KV-transfer kernels through the harness, on a CPU.

The reference; `compile`; `check` of the baseline (sandboxed worker, exact bytes, concurrency,
bad input, ThreadSanitizer); planted bugs caught by `check` (wrong bytes, out-of-bounds writes,
a segfault, a wrong exception class, a modified input, a hang, a data race); the bench
statistics on synthetic samples; a short real `bench` of the baseline against a GIL-releasing
variant. Every variant is built once, in parallel, before the tests that need it.
"""
import json
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kernels.harness.host import build as hostbuild, commands as host, stats as hoststats
from kernels.harness.manifest import find_manifest
from kernels.kv_transfer import reference as ref

from .conftest import ROOT, harness

SRC = ROOT / "kernels" / "kv_transfer" / "kv_transfer.cpp"


def release_gil(text):
    """The rewrite the baseline was written for: `py::gil_scoped_release release;` as the first
    statement of gather, scatter and checksum."""
    out, n = re.subn(r"(\n(?:void|uint64_t) (?:gather|scatter|checksum)\([^)]*\) \{\n)",
                     r"\1    py::gil_scoped_release release;\n", text)
    assert n == 3, n
    return out


def edit(text, old, new):
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


GATHER_SRC_LINE = "const uint8_t* src = pool.data + static_cast<size_t>(page_id(page_ids, i)) * p.page_bytes;"
GATHER_COPY_LINE = "std::memcpy(out.data + i * p.page_bytes, src, p.page_bytes);"
GATHER_FIRST = 'const PoolShape p = pool_shape(pool, "gather");'

# name -> (edits, text every failure list must contain)
PLANTED = {
    "off-by-one-page": ([(GATHER_SRC_LINE, GATHER_SRC_LINE.replace("page_id(page_ids, i))", "page_id(page_ids, i) + 1)"))],
                        "differ from the reference"),
    "no-bounds-check": ([('check_page_ids(page_ids, n, p.num_pages, "scatter");', "")],
                        "sentinel padding"),
    "null-dereference": ([(GATHER_FIRST, "{ volatile uint8_t* volatile nowhere = nullptr; nowhere[0] = 1; }\n    "
                           + GATHER_FIRST)], "died with SIGSEGV"),
    "wrong-exception-class": ([("throw py::index_error(", "throw py::value_error(")],
                              "expected IndexError, got ValueError"),
    # round four, class 7: the module breaks the worker's own machinery (the output it saves),
    # which shares its process: the module's failure, not the harness's
    "breaks-the-workers-io": ([(GATHER_FIRST, 'py::module_::import("numpy").attr("save") = py::none();\n    '
                                + GATHER_FIRST)], "broke the worker's own machinery after loading the module"),
    "modifies-input-pool": ([(GATHER_COPY_LINE, GATHER_COPY_LINE
                              + "\n        pool.data[static_cast<size_t>(page_id(page_ids, i)) * p.page_bytes] ^= 1;")],
                            "pool: "),
}
# every gather raises, after 30 ms: the check has its verdict after a few cases
FAILS_EVERY_CALL = [("#include <vector>\n", "#include <vector>\n#include <chrono>\n#include <stdexcept>\n#include <thread>\n"),
                    (GATHER_FIRST, "std::this_thread::sleep_for(std::chrono::milliseconds(30));\n    "
                     'throw std::runtime_error("always");\n    ' + GATHER_FIRST)]
HANG = [(GATHER_FIRST, "volatile bool spin = true;\n    while (spin) {}\n    " + GATHER_FIRST)]
RACE = [("    if (p.page_bytes == 0) return;\n    for (size_t i = 0; i < n; ++i) {\n        const uint8_t* src",
         "    static size_t calls = 0;\n    calls = calls + 1;   // unsynchronised once the GIL is released\n"
         "    if (p.page_bytes == 0) return;\n    for (size_t i = 0; i < n; ++i) {\n        const uint8_t* src")]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Every variant's source file, all built (release; TSan where needed) in parallel up front."""
    base = SRC.read_text()
    texts = {name: base for name in ["baseline"]}
    for name, (edits, _) in PLANTED.items():
        t = base
        for old, new in edits:
            t = edit(t, old, new)
        texts[name] = t
    t = base
    for old, new in HANG:
        t = edit(t, old, new)
    texts["hang"] = t
    t = base
    for old, new in FAILS_EVERY_CALL:
        t = edit(t, old, new)
    texts["fails-every-call"] = t
    texts["release-gil"] = release_gil(base)
    t = texts["release-gil"]
    for old, new in RACE:
        t = edit(t, old, new)
    texts["racy"] = t
    root = tmp_path_factory.mktemp("kv_variants")
    paths = {}
    for name, text in texts.items():
        d = root / name
        d.mkdir()
        paths[name] = d / "kv_transfer.cpp"
        paths[name].write_text(text)
    paths["baseline"] = SRC
    m = find_manifest("kv_transfer")
    jobs = [(paths[n], "release") for n in paths]
    if hostbuild.tsan_runtime()[0]:
        jobs += [(paths["baseline"], "tsan"), (paths["racy"], "tsan")]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        list(ex.map(lambda j: hostbuild.build(m, j[0], variant=j[1]), jobs))
    return paths


def test_reference_is_self_consistent():
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, (9, 24), dtype=np.uint8)
    ids = np.array([4, 0, 4, 8], np.int64)
    g = ref.gather(pool, ids)
    assert g.shape == (4 * 24,) and np.array_equal(g.reshape(4, 24)[2], pool[4])
    # scatter of what was gathered restores the pages; repeated ids: the last write wins
    assert np.array_equal(ref.scatter(g, ids, np.zeros_like(pool))[[0, 4, 8]], pool[[0, 4, 8]])
    buf = np.concatenate([np.full(24, 1, np.uint8), np.full(24, 2, np.uint8)])
    assert (ref.scatter(buf, np.array([3, 3]), pool)[3] == 2).all()
    assert np.array_equal(ref.scatter(buf[:0], np.zeros(0, np.int64), pool), pool)
    # checksum: the definition, and wrap-around mod 2**64 on a large buffer
    small = rng.integers(0, 256, 1000, dtype=np.uint8)
    assert ref.checksum(small) == sum(int(b) * (i + 1) for i, b in enumerate(small)) % 2 ** 64
    n = (1 << 23) + 5
    assert ref.checksum(np.full(n, 255, np.uint8)) == (255 * n * (n + 1) // 2) % 2 ** 64
    assert ref.checksum(pool) == ref.checksum(pool.reshape(-1)) and ref.checksum(small[:0]) == 0


def test_compile_reports_the_host_build(sources):
    rc, out = harness("compile", "--kernel", "kv_transfer", "--json")
    assert rc == 0 and out["status"] == "ok", out
    assert out["language"] == "cpp" and out["arch"].startswith("host-") and out["resources"] == {}
    assert out["device"] == "none (ahead-of-time)"
    assert out["host"]["so_bytes"] > 0 and "-O2" in out["host"]["flags"]
    if "instructions" in out:
        assert {"gather", "scatter", "checksum"} <= set(out["instructions"]["functions"])
        assert out["instructions"]["total"] == sum(out["instructions"]["by_class"].values())
    else:
        assert out["notes"]


def test_compile_error_is_an_error_with_the_log(tmp_path):
    bad = tmp_path / "kv_transfer.cpp"
    bad.write_text(SRC.read_text().replace("return sum;", "return sum"))
    rc, out = harness("compile", "--kernel", "kv_transfer", "--source", str(bad))
    assert rc == 2 and out["status"] == "error" and "error:" in out["error"], out


def test_baseline_passes_check(sources):
    rc, out = harness("check", "--kernel", "kv_transfer", "--seeds", "2", "--seed", "7", "--json")
    assert rc == 0 and out["status"] == "passed", out.get("failures") or out.get("error")
    assert out["mode"] == "host" and out["device"] == "cpu (host)" and out["seeds"] == [7, 8]
    assert out["tolerance"] == {"rel_l2": 0.0, "slice_rel_l2": 0.0, "max_abs_rel": 0.0}
    ids = {c["id"].split()[0] for c in out["cases"]}
    for fam in ("gather/random", "gather/empty", "gather/full", "scatter/repeated", "checksum/pool",
                "concurrent/gather", "concurrent/scatter", "gather/bad-overlap", "scatter/bad-index-negative"):
        assert fam in ids, fam
    case = next(c for c in out["cases"] if c["id"].startswith("scatter/random"))
    m = case["outputs"]["pool"]
    assert m["mismatched_bytes"] == 0 and m["rel_l2"] == 0 and case["padding"]["pool"]
    assert set(m) >= {"rel_l2", "max_abs", "max_abs_rel", "worst_slice", "nonfinite", "mismatched_bytes"}
    sb = out["sandbox"]
    assert sb["rlimits"]["CORE"] == 0 and sb["crashes"] == 0 and "network" in sb
    tsan = out["tsan"]
    assert tsan["ran"] or tsan["reason"]
    if tsan["ran"]:
        assert tsan["races"] == 0
    print(f"\nkv_transfer check: {len(out['cases'])} cases in {out['seconds']} s; network {sb['network']}; "
          f"tsan {tsan}")


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_bug_is_caught(name, sources):
    rc, out = harness("check", "--kernel", "kv_transfer", "--source", str(sources[name]), "--quick", "--seed", "3",
                      "--no-tsan", "--json")
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    joined = "\n".join(out["failures"])
    assert PLANTED[name][1] in joined, joined[:3000]
    if name == "null-dereference":
        first = next(f for f in out["failures"] if "SIGSEGV" in f)
        assert re.match(r"gather/\S+ P=\d+ B=\d+ N=\d+ seed=3: candidate process died with SIGSEGV", first), first
    print(f"\n{name} -> {out['failures'][0][:200]}")


def test_a_check_stops_once_its_verdict_is_made(sources):
    """Once STOP_AFTER_FAILED cases have failed the rest are not run (the worker is stopped when its
    progress shows them, so a few more may finish first), and ThreadSanitizer, which could only add
    failures, is not run either: both say so. (A candidate that fails fewer cases has them all run:
    tests/trust.rs's `skips-at-bench-count` is caught by the last cases, the bench's sizes.)"""
    rc, out = harness("check", "--kernel", "kv_transfer", "--source", str(sources["fails-every-call"]), "--seed", "3",
                      "--json")
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    failed = [c for c in out["cases"] if c["failures"] and not c["failures"][0].startswith("not run")]
    why = f"the candidate had already failed {len(failed)} cases"
    not_run = [c for c in out["cases"] if c["failures"][:1] == [f"not run: {why}"]]
    assert len(failed) >= host.STOP_AFTER_FAILED, [c["failures"] for c in failed]
    assert all("RuntimeError: always" in "".join(c["failures"]) for c in failed), [c["failures"] for c in failed]
    passed = [c for c in out["cases"] if c["passed"]]
    assert not_run and len(failed) + len(not_run) + len(passed) == len(out["cases"]), len(out["cases"])
    assert out["failures"][-1] == f"{len(not_run)} cases not run: {why}", out["failures"]
    assert out["tsan"]["ran"] is False and "could not change the verdict" in out["tsan"]["reason"], out["tsan"]


def test_hang_is_killed_at_the_deadline(sources):
    t0 = time.monotonic()
    rc, out = harness("check", "--kernel", "kv_transfer", "--source", str(sources["hang"]), "--quick",
                      "--no-tsan", "--timeout", "8")
    assert rc == 2 and out["status"] == "error" and "timed out" in out["error"], out
    assert time.monotonic() - t0 < 15


def test_data_race_is_found_by_tsan(sources):
    rc, out = harness("check", "--kernel", "kv_transfer", "--source", str(sources["racy"]), "--quick",
                      "--seed", "4")
    if not out["tsan"]["ran"]:
        pytest.skip(f"ThreadSanitizer cannot run here: {out['tsan']['reason']}")
    assert rc == 1 and out["status"] == "failed" and out["tsan"]["races"] >= 1, out["tsan"]
    assert all(f.startswith("tsan: ") for f in out["failures"]), out["failures"]   # the bytes are right


# bench statistics on synthetic samples -----------------------------------------------------------

def _window(requests, alone=10000, loaded=9000, pairs=100.0, lat_ms=10.0, us=(600.0, 650.0, 700.0)):
    """A window of one second: `requests` requests done, each `lat_ms` (the last one twice as long)."""
    lat = [lat_ms * 1e3] * max(requests - 1, 0) + [2 * lat_ms * 1e3] * min(requests, 1)
    return {"requests": requests, "loaded_s": 1.0, "latency_us": lat, "loaded_steps": loaded, "tokens": loaded * 8,
            "alone_steps": alone, "alone_s": 1.0, "pairs_in_window": pairs, "pair_us": list(us)}


def _rounds(base, cand):
    return [{"baseline": b, "candidate": c} for b, c in zip(base, cand)]


def test_bench_statistics_on_a_normal_measurement():
    base = [_window(475 + d, loaded=6000 + d, lat_ms=17.0) for d in (0, 5, -5, 2, -2)]
    cand = [_window(690 + d, loaded=9800 + d, lat_ms=11.0) for d in (0, 5, -5, 2, -2)]
    s = hoststats.summarize(_rounds(base, cand), bytes_per_call=8e6, peak_gbps=40.0, threads=1)
    b, c = s["results"]["baseline"], s["results"]["candidate"]
    assert b["requests_per_s"] == 475 and c["requests_per_s"] == 690
    assert s["speedup"] == pytest.approx(690 / 475, rel=0.01)
    assert abs(b["gap"] - 0.4) < 0.01 and abs(c["gap"] - 0.02) < 0.01
    assert b["p50_us"] == 17e3 and b["p99_us"] == pytest.approx(34e3, rel=0.5)   # the slow request is the tail
    assert s["latency_ratio"] == pytest.approx(c["p99_us"] / b["p99_us"])
    assert 0 < s["noise_floor"] < 0.02 and s["significant"] and s["flags"] == []
    assert b["transfer_gbps"] == pytest.approx(100 * 2 * 8e6 / 1e9)
    assert b["median_us"] == 650.0 and b["samples"] == 15 and len(b["gaps"]) == 5
    # the same service on both sides is not significant
    s2 = hoststats.summarize(_rounds(base, base), 8e6, 40.0, 1)
    assert not s2["significant"] and s2["speedup"] == pytest.approx(1.0)


def test_a_better_scheduler_gap_with_fewer_requests_is_a_slower_service():
    # a GIL release that then sleeps: the scheduler runs freely, the requests wait for their transfers
    base = [_window(475, loaded=6000, lat_ms=17.0) for _ in range(5)]
    cand = [_window(330, loaded=9600, lat_ms=24.0, pairs=33.0) for _ in range(5)]
    s = hoststats.summarize(_rounds(base, cand), 8e6, 40.0, 1)
    assert s["results"]["candidate"]["gap"] < s["results"]["baseline"]["gap"]
    assert s["speedup"] < 1 and s["significant"] and s["latency_ratio"] > 1


def test_bench_noise_floor_takes_the_larger_spread():
    base = [_window(r) for r in (400, 450, 500, 550, 600)]                     # requests spread ~ +-15%
    cand = [_window(500) for _ in range(5)]
    s = hoststats.summarize(_rounds(base, cand), 8e6, 40.0, 1)
    assert s["noise_floor"] == pytest.approx(s["results"]["baseline"]["requests_spread"])
    assert s["noise_floor"] == pytest.approx((580 - 420) / (2 * 500))
    noisy = [_window(500, alone=a, loaded=a * 0.98) for a in (6000, 10000, 14000, 8000, 12000)]  # alone spread dominates
    s = hoststats.summarize(_rounds(noisy, noisy), 8e6, 40.0, 1)
    alone = [6000, 10000, 14000, 8000, 12000] * 2
    want = (hoststats.percentile(alone, 90) - hoststats.percentile(alone, 10)) / (2 * hoststats.percentile(alone, 50))
    assert s["noise_floor"] == pytest.approx(want) and not s["significant"]


@pytest.mark.parametrize("kind", ["negative-gap", "beyond-peak"])
def test_bench_flags_fire_on_impossible_results(kind):
    base = [_window(475, loaded=8000) for _ in range(5)]
    cand = [_window(690, loaded=9900) for _ in range(5)]
    if kind == "negative-gap":
        cand = [_window(690, loaded=11500) for _ in range(5)]      # faster under load than alone
    else:
        cand = [_window(690, loaded=9900, pairs=10000) for _ in range(5)]   # 160 GB/s against a 40 GB/s peak
    s = hoststats.summarize(_rounds(base, cand), 8e6, 40.0, 1)
    word = {"negative-gap": "faster with transfers", "beyond-peak": "beyond 1.5 x"}[kind]
    assert any(word in f for f in s["flags"]), s["flags"]


def test_a_baseline_far_below_its_history_is_flagged():
    hist = [470.0, 480.0, 476.0]
    assert hoststats.history_check(472.0, hist, 0.02) is None
    assert hoststats.history_check(900.0, hist, 0.02) is None       # faster than ever costs the candidate only
    far = hoststats.history_check(300.0, hist, 0.02)
    assert far and "far below its history" in far and "470.0-480.0 over 3 runs" in far
    assert hoststats.history_check(300.0, hist[:2], 0.02) is None   # too little history to judge
    assert hoststats.history_check(300.0, hist, 0.15) is None       # a noisy run widens the range (3 x 15%)
    assert hoststats.history_check(float("nan"), hist, 0.02) is None


# a short real bench ---------------------------------------------------------------------------------

def test_bench_reports_the_service_figures_of_both_sides(sources, tmp_path):
    env = {"KIDIOM_HOST_HISTORY": str(tmp_path)}     # this test's own baseline history
    rc, out = harness("bench", "--kernel", "kv_transfer", "--source", str(sources["release-gil"]),
                      "--rounds", "3", "--warmup", "1", "--window", "0.25", "--json", env=env)
    assert rc == 0 and out["status"] == "ok", out.get("error") or out.get("reason") or out.get("failures")
    assert out["metric"] == "service-requests" and out["device"] == "cpu (host)" and out["mode"] == "host"
    assert out["processes"] == "one per variant and window"
    assert out["checksums"]["verified"] and out["checksums"]["windows"] == 2 * 4
    order = out["order"]
    assert len(order) == 6 and sorted(order) == ["baseline"] * 3 + ["candidate"] * 3
    assert order[0] != order[2] and {order[0], order[1]} == {"baseline", "candidate"}   # alternating first
    for name in ("baseline", "candidate"):
        r = out["results"][name]
        for k in ("requests_per_s", "p50_us", "p99_us", "gap", "steps_per_s_alone", "steps_per_s_loaded",
                  "transfer_gbps", "median_us", "p10_us", "p90_us"):
            assert isinstance(r[k], float) and math.isfinite(r[k]), (name, k, r[k])
        assert len(r["requests_per_s_all"]) == 3 and r["requests"] > 0 and r["transfer_gbps"] > 0
        assert r["p99_us"] >= r["p50_us"]
    for k in ("speedup", "noise_floor", "latency_ratio"):
        assert math.isfinite(out[k])
    assert out["floor"]["peak_gbps"] > 0 and out["floor"]["bytes"] == 2 * 256 * 16384
    assert out["history"]["runs"] == 0
    b, c = out["results"]["baseline"], out["results"]["candidate"]
    # Which side is faster is the speed gate's call, and a timing: tests/service.rs asks it with the CPU to
    # itself. Here, beside another xdist worker on two cores, three 0.25 s windows decide nothing.
    print(f"\nbench: requests/s {b['requests_per_s']:.0f} -> {c['requests_per_s']:.0f} ({out['speedup']:.2f}x), "
          f"p99 {b['p99_us'] / 1e3:.1f} -> {c['p99_us'] / 1e3:.1f} ms, gap {b['gap']:.1%} -> {c['gap']:.1%}, "
          f"noise {out['noise_floor']:.1%}, flags {out['flags']}")
    # the run's baseline figure is now this machine's history for the next, kept with what it ran on
    kept = json.loads((tmp_path / f"{out['history']['key']}.json").read_text())
    assert out["history"]["kept"] and kept["kernel"] == "kv_transfer" and kept["key"] == out["history"]["key"]
    assert kept["requests_per_s"] == [b["requests_per_s"]] and kept["machine"]["cpus"] >= 1
    rc, out = harness("bench", "--kernel", "kv_transfer", "--source", str(sources["release-gil"]),
                      "--rounds", "1", "--warmup", "0", "--window", "0.25", "--json", env=env)
    assert rc == 0 and out["history"]["runs"] == 1, out.get("history")
    # `--history-dir` (kidiom validate's, filled from its catalog) over the environment's
    other = tmp_path / "catalog"
    other.mkdir()
    rc, out = harness("bench", "--kernel", "kv_transfer", "--source", str(sources["release-gil"]), "--rounds", "1",
                      "--warmup", "0", "--window", "0.25", "--history-dir", str(other), "--json", env=env)
    assert rc == 0 and out["history"]["runs"] == 0 and (other / f"{out['history']['key']}.json").exists()


# TSan report attribution on synthetic reports -----------------------------------------------------

def _report(*accesses, extra=""):
    """A TSan data-race report: each access is (header, [(func, location, module)])."""
    lines = ["WARNING: ThreadSanitizer: data race (pid=7)"]
    for header, frames in accesses:
        lines.append(f"  {header} of size 8 at 0x7b0400003170 by thread T2:")
        lines += [f"    #{i} {f} {loc} ({mod}+0x1a2b)" for i, (f, loc, mod) in enumerate(frames)]
        lines.append("")
    lines.append(extra)
    lines.append("SUMMARY: ThreadSanitizer: data race somewhere")
    return "==================\n" + "\n".join(lines) + "\n==================\n"


MOD = "kv.cpython-311-x86_64-linux-gnu.so"
TSAN = ("free", "tsan_interceptors_posix.cpp:706", "libtsan.so.2.0.0")
OURS = ("gather(View const&)", "/tmp/b/kv.cpp:202", MOD)
CREATED_BY_US = f"  Thread T2 (tid=9, running) created by main thread at:\n    #0 start /tmp/b/kv.cpp:9 ({MOD}+0x10)\n"


def test_tsan_blames_the_candidate_only_for_its_own_accesses():
    ours = _report(("Write", [OURS]), ("Previous read", [OURS]))
    via_interceptor = _report(("Write", [("memcpy", "tsan_interceptors.inc:827", "libtsan.so.2.0.0"), OURS]),
                              ("Previous write", [("PyObject_Malloc", "Objects/obmalloc.c:9", "libpython3.11.so.1.0"),
                                                  OURS]))
    loader = _report(("Write", [TSAN, ("free", "../include/rtld-malloc.h:50", "ld-linux-x86-64.so.2"),
                                ("__GI__dl_deallocate_tls", "../elf/dl-tls.c:682", "ld-linux-x86-64.so.2")]),
                     ("Previous write", [("pybind11::detail::loader_life_support::~loader_life_support()",
                                          "type_caster_base.h:78", MOD)]), extra=CREATED_BY_US)
    elsewhere = _report(("Write", [("PyDict_SetItem", "Objects/dictobject.c:1", "libpython3.11.so.1.0")]),
                        ("Previous read", [("PyDict_GetItem", "Objects/dictobject.c:2", "libpython3.11.so.1.0")]),
                        extra=CREATED_BY_US)
    by_name = _report(("Write", [("(anonymous namespace)::copy_page(View const&) [clone .cold]", "kv.cpp:5",
                                  "unknown-module")]), ("Previous read", [TSAN]))
    leak = "==================\nWARNING: ThreadSanitizer: thread leak (pid=7)\n==================\n"
    races, in_loader, other = host._tsan_reports(ours + via_interceptor + loader + elsewhere + by_name + leak,
                                                 MOD, {"gather", "copy_page"})
    assert len(races) == 3, races              # ours, via_interceptor and by_name
    assert "__GI__dl_deallocate_tls" not in "".join(races)
    assert len(in_loader) == 1 and "rtld-malloc.h" in in_loader[0]
    assert other == 2                         # the race between Python's own accesses, and the thread leak
