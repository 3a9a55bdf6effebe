"""Which side a candidate's runtime comparison takes at the GPU's shapes, when it reads only sizes.

The check requires both sides of every comparison a candidate adds to have been taken by the CPU's
cases (check.py, `_judge_sides`). A guard such as `K <= 128` (a fallback for heads larger than a
local array) is true at every CPU case and at every GPU shape: no shape the contract names takes its
other side, and the CPU has checked the side the GPU takes. When a comparison reads nothing but the
kernel's size parameters, its grid and literals, it is evaluated here at each GPU and bench shape
(the values the launcher passes there: a CUDA kernel's from its contract's `launch(shape)`, a Triton
kernel's recorded from its launcher), and a side the CPU did not take passes only if no GPU shape
takes it either. Anything else it reads (a program id, a loaded value, a name the kernel computes)
leaves the GPU's side unknown: both sides are then required of the CPU.

The expression is parsed with Python's `ast` (a CUDA one translated first: `&&`, `||`, `!`, literal
suffixes) and evaluated over a whitelist of nodes; nothing is executed."""
import ast
import operator
import re

from .triton.runtime_tests import is_pick

__all__ = ["cuda_params", "evaluate"]

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
        ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
        ast.BitXor: operator.xor, ast.FloorDiv: operator.floordiv}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne}
_DIMS = {"gridDim", "blockDim"}


class _Unknown(Exception):
    pass


def _c_to_python(text):
    text = re.sub(r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)[uUlLfF]+\b", r"\1", text)
    text = text.replace("&&", " and ").replace("||", " or ")
    return re.sub(r"!(?!=)", " not ", text)


def _div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise _Unknown("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q   # C's: toward zero
    return a / b


def _eval(node, env, grid):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unknown(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in _DIMS:
        dims = env.get(node.value.id)
        if dims is None or node.attr not in ("x", "y", "z"):
            raise _Unknown(f"{node.value.id}.{node.attr}")
        return dims["xyz".index(node.attr)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "num_programs" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and grid is not None:
        axis = node.args[0].value
        if isinstance(axis, int) and 0 <= axis < len(grid):
            return grid[axis]
        raise _Unknown("num_programs")
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, grid), _eval(node.right, env, grid)
        if isinstance(node.op, ast.Div):
            return _div(a, b)
        if type(node.op) in _BIN:
            return _BIN[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, grid)
        return {ast.USub: lambda x: -x, ast.UAdd: lambda x: x, ast.Not: lambda x: not x,
                ast.Invert: lambda x: ~x}[type(node.op)](v)
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, grid) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, grid)
        for op, right in zip(node.ops, node.comparators):
            r = _eval(right, env, grid)
            if type(op) not in _CMP or not _CMP[type(op)](left, r):
                return False
            left = r
        return True
    if is_pick(node):
        a, b = (_eval(x, env, grid) for x in node.args)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return min(a, b) if name in ("min", "minimum") else max(a, b)
    raise _Unknown(type(node).__name__)


def evaluate(test, env, language, grid=None):
    """The value of the comparison (or, for a minimum or maximum, whether its first operand is the
    smaller) with `env` the sizes ({name: value}, CUDA's `gridDim`/`blockDim` as 3-lists), `grid`
    Triton's launch grid; None when it reads anything else."""
    text = _c_to_python(test) if language == "cuda" else test
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    try:
        if is_pick(node):
            a, b = (_eval(x, env, grid) for x in node.args)
            return None if a == b else bool(a < b)
        return bool(_eval(node, env, grid))
    except (_Unknown, TypeError, ValueError, ZeroDivisionError, OverflowError, KeyError):
        return None


def cuda_params(text, entry):
    """The names of the `__global__` entry's parameters, in order (None if not found)."""
    m = re.search(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                  + re.escape(entry) + r"\s*\(([^)]*)\)", text)
    if not m:
        return None
    names = []
    for p in m.group(1).split(","):
        ids = re.findall(r"[A-Za-z_]\w*", p)
        if not ids:
            return None
        names.append(ids[-1])
    return names
