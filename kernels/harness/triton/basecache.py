"""The baseline's judged errors per case, kept across the checks of one validation run.

Every candidate of a kernel is judged against the baseline kernel on the same inputs (check.py,
BASELINE_FACTOR); with one base seed for the run, those inputs, and so the baseline's errors on
them, are the same for every candidate. The first check to run the baseline on a case stores the
baseline's metrics (per input set: {output: metrics}) here; later checks read them instead of
running the baseline again. The same holds for the baseline's side of the drift (its error per
step, `get_series`/`put_series`): the chained calls' inputs depend on the seed only; and for the
GPU specializations' cases, whose baseline outputs and written masks are kept as arrays
(`get_arrays`/`put_arrays`: the candidate's masks decide which elements both are judged on).

Trust: entries are written only by the judging process, from the baseline's own (trusted) worker,
never from anything a candidate's worker returned; the directory is the validator's, under the
host's temporary directory, which a candidate's sandbox never sees (private /tmp). The key is
everything the metrics depend on: the baseline source's bytes, the manifest, the harness's own
sources and the reference (sweep._context), Triton's and NumPy's versions, the device and TF32
mode, the seed, the case's index and shape and the number of input sets; a changed baseline is a
new key, never a stale entry. Writes are atomic (one temporary per writer, then a rename), so
checks running at the same time at worst compute an entry twice; an entry that does not read as
this version writes it (truncated, malformed) is a miss.
"""
import hashlib
import json
import os
import threading
from pathlib import Path

import numpy as np

__all__ = ["BaselineCache"]

# Bumped whenever what an entry means changes (the metrics, the inputs of a case).
VERSION = 2   # 2: call 2's inputs drawn over the contract's RANGES (check.py, _Case)
METRICS = ("rel_l2", "max_abs", "max_abs_rel", "nonfinite", "worst_slice")


class BaselineCache:
    def __init__(self, directory, manifest, device, tf32):
        from .sweep import _context, _triton_version   # sweep imports check, which imports this
        self.dir = Path(directory)
        h = hashlib.sha256()
        for part in (str(VERSION), manifest.name, _triton_version(), np.__version__, device, str(bool(tf32)),
                     _context(str(manifest.path), Path(manifest.source).name)):
            h.update(part.encode() + b"\0")
        h.update(manifest.source_path.read_bytes())
        from ..project import project_digest
        h.update(project_digest(manifest).encode())
        self.base = h.hexdigest()
        self.hits = self.stored = 0

    def _entry(self, parts):
        h = hashlib.sha256(self.base.encode())
        h.update(json.dumps(parts, sort_keys=True).encode())
        return self.dir / f"{h.hexdigest()}.json"

    def _path(self, case, sets):
        return self._entry([case.seed, case.index, case.shape, sets])

    @staticmethod
    def _read(p):
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):   # absent, unreadable, truncated
            return None

    def get(self, case, sets):
        """The baseline's metrics of `case` ([{output: metrics}] per set), or None."""
        value = self._read(self._path(case, sets))
        if not (isinstance(value, list) and len(value) == sets and all(_valid(ms) for ms in value)):
            return None
        self.hits += 1
        return value

    def put(self, case, per_set):
        self._write(self._path(case, len(per_set)), per_set)

    def get_series(self, what, key):
        """The baseline's error series `what` (e.g. the drift's) for `key`: {output: [float]}, or None."""
        value = self._read(self._entry([what, key]))
        if not (isinstance(value, dict) and value and all(
                isinstance(v, list) and v and all(_number(x) or x is None for x in v) for v in value.values())):
            return None
        self.hits += 1
        # JSON has no infinity: a chain that broke is stored as null, read back as inf
        return {k: [float("inf") if x is None else float(x) for x in v] for k, v in value.items()}

    def put_series(self, what, key, series):
        clean = {k: [x if np.isfinite(x) else None for x in v] for k, v in series.items()}
        self._write(self._entry([what, key]), clean)

    def get_arrays(self, what, key):
        """The baseline's arrays `what` (e.g. a specialization's outputs) for `key`: {name: array}, or None."""
        try:
            with np.load(self._entry([what, key]).with_suffix(".npz"), allow_pickle=False) as z:
                value = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, KeyError):   # absent, truncated, not an archive
            return None
        if not value:
            return None
        self.hits += 1
        return value

    def put_arrays(self, what, key, arrays):
        # np.savez keeps a name ending in .npz as it is
        self._write(self._entry([what, key]).with_suffix(".npz"), arrays, lambda tmp, a: np.savez(tmp, **a), ".npz")

    def _write(self, p, value, dump=lambda tmp, v: tmp.write_text(json.dumps(v)), suffix=""):
        tmp = p.with_name(f".{p.stem}.{os.getpid()}.{threading.get_ident()}.tmp{suffix or p.suffix}")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            dump(tmp, value)
            os.replace(tmp, p)   # atomic: a reader never sees half an entry
            self.stored += 1
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass   # an unwritable cache only costs time

    def describe(self):
        return {"hits": self.hits, "stored": self.stored}


def _valid(ms):
    if not isinstance(ms, dict):
        return False
    for m in ms.values():
        if not (isinstance(m, dict) and all(k in m for k in METRICS) and isinstance(m["worst_slice"], dict)
                and _number(m["worst_slice"].get("rel_l2"))
                and all(_number(m[k]) for k in ("rel_l2", "max_abs", "max_abs_rel", "nonfinite"))):
            return False
    return True


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)
