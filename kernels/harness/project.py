"""A kernel's own project in its sandbox (issue #48): FLA's kernels import `fla.utils`,
`fla.ops.utils`, ... A sandboxed worker imports only its runtime, the kernel's file and kidiom's
Python installation, never the user's tree (where the contract and its reference live). The
manifest's `[python] path` names the directories that hold the project's packages (relative to
the manifest); each top-level package the kernel's file imports that kidiom's Python cannot is
copied from there into the worker's importable tree, without the manifest's own files (its
manifest and contract). A package installed in kidiom's Python is imported from there as it is.

`import_hint` says what to do when an import still fails, on the line that reports it.
"""
import ast
import importlib.util
import os
import re
import shutil
from pathlib import Path

__all__ = ["project_packages", "install_packages", "import_hint", "project_digest"]


def _imported_tops(text):
    """Top-level module names the source imports absolutely."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module.split(".")[0])
    return sorted(set(out))


_IMPORT_LINE = re.compile(r"^\s*(?:from\s+([A-Za-z_]\w*)[\w.]*\s+import|import\s+([A-Za-z_][\w., ]*))", re.M)


def _tops_in(path):
    """Top-level names a copied package's files import (a line scan: cheap over hundreds of files,
    and an import it misses only fails later with the hint)."""
    files = [p for p in path.rglob("*.py") if "__pycache__" not in p.parts] if path.is_dir() else [path]
    out = set()
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in _IMPORT_LINE.finditer(text):
            names = [m.group(1)] if m.group(1) else [n.strip().split(".")[0].split(" ")[0] for n in m.group(2).split(",")]
            out.update(n for n in names if n.isidentifier())
    return out


def _installed(name):
    """Whether the Python installation itself (what a sandboxed worker can import) holds `name`:
    not the working directory or PYTHONPATH (a validation's tree holds a namespace `fla/` of
    copied manifests, which is not FLA)."""
    import sys
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    places = list(spec.submodule_search_locations or []) + ([spec.origin] if spec.origin else [])
    return bool(places) and all(any(os.path.realpath(p).startswith(r + os.sep) for r in roots) for p in places)


# per process, by the source's bytes and the directories: a check asks for each of its workers and
# its cache key, a compile for its sandbox and its key, and FLA's project is hundreds of files to scan
_FOUND = {}


def project_packages(manifest, source=None):
    """[(name, path)]: the packages (a directory) or modules (a .py) to copy, found in the
    manifest's `[python] path` directories (first directory first): those the kernel's file
    imports that kidiom's Python cannot, and theirs in turn (FLA's `einops`, where a directory
    holds it)."""
    dirs = list(getattr(manifest, "python_path", []) or [])
    if not dirs:
        return []
    try:
        text = Path(source or manifest.source_path).read_bytes()
    except OSError:
        return []
    # a file that imports relatively (`from .utils import x`) needs the package it lives in
    own = (getattr(manifest, "python_package", None) or "").split(".")[0]
    key = (text, tuple(map(str, dirs)), own)
    if key not in _FOUND:
        _FOUND[key] = _find_packages(text.decode("utf-8", errors="replace"), dirs, [own] if own else [])
    return list(_FOUND[key])


def _find_packages(text, dirs, also=()):
    found, seen = [], set()
    todo = list(_imported_tops(text)) + list(also)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if _installed(name):
            continue   # kidiom's Python has it
        for d in dirs:
            pkg, mod = d / name, d / f"{name}.py"
            hit = pkg if pkg.is_dir() else mod if mod.is_file() else None
            if hit is not None:
                found.append((name, hit))
                todo.extend(sorted(_tops_in(hit) - seen))
                break
    return found


def install_packages(dst, packages, manifest):
    """Copies `packages` into the directory `dst` (created), leaving out the manifest, its
    contract, compiled bytecode and anything that is not a regular file or directory."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    withheld = {os.path.realpath(p) for p in (manifest.path, manifest.contract_path) if p is not None}

    def ignore(folder, names):
        return [n for n in names if n == "__pycache__" or os.path.realpath(os.path.join(folder, n)) in withheld
                or os.path.islink(os.path.join(folder, n))]

    for name, path in packages:
        if path.is_dir():
            shutil.copytree(path, dst / name, ignore=ignore)
        elif os.path.realpath(path) not in withheld:
            shutil.copyfile(path, dst / path.name)
    return dst


_MISSING = re.compile(r"No module named '([^']+)'")


def import_hint(message):
    """`message` with what to do about an import it reports failing, or as it is."""
    m = _MISSING.search(str(message or ""))
    if not m:
        return message
    top = m.group(1).split(".")[0]
    return (f"{message} (kidiom's Python cannot import {top}: a package of the kernel's own project is "
            f"copied into the sandbox from the directories the manifest's `[python] path` names (relative to "
            f"the manifest, e.g. `[python]` then `path = [\"../..\"]` for the folder that holds {top}/); a "
            f"third-party package must be installed in the Python kidiom runs (KIDIOM_PYTHON))")


def project_digest(manifest, source=None):
    """What a cache entry made from this kernel must also be keyed by: the bytes of its project's
    copied packages (by relative path), and torch's installed version when the file imports torch
    (its launcher's tensors are torch's). Empty when neither applies."""
    import hashlib
    h = hashlib.sha256()
    package = getattr(manifest, "python_package", None)
    if package:   # what its relative imports resolve against
        h.update(f"\0package {package}".encode())
    for name, path in project_packages(manifest, source):
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
            if path.is_dir() else [path]
        for f in files:
            h.update(f"\0{name}/{f.relative_to(path) if path.is_dir() else f.name}\0".encode() + f.read_bytes())
    try:
        text = Path(source or manifest.source_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    if "torch" in _imported_tops(text):
        from importlib import metadata
        try:
            h.update(b"\0torch " + metadata.version("torch").encode())
        except metadata.PackageNotFoundError:
            h.update(b"\0no torch")
    return h.hexdigest()
