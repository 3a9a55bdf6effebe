"""Loading a kernel's public function from its source file (or an alternative source)."""
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

__all__ = ["load_launcher", "import_file"]


def import_file(path, package=None):
    """Import a Python file as a fresh module (unique name per path and content), so that a
    rewritten variant and the baseline can live in one process. `package`: the package its
    relative imports are relative to (the manifest's `python_package`)."""
    path = Path(path).resolve()
    digest = hashlib.sha256(path.read_bytes() + str(path).encode() + str(package).encode()).hexdigest()[:12]
    name = f"kidiom_kernel_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if package:
        mod.__package__ = package
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def resolve(dotted):
    mod, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(mod), attr)


def load_launcher(manifest, source=None):
    """The kernel's public function, called as the op's contract says (destination passing)."""
    path = Path(source) if source else manifest.source_path
    if not path.exists():
        raise FileNotFoundError(f"source file {path} does not exist")
    if manifest.language == "triton":
        mod = import_file(path, getattr(manifest, "python_package", None))
        try:
            from .triton.arrays import launcher_of   # in the repository: kernels.harness.triton.arrays
        except ImportError:   # a sandbox's flat runtime (kidiom_rt)
            from .arrays import launcher_of
        launcher = launcher_of(mod, manifest.launcher)
        if launcher is None:
            raise AttributeError(f"{path} defines no {manifest.launcher}()")
        if not hasattr(mod, manifest.entry):
            raise AttributeError(f"{path} defines no kernel {manifest.entry}")
        return launcher
    # a CUDA kernel has no public Python function: it launches as its contract's launch(shape) says
    # (kernels/harness/cuda/emulation.py: launch_kernel)
    raise ValueError(f"{manifest.name}: a {manifest.language} kernel has no Python launcher")
