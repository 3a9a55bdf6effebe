"""Host contract of the KV-transfer kernels (kv_transfer.cpp; docs/CONTRACTS.md, "Host (C++) contracts").

The pybind11 module binds gather(pool, page_ids, out), scatter(buf, page_ids, pool) and
checksum(buf) (reference.py says what each computes). This module is the user's trusted code: the
harness imports it on the checker's side only, never in the sandboxed worker that loads the
candidate, and builds every case, expected value and the service bench's workload from it.

Shape variables: P pool pages, B page bytes, N pages moved per call.
"""
import hashlib

import numpy as np

from kernels.harness.host.cases import (INDEX_SENTINEL, IN_SENTINEL, OUT_POISON, OUT_SENTINEL, Arr, Case,
                                        Service)
from kernels.kv_transfer import reference as ref

OP = "kv_transfer"
FUNCTIONS = ["gather", "scatter", "checksum"]


def _shape_str(shape):
    return " ".join(f"{k}={v}" for k, v in shape.items())


def _pad(B):
    return max(64, B)


def _ids_arr(ids, name="page_ids"):
    return Arr(name, np.asarray(ids, dtype=np.int64), 8, INDEX_SENTINEL)


class _Builder:
    """Cases of one manifest: the reference and the check parameters (the manifest's [check])."""

    def __init__(self, params):
        self.ref = {"gather": ref.gather, "scatter": ref.scatter, "checksum": ref.checksum}
        chk = (params or {}).get("check", {})
        self.threads = int(chk.get("threads", 4))
        self.repeat = int(chk.get("repeat", 20))

    # one call -----------------------------------------------------------------------------------
    def gather(self, cid, family, shape, seed, rng, P, B, ids, wrap=None):
        pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
        pool = Arr("pool", pool0, _pad(B), IN_SENTINEL, shape=[P, B])
        idsa = _ids_arr(ids)
        n = len(ids)
        out = Arr("out", np.full(n * B, OUT_POISON, np.uint8), _pad(B), OUT_SENTINEL,
                  expected=self.ref["gather"](pool0, np.asarray(ids, np.int64)))
        kw = {"wrap": wrap} if wrap else {}
        spec = {"kind": "call", "fn": "gather", "args": [pool.arg(**kw), idsa.arg(**kw), out.arg(**kw)]}
        return Case(cid, family, shape, seed, spec, [pool, idsa, out], {"out": "out"}, page_bytes=B)

    def scatter(self, cid, family, shape, seed, rng, P, B, ids):
        pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
        n = len(ids)
        buf0 = rng.integers(0, 256, n * B, dtype=np.uint8)
        ids = np.asarray(ids, np.int64)
        pool = Arr("pool", pool0, _pad(B), OUT_SENTINEL, shape=[P, B], expected=self.ref["scatter"](buf0, ids, pool0))
        idsa = _ids_arr(ids)
        buf = Arr("buf", buf0, _pad(B), IN_SENTINEL)
        spec = {"kind": "call", "fn": "scatter", "args": [buf.arg(), idsa.arg(), pool.arg()]}
        return Case(cid, family, shape, seed, spec, [buf, idsa, pool], {"pool": "pool"}, page_bytes=B)

    def checksum(self, cid, family, shape, seed, data, shape_arg=None):
        buf = Arr("buf", data, 64, IN_SENTINEL, shape=shape_arg)
        spec = {"kind": "call", "fn": "checksum", "args": [buf.arg()]}
        return Case(cid, family, shape, seed, spec, [buf], {}, expect_result=self.ref["checksum"](data),
                    result_name="checksum")

    # concurrent calls on disjoint pages -----------------------------------------------------------
    def concurrent(self, fn, cid, family, shape, seed, rng, P, B):
        T = self.threads
        parts = np.array_split(rng.permutation(P).astype(np.int64), T)
        offsets = np.cumsum([0] + [len(p) for p in parts])
        pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
        perm = np.concatenate(parts)
        spec = {"kind": "threads", "fn": fn, "repeat": self.repeat, "threads": []}
        ids = [_ids_arr(p, name=f"ids{t}") for t, p in enumerate(parts)]

        def region(a, t, **kw):   # thread t's pages of a flat transfer buffer
            return {"array": a.name, "start": a.pad + int(offsets[t]) * B, "count": len(parts[t]) * B, **kw}

        if fn == "gather":
            pool = Arr("pool", pool0, _pad(B), IN_SENTINEL, shape=[P, B])
            out = Arr("out", np.full(P * B, OUT_POISON, np.uint8), _pad(B), OUT_SENTINEL,
                      expected=self.ref["gather"](pool0, perm))
            spec["threads"] = [[pool.arg(), ids[t].arg(), region(out, t)] for t in range(T)]
            return Case(cid, family, shape, seed, spec, [pool, out, *ids], {"out": "out"}, page_bytes=B)
        if fn == "scatter":
            buf0 = rng.integers(0, 256, P * B, dtype=np.uint8)
            buf = Arr("buf", buf0, _pad(B), IN_SENTINEL)
            pool = Arr("pool", pool0, _pad(B), OUT_SENTINEL, shape=[P, B],
                       expected=self.ref["scatter"](buf0, perm, pool0))
            spec["threads"] = [[region(buf, t), ids[t].arg(), pool.arg()] for t in range(T)]
            return Case(cid, family, shape, seed, spec, [buf, pool, *ids], {"pool": "pool"}, page_bytes=B)
        data = rng.integers(0, 256, P * B, dtype=np.uint8)
        buf = Arr("buf", data, 64, IN_SENTINEL)
        spec["threads"] = [[region(buf, t)] for t in range(T)]
        expect = [self.ref["checksum"](data[offsets[t] * B:offsets[t + 1] * B]) for t in range(T)]
        return Case(cid, family, shape, seed, spec, [buf], {}, expect_result=expect, result_name="checksum")

    # the bench's sizes: a sequence of calls on one pool, each judged on its own -------------------
    def bench_size(self, fn, cid, family, shape, seed, rng, P, B, N, sizes, threads):
        """Phase by phase: single calls at each of `sizes` (N twice, the second with read-only inputs,
        as the bench passes them), each with outputs of its own; then per T in `threads`, T threads
        making BENCH_REPEAT rounds of calls of N pages, all threads released together each round,
        each call's output hashed by its thread before its next call (the harness knows what the
        digest must be): a call skipped while another runs shows even if a later one is right."""
        pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
        gather = fn == "gather"
        pool = Arr("pool", pool0, _pad(B), IN_SENTINEL if gather else OUT_SENTINEL, shape=[P, B])
        arrays, outputs, digests, page_calls = [pool], {}, {}, {}
        if not gather:
            outputs["pool"] = "pool"
        free = list(rng.permutation(P))   # scatter: pages no call has written yet
        last_writes = []                  # scatter: (buf, ids) of the last call writing each page
        phases, k = [], 0

        def take(n):
            nonlocal free
            if len(free) < n:
                return None   # no fresh pages left on this pool: the call is not made
            ids, free = np.asarray(free[:n], np.int64), free[n:]
            return ids

        def ids_arg(ids, ro):
            nonlocal k
            a = _ids_arr(ids, name=f"ids{k}")
            k += 1
            arrays.append(a)
            return a.arg(**({"readonly": True} if ro else {}))

        for label, n, ro in [(f"n={n}", n, False) for n in sizes] + [(f"n={N} read-only inputs", N, True)]:
            if gather:
                ids = np.asarray(rng.choice(P, size=n, replace=False), np.int64)
                out = Arr(f"out{k}", np.full(n * B, OUT_POISON, np.uint8), _pad(B), OUT_SENTINEL,
                          expected=self.ref["gather"](pool0, ids))
                arrays.append(out)
                outputs[f"out {label}"] = out.name
                args = [pool.arg(**({"readonly": True} if ro else {})), ids_arg(ids, ro), out.arg()]
            else:
                ids = take(n)
                if ids is None:
                    continue
                buf0 = rng.integers(0, 256, n * B, dtype=np.uint8)
                buf = Arr(f"buf{k}", buf0, _pad(B), IN_SENTINEL)
                arrays.append(buf)
                last_writes.append((buf0, ids))
                page_calls.update((int(i), label) for i in ids)
                args = [buf.arg(**({"readonly": True} if ro else {})), ids_arg(ids, ro), pool.arg()]
            phases.append({"threads": [[{"fn": fn, "label": label, "args": args}]]})
        for T in threads:
            per_thread = []
            for t in range(T):
                name = f"n={N} thread {t}/{T}"
                if gather:
                    # one out per thread; each round gathers other pages, so each round's bytes differ
                    out = Arr(f"out{k}", np.full(N * B, OUT_POISON, np.uint8), _pad(B), OUT_SENTINEL)
                    arrays.append(out)
                    outputs[f"out {name}"] = out.name
                    calls = []
                    for r in range(BENCH_REPEAT):
                        ids = np.asarray(rng.choice(P, size=N, replace=False), np.int64)
                        want = self.ref["gather"](pool0, ids)
                        label = f"{name} round {r}"
                        digests[label] = hashlib.sha256(want).hexdigest()
                        calls.append({"fn": fn, "label": label, "args": [pool.arg(readonly=True), ids_arg(ids, True),
                                                                         out.arg()],
                                      "digest": out.arg()})
                    out.expected = want.reshape(-1)
                else:
                    # pages of its own; each round scatters its buffer in another order onto them
                    mine = take(N)
                    if mine is None:
                        continue
                    buf0 = rng.integers(0, 256, N * B, dtype=np.uint8)
                    buf = Arr(f"buf{k}", buf0, _pad(B), IN_SENTINEL)
                    arrays.append(buf)
                    page_calls.update((int(i), name) for i in mine)
                    rows = np.sort(mine)
                    calls = []
                    for r in range(BENCH_REPEAT):
                        ids = rng.permutation(mine)
                        label = f"{name} round {r}"
                        # the reference on the thread's own pages only (ids renumbered into `rows`)
                        want = self.ref["scatter"](buf0, np.searchsorted(rows, ids), pool0[rows])
                        digests[label] = hashlib.sha256(np.ascontiguousarray(want)).hexdigest()
                        calls.append({"fn": fn, "label": label, "args": [buf.arg(readonly=True), ids_arg(ids, True),
                                                                         pool.arg()],
                                      "digest": pool.arg(rows=[int(x) for x in rows], page_bytes=B)})
                    last_writes.append((buf0, ids))
                per_thread.append(calls)
            if per_thread:
                phases.append({"threads": per_thread, "rounds": BENCH_REPEAT})
        if not gather:   # the calls' last writes are to disjoint pages: one reference call over all of them
            pool.expected = self.ref["scatter"](np.concatenate([b for b, _ in last_writes]),
                                                np.concatenate([i for _, i in last_writes]), pool0).reshape(-1)
        spec = {"kind": "phases", "phases": phases}
        return Case(cid, family, shape, seed, spec, arrays, outputs, page_bytes=B, page_calls=page_calls or None,
                    expect_digests=digests, digest_what="its out" if gather else "the pages it writes")

    # bad input: the right exception, nothing written ----------------------------------------------
    def bad(self, seed, rng, P, B):
        shape = {"P": P, "B": B, "N": 2}
        cases = []

        def gather_case(name, exc, must=(), pool_kw=None, ids=None, ids_kw=None, out_kw=None, pool_dtype=np.uint8,
                        ids_dtype=np.int64, out_n=None, none=None):
            pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8).astype(pool_dtype)
            ids = np.array([1, P - 1] if ids is None else ids).astype(ids_dtype)
            pool = Arr("pool", pool0, _pad(B), IN_SENTINEL, shape=[P, B])
            idsa = Arr("page_ids", ids, 8, INDEX_SENTINEL if ids_dtype == np.int64 else 7)
            n = len(ids) * B if out_n is None else out_n
            out = Arr("out", np.full(n, OUT_POISON, np.uint8), _pad(B), OUT_SENTINEL)
            args = [pool.arg(**(pool_kw or {})), idsa.arg(**(ids_kw or {})), out.arg(**(out_kw or {}))]
            if none is not None:
                args[none] = {"none": True}
            spec = {"kind": "call", "fn": "gather", "args": args}
            cases.append(Case(f"gather/bad-{name} {_shape_str(shape)}", f"gather/bad-{name}", shape, seed, spec,
                              [pool, idsa, out], {}, page_bytes=B, expect_exc=(exc, list(must))))

        def scatter_case(name, exc, must=(), ids=None, pool_kw=None, buf_kw=None, buf_n=None):
            pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
            ids = np.array([0, 2] if ids is None else ids, dtype=np.int64)
            n = len(ids) * B if buf_n is None else buf_n
            pool = Arr("pool", pool0, _pad(B), OUT_SENTINEL, shape=[P, B])
            idsa = _ids_arr(ids)
            buf = Arr("buf", rng.integers(0, 256, n, dtype=np.uint8), _pad(B), IN_SENTINEL)
            spec = {"kind": "call", "fn": "scatter",
                    "args": [buf.arg(**(buf_kw or {})), idsa.arg(), pool.arg(**(pool_kw or {}))]}
            cases.append(Case(f"scatter/bad-{name} {_shape_str(shape)}", f"scatter/bad-{name}", shape, seed, spec,
                              [buf, idsa, pool], {}, page_bytes=B, expect_exc=(exc, list(must))))

        gather_case("index-past-end", "IndexError", [str(P), f"{P} pages"], ids=[0, P])
        gather_case("index-negative", "IndexError", ["-1", f"{P} pages"], ids=[1, -1])
        scatter_case("index-past-end", "IndexError", [str(P), f"{P} pages"], ids=[1, P])
        scatter_case("index-negative", "IndexError", ["-1", f"{P} pages"], ids=[-1, 0])
        gather_case("pool-dtype", "TypeError", pool_kw={"view_dtype": "int8"})
        gather_case("ids-dtype", "TypeError", ids_dtype=np.int32)
        gather_case("out-dtype", "TypeError", out_kw={"view_dtype": "int16", "shape": None}, out_n=2 * 2 * B)
        gather_case("not-a-buffer", "TypeError", none=0)
        gather_case("pool-noncontiguous", "ValueError",
                    pool_kw={"shape": [P // 2, 2 * B], "slices": [[None], [0, B]]} if P % 2 == 0 else
                    {"shape": [P, B], "slices": [[None], [0, B, 2]]})
        gather_case("ids-noncontiguous", "ValueError", ids=[1, 3, 2, 0], ids_kw={"slices": [[0, 4, 2]]}, out_n=2 * B)
        gather_case("out-noncontiguous", "ValueError", out_kw={"shape": [2 * B, 2], "slices": [[None], [0, 1]]},
                    out_n=4 * B)
        gather_case("out-readonly", "ValueError", out_kw={"readonly": True})
        gather_case("out-too-small", "ValueError", out_n=2 * B - 1)
        gather_case("pool-ndim", "ValueError", pool_kw={"shape": [P * B]})
        gather_case("ids-ndim", "ValueError", ids=[1, 2], ids_kw={"shape": [1, 2]})
        scatter_case("pool-readonly", "ValueError", pool_kw={"readonly": True})
        scatter_case("buf-too-small", "ValueError", buf_n=2 * B - 1)
        scatter_case("pool-ndim", "ValueError", pool_kw={"shape": [P * B]})
        # overlapping memory: the destination is a view of the source
        pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8)
        pool = Arr("pool", pool0, _pad(B), OUT_SENTINEL, shape=[P, B])
        idsa = _ids_arr([0, 1])
        spec = {"kind": "call", "fn": "gather",
                "args": [pool.arg(), idsa.arg(), {"array": "pool", "start": pool.pad + B, "count": 2 * B}]}
        cases.append(Case(f"gather/bad-overlap {_shape_str(shape)}", "gather/bad-overlap", shape, seed, spec,
                          [pool, idsa], {}, page_bytes=B, expect_exc=("ValueError", [])))
        pool = Arr("pool", pool0, _pad(B), OUT_SENTINEL, shape=[P, B])
        idsa = _ids_arr([2, 3])
        spec = {"kind": "call", "fn": "scatter",
                "args": [{"array": "pool", "start": pool.pad, "count": 2 * B}, idsa.arg(), pool.arg()]}
        cases.append(Case(f"scatter/bad-overlap {_shape_str(shape)}", "scatter/bad-overlap", shape, seed, spec,
                          [pool, idsa], {}, page_bytes=B, expect_exc=("ValueError", [])))
        data = rng.integers(0, 256, 4 * B, dtype=np.uint8)
        buf = Arr("buf", data, 64, IN_SENTINEL, shape=[2 * B, 2])
        spec = {"kind": "call", "fn": "checksum", "args": [buf.arg(slices=[[None], [0, 1]])]}
        cases.append(Case(f"checksum/bad-noncontiguous {_shape_str(shape)}", "checksum/bad-noncontiguous", shape,
                          seed, spec, [buf], {}, expect_exc=("ValueError", [])))
        return cases


FAMILIES = ["gather/random", "gather/repeated", "gather/empty", "gather/full", "gather/memoryview",
            "scatter/random", "scatter/repeated", "scatter/empty", "scatter/full",
            "checksum/buffer", "checksum/pool", "checksum/empty",
            "concurrent/gather", "concurrent/scatter", "concurrent/checksum"]


GATE_FAMILIES = ["gather/random", "gather/repeated", "scatter/random", "checksum/buffer"]


def cases(family, shape, seed, rng, params):
    """The cases of `family` at one cpu shape (`rng`: the harness's, seeded by seed, shape and family)."""
    b = _Builder(params)
    fam = family
    P, B, N = shape["P"], shape["B"], shape["N"]
    kind = fam.split("/")[1]
    n = {"empty": 0, "full": P}.get(kind, N)
    sh = dict(shape, N=n)
    cid = f"{fam} {_shape_str(sh)}"
    if kind in ("random", "memoryview"):
        ids = rng.choice(P, size=n, replace=n > P)
    elif kind == "repeated":
        ids = rng.integers(0, P, n)
        if n >= 2:
            ids[-1] = ids[0]
    elif kind == "full":
        ids = rng.permutation(P)
    else:
        ids = np.zeros(0, np.int64)
    if fam.startswith("gather/"):
        return [b.gather(cid, fam, sh, seed, rng, P, B, ids, wrap="memoryview" if kind == "memoryview" else None)]
    if fam.startswith("scatter/"):
        return [b.scatter(cid, fam, sh, seed, rng, P, B, ids)]
    if fam == "checksum/buffer":
        return [b.checksum(cid, fam, sh, seed, rng.integers(0, 256, N * B + 3, dtype=np.uint8))]
    if fam == "checksum/pool":
        return [b.checksum(cid, fam, sh, seed, rng.integers(0, 256, (P, B), dtype=np.uint8), shape_arg=[P, B])]
    if fam == "checksum/empty":
        return [b.checksum(cid, fam, sh, seed, np.zeros(0, np.uint8))]
    if fam.startswith("concurrent/"):
        sh = dict(shape, N=P, threads=b.threads, repeat=b.repeat)
        return [b.concurrent(kind, f"{fam} {_shape_str(sh)}", fam, sh, seed, rng, P, B)]
    raise ValueError(f"unknown family {family!r}")


def bad_cases(shape, seed, rng, params):
    """Bad input at (about) the first cpu shape: each call must raise the named exception and write nothing."""
    P, B = max(shape["P"], 4), max(shape["B"], 8)
    return _Builder(params).bad(seed, rng, P, B)


# Size-triggered behaviour: correctness at the sizes the bench uses -------------------------------------

BENCH_FAMILIES = ["bench-size/gather", "bench-size/scatter"]
# Rounds of a concurrent phase (every thread calls once per round). A call that misbehaves only while
# another is in flight shows only in a round where the scheduler let them overlap; on a loaded 2-core
# machine 8 rounds once went by without one (test_host_sizes, skip-when-concurrent), and 16 did too
# (CI, 2026-12-06): `check` now runs such a phase again, up to 8 times, until two calls overlapped.
BENCH_REPEAT = 16


def bench_sizes(P, N):
    """Pages per call around the bench's N, most important first: N itself, its neighbours (a
    module keyed on `n == N` or on a threshold at N), and other sizes a module might key on."""
    out = []
    for n in (N, N - 1, N + 1, 1, N // 2, 2 * N):
        if 1 <= n <= P and n not in out:
            out.append(n)
    return out


def bench_threads(params):
    """Thread counts of the concurrent phases: the bench's transfer threads and the check's (more
    than one; 2 when both are 1). `params`: the manifest's tables ([check], [service]), or a manifest."""
    params = getattr(params, "raw", params) or {}
    svc = int(params.get("service", {}).get("threads", 1))
    chk = int(params.get("check", {}).get("threads", 4))
    return sorted({svc, chk} - {1}) or [2]


def bench_cases(shape, seed, params, families=None):
    """Cases on the bench shape (its P pages of B bytes): one gather case and one scatter case, each
    one pool and a sequence of calls, every call with outputs of its own so that each is judged:
    single calls at every size of `bench_sizes` (N twice: the second with read-only inputs, as the
    bench passes them), then, per thread count of `bench_threads`, that many threads at once, each
    making BENCH_REPEAT calls of N pages (read-only inputs, disjoint pages)."""
    b = _Builder(params)
    P, B, N = shape["P"], shape["B"], shape["N"]
    sizes = bench_sizes(P, N)
    threads = bench_threads(params)
    cases = []
    for fam in families or BENCH_FAMILIES:
        rng = np.random.default_rng([seed, 4242, BENCH_FAMILIES.index(fam)])
        sh = dict(shape, sizes=sizes, threads=threads)
        cid = f"{fam} {_shape_str(shape)} sizes={','.join(map(str, sizes))} threads={','.join(map(str, threads))}"
        cases.append(b.bench_size(fam.split("/")[1], cid, fam, sh, seed, rng, P, B, N, sizes, threads))
    return cases


# The bench's state is an exchange ring. Thread t owns slots (lists of N distinct pages of the pool)
# and two transfer buffers of N pages; its pair i gathers slot s = owned[i % m] into buffer i % 2, then
# scatters the other buffer (what pair i - 1 gathered) into the same slot s. So every page a call
# writes is read by a later call before it is overwritten, and the bytes a scatter needs exist only
# in the buffer the previous gather filled: a call that skips, shortens or misplaces any copy (or
# does it from anywhere but its inputs) changes every later state, and the state at the end of the
# window shows it. The harness replays the calls on page labels with the reference semantics.

def bench_ring(shape, threads, seed=2024):
    """(initial state [P + 2 * threads * N, B] uint8, slot page ids [K, N] int64, owned slots per
    thread) of the bench on `shape`."""
    P, B, N = shape["P"], shape["B"], shape["N"]
    K = P // N if N else 0
    if N < 1 or K < threads:
        raise ValueError(f"bench shape {shape}: needs N >= 1 and at least one slot of N pages per transfer "
                         f"thread ({threads})")
    rng = np.random.default_rng(seed)
    init = rng.integers(0, 256, (P + 2 * threads * N, B), dtype=np.uint8)
    ids = rng.permutation(P)[:K * N].reshape(K, N).astype(np.int64)
    return init, ids, [list(range(t, K, threads)) for t in range(threads)]


def ring_labels(P, N, ids, owned, pairs):
    """Which initial row each row of the state holds after thread t completed pairs[t] pairs."""
    lab = np.arange(P + 2 * len(owned) * N)
    for t, (own, n) in enumerate(zip(owned, pairs)):
        bufs = [np.arange(P + (2 * t + k) * N, P + (2 * t + k + 1) * N) for k in (0, 1)]
        for i in range(n):
            x = ids[own[i % len(own)]]
            cur = i & 1
            lab[bufs[cur]] = lab[x]          # gather(pool, x, buffer cur)
            lab[x] = lab[bufs[1 - cur]]      # scatter(buffer 1 - cur, x, pool)
    return lab


def ring_expected(init, ids, owned, N, pairs):
    """sha256 per region of the state the calls must produce (what the worker digests)."""
    P = init.shape[0] - 2 * len(owned) * N
    state = init[ring_labels(P, N, ids, owned, pairs)]
    d = {"pool": hashlib.sha256(state[:P]).hexdigest(), "page_ids": hashlib.sha256(ids).hexdigest()}
    for t in range(len(owned)):
        for k in (0, 1):
            r0 = P + (2 * t + k) * N
            d[f"buffer {t}.{k}"] = hashlib.sha256(state[r0:r0 + N]).hexdigest()
    return d




def service(shape, threads):
    """The service bench's workload on the bench shape (cases.Service): the exchange ring, thread t
    repeating its cycle of gather+scatter pairs over its own slots and its two transfer buffers."""
    P, B, N = shape["P"], shape["B"], shape["N"]
    init, ids, owned = bench_ring(shape, threads)

    def buf(t, k):
        return [P + (2 * t + k) * N, P + (2 * t + k + 1) * N]

    cycles = []
    for t, own in enumerate(owned):
        m = len(own)
        steps = []
        for i in range(m if m % 2 == 0 else 2 * m):   # slot i % m, buffer i % 2: a cycle of lcm(m, 2) pairs
            s, cur = own[i % m], i & 1
            steps.append([
                {"fn": "gather", "args": [{"state": "ro", "rows": [0, P]}, {"index": s},
                                          {"state": "rw", "rows": buf(t, cur), "flat": True}]},
                {"fn": "scatter", "args": [{"state": "ro", "rows": buf(t, 1 - cur), "flat": True}, {"index": s},
                                           {"state": "rw", "rows": [0, P]}]},
            ])
        cycles.append(steps)
    regions = {"pool": (0, P)}
    regions.update({f"transfer buffer {t}.{k}": (buf(t, k)[0], N) for t in range(threads) for k in (0, 1)})
    return Service(state=init, index=ids, threads=cycles, regions=regions,
                   final=lambda pairs: init[ring_labels(P, N, ids, owned, pairs)],
                   peak={"rows": [0, P], "bytes": N * B, "reps": max(20, 2 * ids.shape[0])},
                   index_name="page ids", step="gather+scatter pair")
