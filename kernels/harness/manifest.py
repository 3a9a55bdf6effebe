"""Kernel manifests: the frozen contract next to each kernel (`kernels/*/*.toml`, or any path given
with `--manifest`).

Format (documented in kernels/README.md, "Manifests", and docs/CONTRACTS.md): top-level `format`
(1 or 2), `name`, `language` (`triton`, `cuda`, `cpp`), `source`, `entry`, `launcher`; format 2
`contract` (the contract module next to the manifest), format 1 `op` (a shipped contract module
declaring that OP) and `reference`; tables `tolerance`, `shapes` (`cpu`, `gpu`, `bench`), `floor`
(`bytes`, `flops` as arithmetic expressions in the shape variables), optional `curve`, `drift`,
`specializations`, `profile`, `python` (`path`: the kernel's own project, project.py) and
`[[relation]]`; host C++ kernels (`cpp`) optionally `check` and
`service` (kernels/harness/host/).
"""
import ast
import json
import operator
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = KERNELS_DIR.parent

__all__ = ["Manifest", "load_manifest", "all_manifests", "find_manifest", "manifest_from_args", "eval_expr",
           "shape_id", "ManifestError"]


class ManifestError(Exception):
    pass


@dataclass
class Manifest:
    path: Path
    name: str
    op: str
    language: str
    source: str
    entry: str
    launcher: str
    reference: str
    tolerance: dict
    shapes: dict
    floor: dict
    curve: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    format: int = 1
    contract: str = ""
    relations: list = field(default_factory=list)
    python_path: list = field(default_factory=list)   # [python] path: the kernel's project (project.py)
    # the dotted package the kernel's file lives in under a [python] path directory (`fla.ops.cyfa`):
    # what its relative imports are relative to; None outside any
    python_package: str | None = None

    @property
    def contract_path(self):
        """The contract module: format 2 its `contract` file next to the manifest; format 1 the
        shipped module declaring OP = the manifest's `op` (None: there is none)."""
        if self.contract:
            return self.dir / self.contract
        from .contract import shipped_contracts
        return shipped_contracts().get(self.op)

    @property
    def dir(self):
        return self.path.parent

    @property
    def is_host(self):
        """A host C++ kernel (a pybind11 module; kernels/harness/host/)."""
        return self.language == "cpp"

    @property
    def source_path(self):
        return self.dir / self.source

    def floor_bytes(self, shape):
        return eval_expr(self.floor["bytes"], shape)

    def floor_flops(self, shape):
        return eval_expr(self.floor["flops"], shape)


LANGUAGES = ("triton", "cuda", "cpp")
_REQUIRED = {1: ["format", "name", "op", "language", "source", "entry", "launcher", "reference",
                 "tolerance", "shapes", "floor"],
             2: ["format", "name", "language", "source", "entry", "tolerance", "shapes", "floor"]}


def load_manifest(path):
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(f"cannot read manifest {path}: {e}") from e
    fmt = raw.get("format")
    if fmt not in _REQUIRED:
        raise ManifestError(f"manifest {path}: unsupported format {fmt!r} (1 or 2)")
    missing = [k for k in _REQUIRED[fmt] if k not in raw]
    if fmt == 2 and "contract" not in raw:
        missing.append("contract")
    if fmt == 2 and raw.get("language") in ("triton", "cpp") and "launcher" not in raw:
        missing.append("launcher")
    if missing:
        raise ManifestError(f"manifest {path} lacks {', '.join(missing)}")
    for k in ("contract", "source"):
        v = raw.get(k)
        if v is not None and (not isinstance(v, str) or Path(v).is_absolute()):
            raise ManifestError(f"manifest {path}: {k} must be a path relative to the manifest")
    if raw["language"] not in LANGUAGES:
        raise ManifestError(f"manifest {path}: language must be one of {', '.join(LANGUAGES)}")
    for k in ("cpu", "gpu", "bench"):
        if k not in raw["shapes"]:
            raise ManifestError(f"manifest {path}: shapes.{k} missing")
    for k in ("bytes", "flops"):
        if k not in raw["floor"]:
            raise ManifestError(f"manifest {path}: floor.{k} missing")
        eval_expr(raw["floor"][k], raw["shapes"]["bench"])  # validates the expression
    _check_optional_tables(path, raw)
    relations = raw.get("relation", [])
    if not isinstance(relations, list) or not all(
            isinstance(r, dict) and isinstance(r.get("with"), str) and isinstance(r.get("check"), str)
            and ":" in r["check"] for r in relations):
        raise ManifestError(f"manifest {path}: every [[relation]] needs `with` (a kernel name) and `check` "
                            "(module:function next to the manifest)")
    return Manifest(path=path, name=raw["name"], op=raw.get("op", ""), language=raw["language"],
                    source=raw["source"], entry=raw["entry"], launcher=raw.get("launcher", ""),
                    reference=raw.get("reference", ""), tolerance=raw["tolerance"], shapes=raw["shapes"],
                    floor=raw["floor"], curve=raw.get("curve", {}), raw=raw, format=fmt,
                    contract=raw.get("contract", ""), relations=relations, python_path=(pp := _python_path(path, raw)),
                    python_package=_package_of(_original_dir(path) / raw["source"], pp))


SOURCE_ROOT_MARKER = ".kidiom-source-root"   # validator/src/tree.rs


def _original_dir(path):
    """Where a manifest was copied from, when it lies in a validation's tree (a copy of the
    manifests' directories alone, with a marker naming the root they came from), else its own
    directory: the project `[python] path` names is read where it is, never copied whole."""
    d = Path(path).resolve().parent
    for top in [d, *d.parents][:32]:
        marker = top / SOURCE_ROOT_MARKER
        if marker.is_file():
            try:
                return Path(marker.read_text().strip()) / d.relative_to(top)
            except (OSError, ValueError):
                break
    return d


def _package_of(source, dirs):
    """The dotted package `source` lives in under one of `dirs`, every folder between holding an
    __init__.py (`fla/ops/cyfa/chunk.py` under `.` is `fla.ops.cyfa`), else None."""
    try:
        folder = Path(source).resolve().parent
    except (OSError, RuntimeError):   # a symlink loop: in no package
        return None
    for d in dirs:
        try:
            parts = folder.relative_to(d).parts
        except ValueError:
            continue
        if parts and all((Path(d).joinpath(*parts[:i + 1]) / "__init__.py").is_file() for i in range(len(parts))):
            return ".".join(parts)
    return None


def _python_path(path, raw):
    """`[python] path`: directories (relative to the manifest) holding the kernel's own project."""
    table = raw.get("python", {})
    dirs = table.get("path", []) if isinstance(table, dict) else None
    if not isinstance(dirs, list) or not all(isinstance(d, str) and not Path(d).is_absolute() for d in dirs):
        raise ManifestError(f"manifest {path}: [python] path must be a list of directories relative to the manifest")
    if not dirs:
        return []
    base = _original_dir(path)
    out = [(base / d).resolve() for d in dirs]
    missing = [str(d) for d, o in zip(dirs, out) if not o.is_dir()]
    if missing:
        raise ManifestError(f"manifest {path}: [python] path: no directory {', '.join(missing)}")
    return out


def _check_optional_tables(path, raw):
    """`[drift]` (steps, and a shape per device kind) and `[specializations]` (programs: a
    positive integer or "all", enabled: bool), both optional."""
    drift = raw.get("drift")
    if drift is not None:
        if not isinstance(drift, dict) or not isinstance(drift.get("steps", 64), int) or drift.get("steps", 64) < 2:
            raise ManifestError(f"manifest {path}: drift.steps must be an integer >= 2")
        for kind in ("cpu", "gpu"):
            shape = drift.get(kind)
            if shape is not None and not (isinstance(shape, dict) and all(isinstance(v, int) and v > 0
                                                                           for v in shape.values())):
                raise ManifestError(f"manifest {path}: drift.{kind} must be a table of positive integers")
    spec = raw.get("specializations")
    if spec is not None:
        programs = spec.get("programs", 8) if isinstance(spec, dict) else None
        if not (programs == "all" or (isinstance(programs, int) and not isinstance(programs, bool) and programs > 0)):
            raise ManifestError(f"manifest {path}: specializations.programs must be a positive integer or \"all\"")
        if not isinstance(spec.get("enabled", True), bool):
            raise ManifestError(f"manifest {path}: specializations.enabled must be true or false")


def all_manifests():
    """Every manifest under kernels/, by name."""
    out = {}
    for p in sorted(KERNELS_DIR.glob("*/*.toml")):
        m = load_manifest(p)
        out[m.name] = m
    return out


def find_manifest(name, near=None):
    """The manifest named `name`: among those beside the manifest `near` (a kernel's relation
    partner may live next to it, outside kernels/), then those under kernels/."""
    if near is not None:
        for p in sorted(Path(near).resolve().parent.glob("*.toml")):
            try:
                m = load_manifest(p)
            except ManifestError:
                continue
            if m.name == name:
                return m
    ms = all_manifests()
    if name not in ms:
        raise ManifestError(f"unknown kernel {name!r} (known: {', '.join(sorted(ms))})")
    return ms[name]


def manifest_from_args(args):
    """`--manifest PATH` (absolute or relative to the working directory) or `--kernel NAME`."""
    path = getattr(args, "manifest", None)
    if path:
        return load_manifest(Path(path).resolve())
    if not getattr(args, "kernel", None):
        raise ManifestError("give --kernel NAME or --manifest PATH")
    return find_manifest(args.kernel)


def bench_shape_override(manifest, text):
    """`--shape JSON`: a shape with exactly the bench shape's variables, each a positive integer
    (up to 2**31), to profile or compile at in the bench shape's place."""
    try:
        shape = json.loads(text)
    except ValueError as e:
        raise ManifestError(f"--shape: not JSON ({e})") from None
    bench = manifest.shapes.get("bench") or {}
    if not isinstance(shape, dict) or set(shape) != set(bench):
        got = sorted(shape) if isinstance(shape, dict) else type(shape).__name__
        raise ManifestError(f"--shape: {manifest.name}'s shapes have the variables {sorted(bench)}, not {got}")
    for k, v in shape.items():
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= 1 << 31:
            raise ManifestError(f"--shape: {k} = {str(v)[:40]} is not a positive integer")
    return {k: shape[k] for k in bench}


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg, ast.UAdd: operator.pos}


def eval_expr(expr, env):
    """Evaluate a floor formula: numbers, shape variables, + - * / and parentheses."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ManifestError(f"unknown variable {node.id!r} in {expr!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ManifestError(f"unsupported syntax in formula {expr!r}")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ManifestError(f"bad formula {expr!r}: {e}") from e
    return ev(tree)


def shape_id(shape):
    return "-".join(f"{k}{v}" for k, v in shape.items())
