"""Where the harness keeps the results it keys by their inputs' content.

Three caches hold only what the harness itself computed from exactly the bytes in their key: the
ahead-of-time compiles (`aot/`), the host C++ builds (`host-build/`) and the site search's measured
variants (`sweep/`). Each entry is written by one atomic rename and read back checked, so one
directory can serve many processes at once. They live in `$KIDIOM_CONTENT_CACHE/<kind>` when that
is set (the test suite points every test at one such directory under `target/`, so that a kernel
compiled by one test is not compiled again by the next, and never at a user's cache), else in
`$KIDIOM_CACHE/<kind>`, else in `~/.cache/kidiom/<kind>`.
"""
import os
from pathlib import Path

__all__ = ["content_cache"]


def content_cache(kind):
    """The directory of one content-keyed cache (`aot`, `host-build`, `sweep`); not created."""
    for var in ("KIDIOM_CONTENT_CACHE", "KIDIOM_CACHE"):
        base = os.environ.get(var)
        if base:
            return Path(base) / kind
    return Path.home() / ".cache" / "kidiom" / kind
