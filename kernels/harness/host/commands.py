"""Host C++ kernels (`language = "cpp"`, e.g. kernels/kv_transfer/): compile, check, bench.

The harness process never imports a candidate module. Each run of candidate code happens in a
worker (worker.py, run from a copy in its scratch directory; worker_client.py starts it) in the
sandbox of kernels/harness/sandbox/: its own session (process group, killed at the deadline), a scrubbed environment,
cwd = a fresh scratch directory, resource limits, no network and its own PID namespace
(`unshare`) where the machine allows, no capabilities, and a Landlock file-system policy (writes
only beneath the scratch directory's out/ and work/); `sandbox` in the output says what applied.

check: the harness makes every case's inputs from fresh seeds, writes them to the scratch
directory (.npy, each array inside a flat buffer with sentinel padding before and after), the
worker calls the module and writes the arrays back, and the harness compares them with the
numpy reference (exact bytes). A crash of the candidate fails the case it happened in (named
with the signal) and the remaining cases continue in a fresh worker; a hang is an error.
With a compiler that supports -fsanitize=thread, the concurrent cases run again on a TSan build.

check also runs the bench's sizes (bench_size_cases): its pool, N and the sizes around N, alone and
from several threads at once, every call judged on its own.

bench: scheduler throughput (see worker.bench and stats.py): one worker loads the baseline
and the candidate, interleaves them over rounds, and returns raw samples and digests of the state
each loaded window ended in; the calls form an exchange ring (bench_ring), so that state is right
only if every call was, and the harness checks it against a replay of the reference before
computing anything.
"""
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import sandbox
from ..loader import resolve
from ..wire import git_commit
from . import build as hostbuild, stats as hoststats
from .worker_client import HostTimeout, _raise_worker_bug, run_worker

__all__ = ["run_host_command", "make_cases", "HostTimeout"]

DEVICE = "cpu (host)"
MODE = "host"

IN_SENTINEL = 0xC3     # padding around inputs (bytes)
OUT_POISON = 0xA5      # inside outputs before the call
OUT_SENTINEL = 0x5A    # padding around outputs and the pool: any store there is out of bounds
IDS_SENTINEL = 0x3C3C3C3C3C3C3C3C   # padding around page_ids: far out of range if read as an id
MAX_CRASHES = 3        # crashed workers before the remaining cases are given up


def _tail(text, n=1500):
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


# cases --------------------------------------------------------------------------------------------

class Arr:
    """One array of a case, stored flat with `pad` sentinel elements before and after its data."""

    def __init__(self, name, data, pad, sentinel, shape=None, expected=None):
        data = np.ascontiguousarray(data).reshape(-1)
        side = np.full(pad, sentinel, dtype=data.dtype)
        self.name, self.pad, self.n = name, pad, data.size
        self.flat = np.concatenate([side, data, side])
        self.shape = list(shape) if shape is not None else [data.size]
        self.expected = None if expected is None else np.ascontiguousarray(expected).reshape(-1)

    def arg(self, **kw):
        return dict({"array": self.name, "start": self.pad, "count": self.n, "shape": self.shape}, **kw)

    @property
    def data(self):
        return self.flat[self.pad:self.pad + self.n]


@dataclass
class Case:
    id: str
    family: str
    shape: dict
    seed: int
    spec: dict                      # what the worker does (no expected values)
    arrays: list                    # [Arr]
    outputs: dict                   # output name -> array name
    page_bytes: int = 1
    expect_exc: tuple = None        # (class name, [substrings of the message])
    expect_result: object = None    # checksum: int, or per-thread [int]
    page_calls: dict = None         # bench-size scatter: page -> label of the call that writes it
    expect_digests: dict = None     # bench-size: call label -> sha256 of what it must have written

    @property
    def label(self):
        return f"{self.id} seed={self.seed}"


def _shape_str(shape):
    return " ".join(f"{k}={v}" for k, v in shape.items())


def _pad(B):
    return max(64, B)


def _ids_arr(ids, name="page_ids"):
    return Arr(name, np.asarray(ids, dtype=np.int64), 8, IDS_SENTINEL)


class _Builder:
    """Cases of one manifest: reference functions and the check parameters."""

    def __init__(self, manifest):
        mod, _, names = manifest.reference.partition(":")
        self.ref = {n: resolve(f"{mod}:{n}") for n in names.split(",")}
        chk = manifest.raw.get("check", {})
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
        return Case(cid, family, shape, seed, spec, [buf], {}, expect_result=self.ref["checksum"](data))

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
        return Case(cid, family, shape, seed, spec, [buf], {}, expect_result=expect)

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
                    expect_digests=digests)

    # bad input: the right exception, nothing written ----------------------------------------------
    def bad(self, seed, rng, P, B):
        shape = {"P": P, "B": B, "N": 2}
        cases = []

        def gather_case(name, exc, must=(), pool_kw=None, ids=None, ids_kw=None, out_kw=None, pool_dtype=np.uint8,
                        ids_dtype=np.int64, out_n=None, none=None):
            pool0 = rng.integers(0, 256, (P, B), dtype=np.uint8).astype(pool_dtype)
            ids = np.array([1, P - 1] if ids is None else ids).astype(ids_dtype)
            pool = Arr("pool", pool0, _pad(B), IN_SENTINEL, shape=[P, B])
            idsa = Arr("page_ids", ids, 8, IDS_SENTINEL if ids_dtype == np.int64 else 7)
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


def make_cases(manifest, seeds, families=None, shapes=None, with_bad=True):
    """The check's cases over the manifest's cpu shapes x seeds (families: a subset of FAMILIES)."""
    b = _Builder(manifest)
    shapes = shapes if shapes is not None else manifest.shapes["cpu"]
    families = families or FAMILIES
    cases = []
    for seed in seeds:
        if with_bad:   # first, so the worker must stay usable after raising
            s0 = shapes[0]
            P, B = max(s0["P"], 4), max(s0["B"], 8)
            cases += b.bad(seed, np.random.default_rng([seed, 999]), P, B)
        for si, shape in enumerate(shapes):
            P, B, N = shape["P"], shape["B"], shape["N"]
            for fam in families:
                fi = FAMILIES.index(fam)
                rng = np.random.default_rng([seed, si, fi])
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
                    cases.append(b.gather(cid, fam, sh, seed, rng, P, B, ids,
                                          wrap="memoryview" if kind == "memoryview" else None))
                elif fam.startswith("scatter/"):
                    cases.append(b.scatter(cid, fam, sh, seed, rng, P, B, ids))
                elif fam == "checksum/buffer":
                    cases.append(b.checksum(cid, fam, sh, seed, rng.integers(0, 256, N * B + 3, dtype=np.uint8)))
                elif fam == "checksum/pool":
                    cases.append(b.checksum(cid, fam, sh, seed, rng.integers(0, 256, (P, B), dtype=np.uint8),
                                            shape_arg=[P, B]))
                elif fam == "checksum/empty":
                    cases.append(b.checksum(cid, fam, sh, seed, np.zeros(0, np.uint8)))
                else:
                    sh = dict(shape, N=P, threads=b.threads, repeat=b.repeat)
                    cases.append(b.concurrent(kind, f"{fam} {_shape_str(sh)}", fam, sh, seed, rng, P, B))
    return cases


# Size-triggered behaviour: correctness at the sizes the bench uses -------------------------------------

BENCH_FAMILIES = ["bench-size/gather", "bench-size/scatter"]
BENCH_REPEAT = 8   # rounds of a concurrent phase (every thread calls once per round)


def bench_sizes(P, N):
    """Pages per call around the bench's N, most important first: N itself, its neighbours (a
    module keyed on `n == N` or on a threshold at N), and other sizes a module might key on."""
    out = []
    for n in (N, N - 1, N + 1, 1, N // 2, 2 * N):
        if 1 <= n <= P and n not in out:
            out.append(n)
    return out


def bench_threads(manifest):
    """Thread counts of the concurrent phases: the bench's transfer threads and the check's (more
    than one; 2 when both are 1)."""
    svc = int(manifest.raw.get("service", {}).get("threads", 1))
    chk = int(manifest.raw.get("check", {}).get("threads", 4))
    return sorted({svc, chk} - {1}) or [2]


def bench_size_cases(manifest, seed, families=None):
    """Cases on the bench shape (its P pages of B bytes): one gather case and one scatter case, each
    one pool and a sequence of calls, every call with outputs of its own so that each is judged:
    single calls at every size of `bench_sizes` (N twice: the second with read-only inputs, as the
    bench passes them), then, per thread count of `bench_threads`, that many threads at once, each
    making BENCH_REPEAT calls of N pages (read-only inputs, disjoint pages)."""
    shape = manifest.shapes.get("bench")
    if not shape:
        return []
    b = _Builder(manifest)
    P, B, N = shape["P"], shape["B"], shape["N"]
    sizes = bench_sizes(P, N)
    threads = bench_threads(manifest)
    cases = []
    for fam in families or BENCH_FAMILIES:
        rng = np.random.default_rng([seed, 4242, BENCH_FAMILIES.index(fam)])
        sh = dict(shape, sizes=sizes, threads=threads)
        cid = f"{fam} {_shape_str(shape)} sizes={','.join(map(str, sizes))} threads={','.join(map(str, threads))}"
        cases.append(b.bench_size(fam.split("/")[1], cid, fam, sh, seed, rng, P, B, N, sizes, threads))
    return cases


def _write_inputs(cases, scratch):
    """The worker's plan: case specs and input files (never the expected values)."""
    specs = []
    for i, c in enumerate(cases):
        files = {}
        for a in c.arrays:
            f = f"in/{i}_{a.name}.npy"
            np.save(scratch / f, a.flat)
            files[a.name] = f
        specs.append(dict(c.spec, arrays=files))
    return specs


# judging ----------------------------------------------------------------------------------------

def byte_metrics(got, expect, page_bytes):
    """Exact-bytes comparison in the wire format's metric shape, plus mismatched_bytes."""
    B = max(1, int(page_bytes))
    if got.shape == expect.shape and np.array_equal(got, expect):   # the usual case, cheap on a large pool
        worst = {"index": [0], "rel_l2": 0.0} if expect.size and expect.size % B == 0 else {"index": None, "rel_l2": 0.0}
        return {"rel_l2": 0.0, "max_abs": 0.0, "max_abs_rel": 0.0, "worst_slice": worst, "nonfinite": 0,
                "mismatched_bytes": 0}
    g = got.astype(np.float64)
    e = expect.astype(np.float64)
    d = g - e
    ref_norm = max(float(np.linalg.norm(e)), 1e-30)
    ref_max = max(float(np.abs(e).max()) if e.size else 0.0, 1e-30)
    worst = {"index": None, "rel_l2": 0.0}
    B = max(1, int(page_bytes))
    if e.size and e.size % B == 0:
        dp, ep = d.reshape(-1, B), e.reshape(-1, B)
        errs = np.linalg.norm(dp, axis=1) / np.maximum(np.linalg.norm(ep, axis=1), 1e-30)
        k = int(np.argmax(errs))
        worst = {"index": [k], "rel_l2": float(errs[k])}
    return {"rel_l2": float(np.linalg.norm(d) / ref_norm), "max_abs": float(np.abs(d).max()) if d.size else 0.0,
            "max_abs_rel": (float(np.abs(d).max()) if d.size else 0.0) / ref_max, "worst_slice": worst,
            "nonfinite": 0, "mismatched_bytes": int(np.count_nonzero(got != expect))}


def _first_diff(got, expect, page_bytes):
    i = int(np.flatnonzero(got != expect)[0])
    where = f"byte {i}" + (f" (page {i // page_bytes})" if page_bytes > 1 else "")
    return f"first at {where}: got {int(got[i])}, expected {int(expect[i])}"


def _page_calls_text(case, got, expect):
    """Which calls wrote the wrong pages (bench-size scatter, where each page has one writer)."""
    if not case.page_calls or case.page_bytes < 1 or got.size % case.page_bytes:
        return ""
    B = case.page_bytes
    bad = np.flatnonzero((got.reshape(-1, B) != expect.reshape(-1, B)).any(axis=1))
    calls = sorted({case.page_calls.get(int(p), "no call (a page no call writes)") for p in bad})
    more = f" and {len(calls) - 4} more" if len(calls) > 4 else ""
    return f"; {len(bad)} wrong pages, written by: {'; '.join(calls[:4])}{more}"


def judge(case, res, scratch, index):
    """(case record for the output, failures) of one case the worker finished."""
    fails, outputs, padding, intact = [], {}, {}, {}
    exc = res.get("exception")
    kind = case.spec["kind"]
    if kind == "threads":
        excs = [e for e in res.get("exceptions", []) if e]
    elif kind == "phases":   # each exception named with its call
        excs = [dict(c["exception"], call=c["label"]) for c in res.get("calls", []) if c.get("exception")]
    else:
        excs = [exc] if exc else []
    if case.expect_exc:
        cls, must = case.expect_exc
        if not exc:
            fails.append(f"expected {cls}, the call returned normally")
        elif cls not in exc["mro"]:
            fails.append(f"expected {cls}, got {exc['type']}: {exc['message']}")
        else:
            missing = [m for m in must if m not in exc["message"]]
            if missing:
                fails.append(f"{cls} message {exc['message']!r} does not name {', '.join(missing)}")
    else:
        for e in excs:
            fails.append(f"{e['call'] + ': ' if 'call' in e else ''}raised {e['type']}: {e['message']}")
        what = "its out" if case.family.endswith("gather") else "the pages it writes"
        for c in res.get("calls", []) if case.expect_digests else []:
            want = case.expect_digests.get(c["label"])
            if want and not c.get("exception") and c.get("digest") != want:
                fails.append(f"{c['label']}: wrote bytes that differ from the reference (sha256 of {what}, taken "
                             "by its thread as the call returned)")
    written = {v: k for k, v in case.outputs.items()}
    for a in case.arrays:
        try:
            got = sandbox.load_result(scratch, f"out/{index}_{a.name}.npy")
        except (OSError, ValueError):
            fails.append(f"{a.name}: the worker wrote no result")
            continue
        if got.shape != a.flat.shape or got.dtype != a.flat.dtype:
            fails.append(f"{a.name}: came back as {got.dtype}{list(got.shape)}")
            continue
        head_ok = bool(np.array_equal(got[:a.pad], a.flat[:a.pad]))
        tail_ok = bool(np.array_equal(got[a.pad + a.n:], a.flat[a.pad + a.n:]))
        padding[a.name] = head_ok and tail_ok
        if not padding[a.name]:
            side = "before and after" if not (head_ok or tail_ok) else ("before" if not head_ok else "after")
            fails.append(f"{a.name}: sentinel padding {side} the buffer was overwritten (out-of-bounds write)")
        region = got[a.pad:a.pad + a.n]
        if a.name in written and not case.expect_exc:
            name = written[a.name]
            m = byte_metrics(region.view(np.uint8), a.expected.view(np.uint8), case.page_bytes)
            outputs[name] = m
            if m["mismatched_bytes"]:
                fails.append(f"{name}: {m['mismatched_bytes']} of {a.n} bytes differ from the reference, "
                             f"{_first_diff(region.view(np.uint8), a.expected.view(np.uint8), case.page_bytes)}"
                             + _page_calls_text(case, region.view(np.uint8), a.expected.view(np.uint8)))
        else:
            same = bool(np.array_equal(region, a.data))
            intact[a.name] = same
            if not same:
                what = "written by a rejected call" if case.expect_exc else "modified by the call (an input)"
                k = int(np.count_nonzero(region != a.data))
                fails.append(f"{a.name}: {k} elements {what}")
    if case.expect_result is not None and not case.expect_exc:
        if case.spec["kind"] == "threads":
            for t, (got, want) in enumerate(zip(res.get("results", []), case.expect_result)):
                if got != [want] and not excs:
                    fails.append(f"checksum: thread {t} got {got}, expected [{want}]")
            outputs["checksum"] = {"mismatched_threads": sum(
                1 for got, want in zip(res.get("results", []), case.expect_result) if got != [want])}
        else:
            got = res.get("result")
            want = case.expect_result
            ok_int = isinstance(got, int) and 0 <= got < 2 ** 64
            gb = np.array([got if ok_int else 0], np.uint64).view(np.uint8)
            wb = np.array([want], np.uint64).view(np.uint8)
            m = byte_metrics(gb, wb, 8)
            m.update(value=got, expected=want)
            outputs["checksum"] = m
            if got != want:
                fails.append(f"checksum: got {got}, expected {want}")
    rec = {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": not fails, "outputs": outputs,
           "padding": padding, "inputs_intact": intact, "failures": fails, "seconds": round(res.get("seconds", 0), 6)}
    if case.expect_exc:
        rec["exception"] = {"expected": case.expect_exc[0], "got": exc["type"] if exc else None,
                            "message": exc["message"] if exc else None}
    return rec, fails


def _not_run_record(case, why):
    return {"id": case.id, "shape": case.shape, "seed": case.seed, "passed": False, "outputs": {}, "padding": {},
            "inputs_intact": {}, "failures": [why], "seconds": 0.0}


def run_cases(so_path, module_name, cases, deadline, tsan_preload=None, tsan_log=None, no_aslr=False,
              what="candidate"):
    """Run `cases` on the module at `so_path` in sandboxed workers; judge them.

    Returns (case records, failures, info {workers, crashes, sandbox, stderr}). A crash fails
    the case that was running and the rest continue in a fresh worker; raises HostTimeout on a
    hang. With `tsan_preload`, the runs are under ThreadSanitizer."""
    scratch = Path(tempfile.mkdtemp(prefix="kidiom-host-"))
    try:
        (scratch / "in").mkdir()
        (scratch / "out").mkdir()
        mod_dir = scratch / "module"
        mod_dir.mkdir()
        shutil.copy2(so_path, mod_dir / Path(so_path).name)
        specs = _write_inputs(cases, scratch)
        plan = {"module": {"name": module_name, "path": f"module/{Path(so_path).name}"}, "cases": specs, "start": 0}
        records, failures = [None] * len(cases), []
        crashes, workers, sandbox, stderr, completed = 0, 0, {}, "", 0
        start = 0
        while start < len(cases):
            plan["start"] = start
            wr = run_worker("check", scratch, plan, deadline, tsan_preload=tsan_preload, tsan_log=tsan_log,
                            no_aslr=no_aslr)
            workers += 1
            sandbox, stderr = wr.sandbox, wr.stderr
            running = None
            for ev in wr.progress:
                if "start" in ev:
                    running = ev["start"]
                elif "done" in ev:
                    i = ev["done"]
                    rec, fails = judge(cases[i], ev, scratch, i)
                    records[i] = rec
                    completed += 1
                    failures += [f"{cases[i].label}: {f}" for f in fails]
                    running = None
            if wr.timed_out:
                where = f" in case {cases[running].label}" if running is not None else ""
                raise HostTimeout(f"{what} timed out after {wr.seconds:.1f} s{where} (worker killed)")
            _raise_worker_bug(wr)
            death = wr.death()
            load_error = next((ev["load_error"] for ev in wr.progress if "load_error" in ev), None)
            if load_error:
                death = f"failed to import the module ({load_error})"
            last_done = max((ev["done"] for ev in wr.progress if "done" in ev), default=start - 1)
            if running is None and not death:
                if last_done != len(cases) - 1:
                    raise RuntimeError(f"worker stopped early without an error: {_tail(wr.stderr)}")
                break
            if running is None:
                # died outside any case: loading the module, between cases, or at exit
                if last_done == len(cases) - 1:
                    failures.append(f"{what} process {death} at exit, after the last case")
                    break
                where = "before running a case" if last_done < start else f"after case {cases[last_done].label}"
                why = f"{what} process {death} {where}: {_tail(wr.stderr, 800)}"
                for i in range(last_done + 1, len(cases)):
                    records[i] = _not_run_record(cases[i], why)
                failures.append(why)
                break
            death = death or "exited with code 0 in the middle of the case"
            why = f"{what} process {death}"
            rec = _not_run_record(cases[running], why)
            rec["stderr"] = _tail(wr.stderr, 800)
            records[running] = rec
            failures.append(f"{cases[running].label}: {why}")
            crashes += 1
            start = running + 1
            if crashes >= MAX_CRASHES and start < len(cases):
                why = f"not run: the {what} crashed {crashes} times"
                for i in range(start, len(cases)):
                    records[i] = _not_run_record(cases[i], why)
                failures.append(f"{len(cases) - start} cases not run: the {what} crashed {crashes} times")
                break
        return records, failures, {"workers": workers, "crashes": crashes, "sandbox": sandbox, "completed": completed,
                                   "stderr": _tail(stderr, 800), "scratch": str(scratch)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ThreadSanitizer ----------------------------------------------------------------------------------

_TSAN_MAPPING = ("unexpected memory mapping", "FATAL: ThreadSanitizer", "ThreadSanitizer: failed to",
                 "cannot allocate memory in static TLS")


def run_tsan(manifest, source, seeds, deadline):
    """The concurrent cases on a -fsanitize=thread build of the candidate, under the toolchain's
    libtsan (LD_PRELOAD: Python itself is not instrumented). Returns (tsan record, failures)."""
    t0 = time.monotonic()
    lib, why = hostbuild.tsan_runtime()
    if not lib:
        return {"ran": False, "reason": why, "races": 0, "seconds": 0.0}, []
    try:
        so, info = hostbuild.build(manifest, source, variant="tsan")
    except hostbuild.BuildError as e:
        return {"ran": False, "reason": f"the compiler cannot build with -fsanitize=thread: {str(e)[-300:]}",
                "races": 0, "seconds": round(time.monotonic() - t0, 3)}, []
    fams = [f for f in FAMILIES if f.startswith("concurrent/")]
    cases = make_cases(manifest, seeds[:1], families=fams, with_bad=False)
    attempts = []
    for no_aslr in (False, True):
        if no_aslr and not shutil.which("setarch"):
            break
        logdir = Path(tempfile.mkdtemp(prefix="kidiom-tsan-"))
        try:
            records, failures, winfo = run_cases(so, manifest.entry, cases, deadline, tsan_preload=lib,
                                                 tsan_log=logdir / "tsan", no_aslr=no_aslr,
                                                 what="candidate (TSan build)")
            logs = "".join(p.read_text(errors="replace") for p in sorted(logdir.glob("tsan*")))
        except HostTimeout as e:
            return {"ran": False, "reason": f"timed out under ThreadSanitizer: {e}", "races": 0,
                    "seconds": round(time.monotonic() - t0, 3)}, []
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        text = logs + "\n" + winfo.get("stderr", "")
        if winfo["completed"] == 0:
            # nothing ran: the runtime could not start here (e.g. "unexpected memory mapping" under
            # high ASLR entropy: retried without ASLR); not the candidate's failure
            why = next((s for s in _TSAN_MAPPING if s in text), None)
            attempts.append(f"{why}: {_tail(text, 300)}" if why else "; ".join(failures)[:400])
            continue
        races, loader, other = _tsan_reports(logs, Path(so).name, hostbuild.source_functions(
            (Path(source) if source else manifest.source_path).read_text()))
        rec = {"ran": True, "races": len(races), "other_reports": other, "loader_races": len(loader),
               "cases": len(cases),
               "aslr_disabled": no_aslr, "rlimits": winfo["sandbox"].get("rlimits"), "build": info,
               "seconds": round(time.monotonic() - t0, 3)}
        if races:
            rec["reports"] = [_tail(r, 1500) for r in races[:3]]
        if loader:
            # kept for the reviewer, not held against the candidate (see `_LOADER`)
            rec["loader_reports"] = [_race_summary(r) for r in loader[:3]]
        fails = [f"tsan: {f}" for f in failures]
        fails += [f"tsan: data race in the candidate ({len(races)} report(s)): {_race_summary(r)}" for r in races[:3]]
        return rec, fails
    return {"ran": False, "reason": "ThreadSanitizer cannot run on this machine: " + " | ".join(attempts),
            "races": 0, "seconds": round(time.monotonic() - t0, 3)}, []


# One frame of a TSan stack: `#3 function location (module+0xoffset)`, sometimes `(BuildId: …)` after.
_FRAME = re.compile(r"^\s*#\d+\s+(?P<func>.*?)\s+(?P<loc>\S+)\s+\((?P<module>[^()\s]+)\+0x[0-9a-fA-F]+\)"
                    r"(?:\s+\(BuildId: [0-9a-fA-F]+\))?\s*$")
# The header of one of the two conflicting accesses ("Previous atomic write of size 4 at … by thread T3:").
_ACCESS = re.compile(r"^\s*(?:Previous\s+)?(?:atomic\s+)?(?:read|write)\b.*\bof size \d+ at ", re.IGNORECASE)
_SANITIZER_RUNTIME = re.compile(r"^lib[a-z]san\.so")
# glibc's dynamic loader: it frees and reuses thread-local storage under its own locks, which TSan cannot
# see (ld.so is not instrumented), so a race one side of which is the loader's bookkeeping says nothing
# about the candidate (e.g. `_dl_deallocate_tls` freeing a finished thread's TLS block).
_LOADER = re.compile(r"^ld(-linux[^/]*)?\.so|^ld-[^/]*\.so")


def _access_stacks(block):
    """The frames (func, location, module) of each conflicting access in one report."""
    stacks, cur = [], None
    for line in block.splitlines():
        if _ACCESS.match(line):
            cur = []
            stacks.append(cur)
            continue
        m = _FRAME.match(line)
        if m and cur is not None:
            cur.append((m["func"], m["loc"], m["module"]))
        elif cur is not None and not m:
            cur = None   # a blank line or the next section ends this stack
    return stacks


def _in_loader(stack):
    """Whether an access is made by the dynamic loader: its first frame past the sanitizer's interceptors."""
    for func, loc, module in stack:
        if _SANITIZER_RUNTIME.match(module):
            continue
        return bool(_LOADER.match(module)) or "/elf/dl-" in loc or "rtld" in loc
    return False


def _tsan_reports(logs, so_name, functions):
    """(data races that are the candidate's, races in the dynamic loader's bookkeeping, number of other
    reports). A race is the candidate's when one of its two accesses runs code of the candidate's module
    (or a function its source defines) and neither is the loader's own synchronisation."""
    blocks = re.split(r"(?m)^==================\s*$", logs)
    races, loader, other = [], [], 0
    for b in blocks:
        if "WARNING: ThreadSanitizer" not in b:
            continue
        if "data race" not in b:
            other += 1
            continue
        stacks = _access_stacks(b)
        ours = any(module == so_name or hostbuild.base_name(func) in functions
                   for stack in stacks for func, _, module in stack)
        if any(_in_loader(s) for s in stacks):
            loader.append(b.strip())
        elif ours:
            races.append(b.strip())
        else:
            other += 1
    return races, loader, other


def _race_summary(report):
    m = re.search(r"SUMMARY: ThreadSanitizer: (.*)", report)
    return m.group(1).strip() if m else report.splitlines()[0]


# commands -----------------------------------------------------------------------------------------

def versions():
    import numpy
    v = {"python": platform.python_version(), "numpy": numpy.__version__}
    try:
        v["pybind11"] = hostbuild.pybind11_version()
    except Exception:  # noqa: BLE001
        pass
    try:
        v["compiler"] = hostbuild.compiler_version()
    except Exception:  # noqa: BLE001
        pass
    return v


def compile_command(manifest, args):
    src = Path(args.source) if args.source else manifest.source_path
    so, info = hostbuild.build(manifest, args.source)
    out = {"status": "ok", "device": "none (ahead-of-time)", "arch": f"host-{platform.machine()}",
           "shape": manifest.shapes["bench"], "language": manifest.language, "resources": {}, "host": info}
    mix, why = hostbuild.instruction_mix(so, src.read_text())
    if mix:
        out["instructions"] = mix
    else:
        out["notes"] = [why]
    if getattr(args, "keep", None):
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy2(so, Path(args.keep) / Path(so).name)
        if shutil.which("objdump"):
            dis = subprocess.run(["objdump", "-d", "-C", "-w", "--no-show-raw-insn", str(so)], capture_output=True,
                                 text=True, timeout=120).stdout
            (Path(args.keep) / (manifest.entry + ".dis")).write_text(dis)
        out["kept"] = args.keep
    return out, 0


def check_command(manifest, args, deadline):
    base = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    nseeds = 1 if args.quick else max(1, args.seeds)
    seeds = [base + i for i in range(nseeds)]
    so, info = hostbuild.build(manifest, args.source)
    # the bench's sizes once (the first seed): what they catch is keyed on size, not on the data
    cases = make_cases(manifest, seeds) + bench_size_cases(manifest, seeds[0])
    records, failures, winfo = run_cases(so, manifest.entry, cases, deadline)
    out = {"seeds": seeds, "host": info, "sandbox": dict(winfo["sandbox"], workers=winfo["workers"],
                                                         crashes=winfo["crashes"])}
    if args.no_tsan:
        tsan, tfails = {"ran": False, "reason": "--no-tsan", "races": 0, "seconds": 0.0}, []
    else:
        tsan, tfails = run_tsan(manifest, args.source, seeds, deadline)
    failures += tfails
    out.update(cases=records, failures=failures, passed=not failures, tsan=tsan, tolerance=manifest.tolerance,
               status="passed" if not failures else "failed")
    return out, 0 if not failures else 1


# bench --------------------------------------------------------------------------------------------

def service_params(manifest, args):
    svc = {"threads": 1, "window_s": 0.4, "rounds": 7, "warmup": 1, "step_us": 80}
    svc.update(manifest.raw.get("service", {}))
    rounds = args.rounds if args.rounds is not None else args.iters
    if rounds is not None:
        svc["rounds"] = rounds
    for k, a in (("warmup", "warmup"), ("window_s", "window"), ("threads", "threads")):
        if getattr(args, a, None) is not None:
            svc[k] = getattr(args, a)
    if svc["rounds"] < 1 or svc["threads"] < 1 or svc["window_s"] <= 0:
        raise ValueError(f"bad service parameters {svc}")
    return svc


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
    """sha256 per region of the state the calls must produce (the worker's `_digests`)."""
    import hashlib
    P = init.shape[0] - 2 * len(owned) * N
    state = init[ring_labels(P, N, ids, owned, pairs)]
    d = {"pool": hashlib.sha256(state[:P]).hexdigest(), "page_ids": hashlib.sha256(ids).hexdigest()}
    for t in range(len(owned)):
        for k in (0, 1):
            r0 = P + (2 * t + k) * N
            d[f"buffer {t}.{k}"] = hashlib.sha256(state[r0:r0 + N]).hexdigest()
    return d


def _region_text(names):
    """The regions of the ring's state that differ, in words (which call went wrong is not known:
    a wrong byte moves on through later calls)."""
    parts = [n.replace("_", " ") for n in names if not n.startswith("buffer ")]
    bufs = [n[len("buffer "):] for n in names if n.startswith("buffer ")]
    if bufs:
        parts.append(f"transfer buffer{'s' if len(bufs) > 1 else ''} {', '.join(bufs)}")
    return ", ".join(parts)


def bench_gate_cases(manifest, seed=12345):
    """The bench's quick exact check of the candidate: two cpu shapes, and the bench's own sizes and
    argument forms."""
    cases = make_cases(manifest, [seed], families=["gather/random", "gather/repeated", "scatter/random",
                                                   "checksum/buffer"], shapes=manifest.shapes["cpu"][:2],
                       with_bad=False)
    return cases + bench_size_cases(manifest, seed)


def _bench_in_worker(manifest, svc, shape, ring, base_so, cand_so, deadline):
    """The bench's timed rounds in a sandboxed worker that loads both modules: (raw result, the
    WorkerRun, None), or (None, the WorkerRun, {reason, stderr}) when the worker failed."""
    init, ring_ids, owned = ring
    P, N = shape["P"], shape["N"]
    scratch = Path(tempfile.mkdtemp(prefix="kidiom-bench-"))
    try:
        np.save(scratch / "ring_init.npy", init)
        np.save(scratch / "ring_ids.npy", ring_ids)
        mods = {}
        for v, so in (("baseline", base_so), ("candidate", cand_so)):
            (scratch / v).mkdir()
            shutil.copy2(so, scratch / v / Path(so).name)      # two files: two dlopen handles
            mods[v] = f"{v}/{Path(so).name}"
        plan = {"name": manifest.entry, "modules": mods, "service": svc,
                "ring": {"P": P, "N": N, "owned": owned}}
        wr = run_worker("bench", scratch, plan, deadline)
        phase = next((ev["phase"] for ev in reversed(wr.progress) if "phase" in ev), "startup")
        if wr.timed_out:
            raise HostTimeout(f"bench timed out after {wr.seconds:.1f} s during {phase} (worker killed)")
        _raise_worker_bug(wr)
        death = wr.death()
        load_error = next((ev["load_error"] for ev in wr.progress if "load_error" in ev), None)
        if load_error:
            death = f"failed to import a module ({load_error})"
        if death or not (scratch / "out" / "result.json").exists():
            reason = f"bench worker {death or 'wrote no result'} during {phase}"
            if wr.signal in ("SIGSEGV", "SIGBUS") and phase.endswith(" loaded"):
                reason += (" (the calls get the pool they gather from, the buffer they scatter from and the "
                           "page ids through read-only mappings: a call that writes an input faults)")
            return None, wr, {"reason": reason, "stderr": _tail(wr.stderr, 1500)}
        raw = json.loads((scratch / "out" / "result.json").read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return raw, wr, None


def _verify_windows(raw, svc, ring, N):
    """(mismatches, windows, calls): every loaded window's final state against the reference."""
    init, ring_ids, owned = ring
    # Every call the bench timed, verified: the state at the end of each loaded window (pool, transfer
    # buffers, page ids) against the reference replay of exactly the pairs each thread completed.
    cache, mismatches, windows, calls = {}, [], 0, 0
    for s in raw["samples"]:
        for v, d in s["variants"].items():
            key = tuple(d["pairs"])
            if key not in cache:
                cache[key] = ring_expected(init, ring_ids, owned, N, d["pairs"])
            windows += 1
            calls += 2 * sum(d["pairs"])
            where = (f"{v} warm-up round {s['round'] + svc['warmup']}" if s["warmup"] else f"{v} round {s['round']}")
            for e in d.get("errors", []):
                mismatches.append(f"{where}: a call raised {e['type']} on the bench's input: "
                                  f"{e['message']}")
            bad = [k for k, h in cache[key].items() if d["digests"].get(k) != h]
            if bad:
                mismatches.append(f"{where}: after {sum(d['pairs'])} gather+scatter pairs the "
                                  f"state differs from the reference replay in: {_region_text(bad)}: a call in "
                                  "this window skipped, shortened, misplaced or deferred part of its copy, or "
                                  "wrote an input (each call's output is a later call's input, so any call shows "
                                  "here, not only the last)")
            if sum(d["pairs"]) == 0:
                mismatches.append(f"{where}: no transfer completed in the window")
    return mismatches, windows, calls


def bench_command(manifest, args, deadline):
    """bench: the correctness gate, the timed rounds in a worker, every window verified, then the
    statistics (stats.py)."""
    svc = service_params(manifest, args)
    shape = manifest.shapes["bench"]
    N = shape["N"]
    init, ring_ids, owned = bench_ring(shape, svc["threads"])
    cand_so, cand_info = hostbuild.build(manifest, args.source)
    base_so, base_info = hostbuild.build(manifest, args.baseline)
    out = {"device": DEVICE, "mode": MODE, "metric": "scheduler-throughput", "shape": shape,
           "rounds": svc["rounds"], "warmup": svc["warmup"], "service": svc,
           "host": {"baseline": base_info, "candidate": cand_info}}
    # a speedup is never reported on a red gate
    _, gate_fails, _ = run_cases(cand_so, manifest.entry, bench_gate_cases(manifest), deadline)
    if gate_fails:
        out.update(status="failed", reason="candidate fails the correctness gate; no speed measured",
                   failures=gate_fails)
        return out, 1
    raw, wr, failure = _bench_in_worker(manifest, svc, shape, (init, ring_ids, owned), base_so, cand_so, deadline)
    if failure:
        out.update(status="failed", **failure)
        return out, 1
    out["sandbox"] = wr.sandbox
    mismatches, windows, calls = _verify_windows(raw, svc, (init, ring_ids, owned), N)
    out["checksums"] = {"verified": not mismatches, "windows": windows, "calls": calls, "every_call": True,
                        "scheme": "exchange ring: each window's final pool, transfer buffers and page ids "
                                  "against the reference replay of every call",
                        "inputs_readonly": raw.get("inputs_readonly")}
    if mismatches:
        out.update(status="failed", reason="transfers did not produce the reference bytes (every timed call is "
                   "verified)", failures=mismatches)
        return out, 1
    measured = [s for s in raw["samples"] if not s["warmup"]]
    out["order"] = [v for s in measured for v in s["order"]]
    bytes_per_call = float(manifest.floor_bytes(shape))
    peak = raw["peak"]["best_gbps"]
    stats = hoststats.summarize([s["variants"] for s in measured], bytes_per_call, peak, svc["threads"],
                                cpus=raw.get("cpus"))
    out.update(status="ok", results=stats["results"], speedup=stats["speedup"], speedups=stats["speedups"],
               noise_floor=stats["noise_floor"], improvement=stats["improvement"],
               significant=stats["significant"], flags=stats["flags"],
               floor={"bytes": bytes_per_call, "peak_gbps": peak, "peak_median_gbps": raw["peak"]["median_gbps"],
                      "time_at_peak_us": bytes_per_call / (peak * 1e9) * 1e6},
               scheduler={"step_us": raw["step_us"], "units": raw["units"],
                          "switch_interval_s": raw["switch_interval_s"]})
    return out, 0


def run_host_command(args, out, manifest, deadline):
    """Dispatch of compile/check/bench for a `language = "cpp"` manifest; fills `out`, returns
    the exit code."""
    out["versions"] = versions()
    if args.command == "compile":
        res, code = compile_command(manifest, args)
        out.update(res)
        return code
    out["device"] = DEVICE
    out["mode"] = MODE
    out["commit"] = git_commit()
    try:
        if args.command == "check":
            res, code = check_command(manifest, args, deadline)
        elif args.command == "bench":
            res, code = bench_command(manifest, args, deadline)
        else:
            raise ValueError(f"unknown command {args.command}")
    except HostTimeout as e:
        out.update(status="error", error=str(e))
        return 2
    out.update(res)
    return code
