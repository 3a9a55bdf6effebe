"""Kernel manifests: the frozen contract next to each kernel (`kernels/*/*.toml`).

Format (documented in kernels/README.md, "Manifests"): top-level `format`, `name`, `op`,
`language` (`triton`, `cuda`, `cpp`), `source`, `entry`, `launcher`, `reference`; tables
`tolerance`, `shapes` (`cpu`, `gpu`, `bench`), `floor` (`bytes`, `flops` as arithmetic
expressions in the shape variables), optional `curve`, `consistency`, `drift` and
`specializations`; host C++ kernels
(`cpp`) optionally `check` and `service` (kernels/harness/host/).
"""
import ast
import operator
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = KERNELS_DIR.parent

__all__ = ["Manifest", "load_manifest", "all_manifests", "eval_expr", "shape_id", "ManifestError"]


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
    consistency: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)

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
_REQUIRED = ["format", "name", "op", "language", "source", "entry", "launcher", "reference",
             "tolerance", "shapes", "floor"]


def load_manifest(path):
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(f"cannot read manifest {path}: {e}") from e
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise ManifestError(f"manifest {path} lacks {', '.join(missing)}")
    if raw["format"] != 1:
        raise ManifestError(f"manifest {path}: unsupported format {raw['format']}")
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
    return Manifest(path=path, name=raw["name"], op=raw["op"], language=raw["language"],
                    source=raw["source"], entry=raw["entry"], launcher=raw["launcher"],
                    reference=raw["reference"], tolerance=raw["tolerance"], shapes=raw["shapes"],
                    floor=raw["floor"], curve=raw.get("curve", {}),
                    consistency=raw.get("consistency", {}), raw=raw)


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


def find_manifest(name):
    ms = all_manifests()
    if name not in ms:
        raise ManifestError(f"unknown kernel {name!r} (known: {', '.join(sorted(ms))})")
    return ms[name]


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
