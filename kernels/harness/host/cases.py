"""What a host contract builds its cases and its service workload from (docs/CONTRACTS.md, "Host (C++)
contracts"): plain data the harness validates (hostcontract.py), sends to the sandboxed worker
(never the expected values) and judges.

A case's arrays live flat in one buffer each, with `pad` sentinel elements before and after the
data: a store there is out of bounds. An argument of a call is a view of one such array
(`Arr.arg(...)`: start, count, and optionally a dtype reinterpretation, a shape, slices, read-only,
a memoryview wrapper), `{"none": True}` (Python None) or `{"value": v}` (a scalar).
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["Arr", "Case", "Service", "IN_SENTINEL", "OUT_POISON", "OUT_SENTINEL", "INDEX_SENTINEL", "scalar"]

IN_SENTINEL = 0xC3     # padding around inputs (bytes)
OUT_POISON = 0xA5      # inside outputs before the call
OUT_SENTINEL = 0x5A    # padding around outputs and in-place arrays: any store there is out of bounds
INDEX_SENTINEL = 0x3C3C3C3C3C3C3C3C   # padding around int64 index arrays: far out of range if read as an index


class Arr:
    """One array of a case, stored flat with `pad` sentinel elements before and after its data.
    `expected` (an output or in-place array: its value after the call) makes it judged; without,
    it must come back unchanged (an input)."""

    def __init__(self, name, data, pad, sentinel, shape=None, expected=None):
        data = np.ascontiguousarray(data).reshape(-1)
        side = np.full(pad, sentinel, dtype=data.dtype)
        self.name, self.pad, self.n = name, pad, data.size
        self.flat = np.concatenate([side, data, side])
        self.shape = list(shape) if shape is not None else [data.size]
        self.expected = None if expected is None else np.ascontiguousarray(expected).reshape(-1)

    def arg(self, **kw):
        """A view of this array's data as one argument (`kw`: start, count, view_dtype, shape, slices,
        readonly, wrap="memoryview"; a `digest` spec also takes rows + page_bytes)."""
        return dict({"array": self.name, "start": self.pad, "count": self.n, "shape": self.shape}, **kw)

    @property
    def data(self):
        return self.flat[self.pad:self.pad + self.n]


def scalar(v):
    """A scalar argument (an int, float or bool passed as is)."""
    return {"value": v}


@dataclass
class Case:
    """One check case. `spec` is what the worker does: {"kind": "call", "fn", "args"} (one call),
    {"kind": "threads", "fn", "repeat", "threads": [args per thread]} (the threads call at once,
    `repeat` times each), or {"kind": "phases", "phases": [{"threads": [[{fn, label, args, digest?}]],
    "rounds"?}]} (see worker.run_phases)."""
    id: str
    family: str
    shape: dict
    seed: int
    spec: dict                      # what the worker does (no expected values)
    arrays: list                    # [Arr]
    outputs: dict                   # output name (as reported) -> array name
    page_bytes: int = 1             # the worst slice's unit (bytes) for byte-exact outputs
    expect_exc: tuple = None        # (exception class name, [substrings of the message]): nothing may be written
    expect_result: object = None    # the call's return value (an int); "threads": one per thread
    result_name: str = "result"     # the return value's name in records and failures
    page_calls: dict = None         # page -> label of the call that writes it (one writer per page)
    expect_digests: dict = None     # "phases": call label -> sha256 of what it must have written
    digest_what: str = "its output"  # what a call's digest covers, in failures

    @property
    def label(self):
        return f"{self.id} seed={self.seed}"


@dataclass
class Service:
    """The service bench's workload (docs/CONTRACTS.md): a state of `rows` x `row_bytes` bytes
    mapped twice (writable and read-only), an int64 index array mapped read-only, and per transfer
    thread a cycle of steps, each a list of calls {"fn", "args"}; an argument is
    {"state": "ro" | "rw", "rows": [r0, r1], "flat": bool} or {"index": k} (row k of `index`).
    Thread t runs step i % len(cycle) for i = 0, 1, ... until the window ends.
    `final(steps)` is the state after thread t completed steps[t] steps (the reference replay);
    `regions` {name: (first row, rows)} are digested after each loaded window; `index_name` names
    the index's digest. `peak`: {"rows": [r0, r1], "bytes", "reps"} of the plain-copy peak."""
    state: np.ndarray
    index: np.ndarray
    threads: list
    regions: dict
    final: object
    peak: dict
    index_name: str = "index"
    step: str = "step"              # what one step is, in messages
