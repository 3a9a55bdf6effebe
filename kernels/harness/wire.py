"""What every command's wire object shares (validator/src/wire.rs reads it): the wire's name and
version, the exit codes, and the provenance fields `versions` and `commit`.

Kept apart from cli.py so that the commands (host/commands.py, triton/profile.py) fill these in
without importing the command line that dispatches to them."""
import platform
import subprocess
import sys

__all__ = ["WIRE", "VERSION", "EXIT_OK", "EXIT_FAILED", "EXIT_ERROR", "EXIT_SKIPPED", "versions", "git_commit"]

WIRE = "kidiom-harness"
VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_SKIPPED = 0, 1, 2, 3


def versions():
    """The Python, numpy and, where importable, Triton versions (torch's once it is loaded)."""
    import numpy
    v = {"python": platform.python_version(), "numpy": numpy.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except Exception:
        pass
    if "torch" in sys.modules:
        v["torch"] = sys.modules["torch"].__version__
    return v


def git_commit():
    """The repository's HEAD, or None (no git, not a checkout)."""
    from .manifest import REPO_ROOT
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except Exception:
        return None
