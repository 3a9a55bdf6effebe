"""Host C++ size-triggered behaviour (issue #22, class 6): correctness at the bench's sizes, and a
bench that verifies every call it times.

Planted variants of kernels/kv_transfer/kv_transfer.cpp, each through a real `check` or `bench`
of the harness: a module that skips its copy only at the bench's page count, one that copies
only half of gather's `out` at large sizes, one that skips scatter work when another call runs
at the same time, one that modifies the source pool at the bench size (all caught by `check`'s
bench-size cases); and modules that misbehave only after a while (one scatter call in the run
does nothing; gather fills half of `out` after its 60th call; gather writes its source after
its 60th call), which the bench's own correctness gate (a fresh worker making fewer calls) does not
see: the bench's exchange ring and its read-only inputs catch them. The ring's replay is checked
against the reference, and its read-only mapping against a raw write.
"""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kernels.harness.host import build as hostbuild, commands as host, stats as hoststats
from kernels.harness.manifest import find_manifest
from kernels.kv_transfer import kv_transfer_contract as kvc, reference as ref

from .conftest import ROOT, harness
from .test_kv_transfer import SRC, edit, release_gil

GATHER_CHECK = 'check_page_ids(page_ids, n, p.num_pages, "gather");'
SCATTER_CHECK = 'check_page_ids(page_ids, n, p.num_pages, "scatter");'
GATHER_LOOP = "    if (p.page_bytes == 0) return;\n    for (size_t i = 0; i < n; ++i) {\n        const uint8_t* src"
GATHER_COPIED = "        std::memcpy(out.data + i * p.page_bytes, src, p.page_bytes);\n    }\n"
SOURCE_PAGE = "pool.data[static_cast<size_t>(page_id(page_ids, 0)) * p.page_bytes]"

AFTER = 120   # "after a while": calls of a function before a planted module starts to misbehave

# name -> (base, edits)
VARIANTS = {
    # caught by check: behaviour keyed on the bench's sizes or on concurrency
    "skip-at-bench-count": ("baseline", [(GATHER_CHECK, GATHER_CHECK + "\n    if (n == 256) return;   // planted")]),
    "half-out-large": ("baseline", [(GATHER_LOOP, GATHER_LOOP.replace(
        "for (size_t i = 0; i < n; ++i)",
        "const size_t todo = need > (size_t(1) << 20) ? n / 2 : n;   // planted\n"
        "    for (size_t i = 0; i < todo; ++i)"))]),
    "skip-when-concurrent": ("release-gil", [
        ("#include <cstring>\n", "#include <cstring>\n#include <atomic>\n"),
        (SCATTER_CHECK, SCATTER_CHECK + "\n    static std::atomic<int> inflight{0};\n"
         "    struct Leave { ~Leave() { --inflight; } };\n    const int busy = ++inflight;\n    Leave leave;\n"
         "    if (busy > 1 && need >= (size_t(1) << 20)) return;   // planted: another call is running")]),
    "modifies-source-large": ("baseline", [(GATHER_COPIED, GATHER_COPIED
                                            + f"    if (need >= (size_t(1) << 22)) {SOURCE_PAGE} += 1;   // planted\n")]),
    # caught by the bench: behaviour that starts after AFTER calls (the bench's correctness gate makes
    # fewer in its own worker, as a test below checks; the bench's worker makes more in its first windows)
    "skip-one-scatter-call": ("baseline", [(SCATTER_CHECK, SCATTER_CHECK
                                            + f"\n    static size_t calls = 0;\n    if (++calls == {AFTER}) return;   // planted")]),
    "half-out-after-a-while": ("baseline", [(GATHER_LOOP, GATHER_LOOP.replace(
        "for (size_t i = 0; i < n; ++i)",
        f"static size_t calls = 0;\n    const size_t todo = ++calls > {AFTER} ? n / 2 : n;   // planted\n"
        "    for (size_t i = 0; i < todo; ++i)"))]),
    "writes-source-after-a-while": ("baseline", [(GATHER_COPIED, GATHER_COPIED
                                                  + "    static size_t calls = 0;\n"
                                                  + f"    if (++calls > {AFTER}) {SOURCE_PAGE} += 1;   // planted\n")]),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """Every variant's source, all built in parallel up front."""
    base = {"baseline": SRC.read_text()}
    base["release-gil"] = release_gil(base["baseline"])
    root = tmp_path_factory.mktemp("kv_sizes")
    paths = {}
    for name, (b, edits) in {"release-gil": ("release-gil", []), **VARIANTS}.items():
        text = base[b]
        for old, new in edits:
            text = edit(text, old, new)
        (root / name).mkdir()
        paths[name] = root / name / "kv_transfer.cpp"
        paths[name].write_text(text)
    m = find_manifest("kv_transfer")
    jobs = [(p, "release") for p in paths.values()] + [(SRC, "release")]
    if hostbuild.tsan_runtime()[0]:
        jobs.append((paths["release-gil"], "tsan"))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        list(ex.map(lambda j: hostbuild.build(m, j[0], variant=j[1]), jobs))
    return paths


def _check(path, seed=11, tsan=False):
    args = ["check", "--kernel", "kv_transfer", "--source", str(path), "--quick", "--seed", str(seed), "--json"]
    return harness(*args, *([] if tsan else ["--no-tsan"]))


def _bench(path):
    # each window is a worker of its own, so "after a while" must come within one window: 0.6 s makes
    # about 260 transfers on this machine alone, and more than AFTER with a second pytest worker beside
    # it (0.3 s made about 130, and under load fewer than AFTER: the planted module then never misbehaved)
    return harness("bench", "--kernel", "kv_transfer", "--source", str(path), "--rounds", "2", "--warmup", "1",
                   "--window", "0.6", "--json")


# the cases ------------------------------------------------------------------------------------------

def test_bench_size_cases_cover_every_size_the_bench_uses():
    m = find_manifest("kv_transfer")
    shape = m.shapes["bench"]
    P, B, N = shape["P"], shape["B"], shape["N"]
    assert kvc.bench_sizes(P, N)[:3] == [N, N - 1, N + 1] and {1, N // 2, 2 * N} <= set(kvc.bench_sizes(P, N))
    assert kvc.bench_sizes(4, 4) == [4, 3, 1, 2]       # nothing beyond the pool, no repeats
    threads = kvc.bench_threads(m)
    assert int(m.raw["check"]["threads"]) in threads and all(t > 1 for t in threads)
    cases = host.bench_size_cases(m, 5)
    assert [c.family for c in cases] == kvc.BENCH_FAMILIES
    for c in cases:
        assert c.shape["P"] == P and c.shape["B"] == B and c.spec["kind"] == "phases"
        calls = [call for ph in c.spec["phases"] for th in ph["threads"] for call in th]
        sizes = {call["args"][1]["count"] for call in calls}          # page ids per call
        assert set(kvc.bench_sizes(P, N)) <= sizes
        # the bench's argument forms: its inputs read-only, at N pages, alone and from several threads
        ro = [call for call in calls if call["args"][0].get("readonly") and call["args"][1].get("readonly")]
        assert ro and all(call["args"][1]["count"] == N for call in ro)
        concurrent = [ph for ph in c.spec["phases"] if len(ph["threads"]) > 1]
        assert [len(ph["threads"]) for ph in concurrent] == threads
        for ph in concurrent:   # released together round after round, each call's bytes hashed as it returns
            assert ph["rounds"] == kvc.BENCH_REPEAT and all(len(th) == kvc.BENCH_REPEAT for th in ph["threads"])
            assert all(call["label"] in c.expect_digests and call["digest"] for th in ph["threads"] for call in th)
        # every single call has outputs of its own (gather) or pages of its own (scatter)
        single = [ph["threads"][0][0] for ph in c.spec["phases"] if len(ph["threads"]) == 1]
        if c.family == "bench-size/gather":
            outs = [call["args"][2]["array"] for call in single]
            assert len(set(outs)) == len(single) and len(c.outputs) == len(single) + sum(threads)
        else:
            assert {call["label"] for call in single} <= set(c.page_calls.values())
            assert len(c.page_calls) == sum(call["args"][1]["count"] for call in single) + N * sum(threads)
        # and the rounds of one thread move different bytes, so a skipped round cannot pass as the one before
        assert len(set(c.expect_digests.values())) == len(c.expect_digests)


def test_ring_replay_matches_the_reference():
    """The harness's expected bench state is the reference applied to every call in order."""
    shape = {"P": 23, "B": 5, "N": 3}
    init, ids, owned = kvc.bench_ring(shape, threads=2, seed=3)
    P, N = 23, 3
    assert ids.shape == (7, 3) and owned == [[0, 2, 4, 6], [1, 3, 5]]
    pairs = [9, 4]
    state = init.copy()
    for t, (own, n) in enumerate(zip(owned, pairs)):
        for i in range(n):
            x = ids[own[i % len(own)]]
            cur = P + (2 * t + (i & 1)) * N
            prev = P + (2 * t + 1 - (i & 1)) * N
            state[cur:cur + N] = ref.gather(state[:P], x).reshape(N, -1)
            state[:P] = ref.scatter(state[prev:prev + N].reshape(-1), x, state[:P])
    lab = kvc.ring_labels(P, N, ids, owned, pairs)
    assert np.array_equal(init[lab], state)
    exp = kvc.ring_expected(init, ids, owned, N, pairs)
    assert set(exp) == {"pool", "page_ids", "buffer 0.0", "buffer 0.1", "buffer 1.0", "buffer 1.1"}
    # one call skipped anywhere changes the end state (here: thread 0's 3rd scatter)
    skipped = init.copy()
    for t, (own, n) in enumerate(zip(owned, pairs)):
        for i in range(n):
            x = ids[own[i % len(own)]]
            cur = P + (2 * t + (i & 1)) * N
            prev = P + (2 * t + 1 - (i & 1)) * N
            skipped[cur:cur + N] = skipped[:P][x]
            if (t, i) != (0, 2):
                skipped[:P][x] = skipped[prev:prev + N]
    assert not np.array_equal(skipped, state)
    with pytest.raises(ValueError):
        kvc.bench_ring({"P": 4, "B": 1, "N": 3}, threads=2)


def test_bench_inputs_are_mapped_read_only():
    """A raw write (not through numpy's flags) to the bench's read-only view faults; the writable
    view of the same memory sees what was written there."""
    code = ("import ctypes, sys; sys.path.insert(0, 'kernels/harness/host'); import worker as w\n"
            "rw, ro, how = w._ring_memory(4, 4096)\n"
            "assert how.startswith('read-only mapping'), how\n"
            "rw[1, 7] = 9; assert ro[1, 7] == 9 and not ro.flags.writeable\n"
            "print('mapped', flush=True)\n"
            "ctypes.memset(ro.ctypes.data + 4096, 1, 16)\n"
            "print('wrote', flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "mapped" in r.stdout and "wrote" not in r.stdout, (r.stdout, r.stderr)
    assert r.returncode == -11, (r.returncode, r.stderr[-2000:])   # SIGSEGV: the write never landed


# check: size-triggered behaviour ------------------------------------------------------------------------

# name -> (failure must contain, every bench-size failure names this)
CAUGHT_BY_CHECK = {
    "skip-at-bench-count": ("bench-size/gather", "out n=256: "),
    "half-out-large": ("bench-size/gather", "out n=256: "),
    "skip-when-concurrent": ("bench-size/scatter", "n=256 thread "),
    "modifies-source-large": ("bench-size/gather", "pool: "),
}


@pytest.mark.parametrize("name", list(CAUGHT_BY_CHECK))
def test_size_triggered_behaviour_is_caught_by_check(name, variants):
    rc, out = _check(variants[name])
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("failures")
    family, text = CAUGHT_BY_CHECK[name]
    # the cpu shapes pass: only the bench's sizes show it
    assert all(f.startswith("bench-size/") for f in out["failures"]), out["failures"]
    hits = [f for f in out["failures"] if f.startswith(family) and text in f]
    assert hits, out["failures"]
    if name == "skip-when-concurrent":
        # its calls overlapped in some run of the phase (check runs a phase again until they do)
        case = next(c for c in out["cases"] if c["id"].startswith("bench-size/scatter"))
        assert case["overlaps"] and case["overlaps"][-1]["rounds_overlapped"] > 0, case.get("overlaps")
        # a round whose call was skipped, named by its thread's digest (or the final pool, if it was the last)
        assert all("wrote bytes that differ" in f or "wrong pages, written by: n=256 thread" in f for f in hits), hits
        assert not any(f.split(": ", 1)[1].startswith("n=") and "thread" not in f for f in out["failures"])
    if name == "half-out-large":   # the second half of out is left as it was (poison)
        assert "first at byte 2097152 (page 128)" in hits[0], hits[0]
    if name == "modifies-source-large":
        assert "modified by the call (an input)" in hits[0], hits[0]
    if name == "skip-at-bench-count":
        assert not any("n=255" in f or "n=257" in f for f in out["failures"]), out["failures"]
    print(f"\n{name} -> {hits[0][:300]}")


def test_baseline_and_gil_release_pass_the_bench_sizes(variants):
    for path in (SRC, variants["release-gil"]):
        rc, out = _check(path, tsan=True)
        assert rc == 0 and out["status"] == "passed", out.get("failures") or out.get("error")
        sized = [c for c in out["cases"] if c["id"].startswith("bench-size/")]
        assert len(sized) == 2 and all(c["passed"] for c in sized)
        gather = next(c for c in sized if c["id"].startswith("bench-size/gather"))
        assert all(m["mismatched_bytes"] == 0 for m in gather["outputs"].values()) and len(gather["outputs"]) >= 10
        assert all(gather["inputs_intact"].values()) and all(gather["padding"].values())


# bench: every timed call verified ----------------------------------------------------------------------

CAUGHT_BY_BENCH = {
    "skip-one-scatter-call": "the state differs from the reference replay in: ",
    "half-out-after-a-while": "transfer buffer",
}


@pytest.mark.parametrize("name", list(CAUGHT_BY_BENCH))
def test_work_skipped_after_a_while_fails_the_bench(name, variants):
    rc, out = _bench(variants[name])
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    assert "every timed call is verified" in out["reason"], out["reason"]
    assert out["checksums"]["every_call"] and not out["checksums"]["verified"]
    fails = out["failures"]
    assert fails and all(f.startswith("candidate ") for f in fails), fails    # the baseline's windows verify
    assert any(CAUGHT_BY_BENCH[name] in f for f in fails), fails
    assert "results" not in out and "speedup" not in out                      # no speed on a red gate
    print(f"\n{name} -> {fails[0][:300]}")


def test_the_bench_gate_makes_fewer_calls_than_the_planted_threshold():
    """The "after a while" variants must pass the bench's correctness gate (its own worker) to show
    that the bench's own verification catches them."""
    m = find_manifest("kv_transfer")
    gate = host.bench_gate_cases(m)
    for fn in ("gather", "scatter"):
        n = sum(1 for c in gate if c.spec.get("fn") == fn) + sum(
            1 for c in gate if c.spec["kind"] == "phases" for ph in c.spec["phases"] for th in ph["threads"]
            for call in th if call["fn"] == fn)
        assert 0 < n < AFTER, (fn, n)


def test_pair_faster_than_the_copy_peak_allows_is_flagged():
    """A call that returns before its copy is done shows as a pair beyond what the CPUs can copy."""
    def sample(us):
        return {"alone_steps": 10000, "alone_s": 1.0, "loaded_steps": 9000, "loaded_s": 1.0, "pairs_in_window": 100.0,
                "pair_us": [us, us, us], "requests": 400, "latency_us": [2e4] * 400, "tokens": 72000}
    rounds = [{"baseline": sample(800.0), "candidate": sample(800.0)} for _ in range(3)]
    # 2 x 8 MB per pair in 800 us = 20 GB/s: within 1.5 x 10 GB/s x 2 CPUs
    assert hoststats.summarize(rounds, 8e6, 10.0, 1, cpus=2)["flags"] == []
    rounds = [{"baseline": sample(800.0), "candidate": sample(100.0)} for _ in range(3)]   # 160 GB/s
    flags = hoststats.summarize(rounds, 8e6, 10.0, 1, cpus=2, step="gather+scatter pair")["flags"]
    assert len(flags) == 1 and flags[0].startswith("candidate: one gather+scatter pair moves 160.0 GB/s"), flags
    assert hoststats.summarize(rounds, 8e6, 10.0, 1)["flags"] == []   # CPUs unknown: not judged


def test_a_write_to_the_source_in_the_bench_faults(variants):
    rc, out = _bench(variants["writes-source-after-a-while"])
    assert rc == 1 and out["status"] == "failed", out.get("error") or out.get("status")
    assert "SIGSEGV" in out["reason"] and "read-only mappings" in out["reason"], out["reason"]
    assert "the candidate's window" in out["reason"], out["reason"]


def test_bench_verifies_every_call_of_the_baseline_and_gil_release(variants):
    rc, out = _bench(variants["release-gil"])
    assert rc == 0 and out["status"] == "ok", out.get("error") or out.get("reason") or out.get("failures")
    ck = out["checksums"]
    assert ck["verified"] and ck["every_call"] and ck["windows"] == 2 * 3 and ck["calls"] > 0
    assert ck["inputs_readonly"].startswith("read-only mapping"), ck
    print(f"\nbench: {ck['calls']} calls verified in {ck['windows']} windows; gaps "
          f"{out['results']['baseline']['gap']:.1%} -> {out['results']['candidate']['gap']:.1%}")


def test_a_concurrent_phase_runs_again_longer_only_for_calls_that_release_the_gil(monkeypatch):
    # run_phases in this process with modules of plain Python: what the worker does with a loaded one
    import types
    from kernels.harness.host import worker

    def holds_gil():   # builtin sum holds the GIL for its whole call: no other thread runs meanwhile
        return sum(range(20000)) * 0

    def holds_gil_long():   # longer than the interpreter's 5 ms switch interval: a thread waiting for
        return sum(range(2_000_000)) * 0   # the GIL asks for it meanwhile, and gets it at the return

    def released():    # sleep releases the GIL
        worker.time.sleep(2e-3)

    mod = types.SimpleNamespace(holds_gil=holds_gil, holds_gil_long=holds_gil_long, released=released)

    def overlaps(fn):
        call = {"label": fn, "fn": fn, "args": []}
        case = {"phases": [{"threads": [[call] * 3, [call] * 3], "rounds": True}]}
        return worker.run_phases(mod, case, {}, again=8)["overlaps"]

    # released and overlapping: stops at the first run that overlaps
    first = overlaps("released")
    assert first[-1]["rounds_overlapped"] > 0 and first[-1]["gil_released"], first
    # a loaded machine, where a released thread is never scheduled before the other's call ends
    monkeypatch.setattr(worker, "_any_overlap", lambda intervals: False)
    held, loaded = overlaps("holds_gil"), overlaps("released")
    # held: `again` more runs, as before, no release seen (its calls cannot overlap)
    assert len(held) == 9 and not any(o["gil_released"] for o in held), held
    # a call that holds the GIL past the switch interval is not taken for one that releases it (the
    # waiting probe thread used to get the GIL between the call's return and the clock's reading)
    held = overlaps("holds_gil_long")
    assert len(held) == 9 and not any(o["gil_released"] for o in held), held
    # released: RELEASED_AGAIN times as many runs to find an overlap
    assert len(loaded) == 1 + 8 * worker.RELEASED_AGAIN and loaded[-1]["gil_released"], len(loaded)
