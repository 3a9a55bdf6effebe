"""Where the harness keeps the results it keys by their inputs' content.

Four caches hold only what the harness itself computed from exactly the bytes in their key: the
ahead-of-time compiles (`aot/`), the host C++ builds (`host-build/`), the site search's measured
variants (`sweep/`) and the work profiles (`profile/`). Each entry is written by one atomic
rename and read back checked, so one directory can serve many processes at once. They live in `$KIDIOM_CONTENT_CACHE/<kind>` when that
is set (the test suite points every test at one such directory under `target/`, so that a kernel
compiled by one test is not compiled again by the next, and never at a user's cache), else in
`$KIDIOM_CACHE/<kind>`, else in `~/.cache/kidiom/<kind>`.
"""
import contextlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["content_cache", "read_entry", "write_entry", "files_digest"]


def content_cache(kind):
    """The directory of one content-keyed cache (`aot`, `host-build`, `sweep`); not created."""
    for var in ("KIDIOM_CONTENT_CACHE", "KIDIOM_CACHE"):
        base = os.environ.get(var)
        if base:
            return Path(base) / kind
    return Path.home() / ".cache" / "kidiom" / kind


def read_entry(kind, key):
    """The JSON object stored under `key` in the `kind` cache, or None (absent, or damaged: the
    caller computes it again)."""
    try:
        obj = json.loads((content_cache(kind) / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def write_entry(kind, key, obj):
    """Stores `obj` under `key` by one atomic rename (a reader sees all of it or nothing); a cache
    that cannot be written only costs time."""
    root = content_cache(kind)
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".entry-", dir=root)
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, root / f"{key}.json")
    except (OSError, TypeError, ValueError):
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def files_digest(h, named):
    """Feeds each file's bytes, under the name the caller gives it ({name: path}), to the hash `h`
    in order of name: the same files in another checkout or scratch tree give the same digest."""
    for name in sorted(named):
        h.update(b"\0file\0" + name.encode() + b"\0" + Path(named[name]).read_bytes())
