"""Which of a kernel's constexpr branches each CPU case and each GPU shape takes (issue #45).

A branch on constexprs alone (`if K < 128:`, `if USE_INITIAL_STATE:`) is decided per
specialisation: the CPU's small shapes may take an arm that no GPU shape takes, and then what the
CPU's correctness checked there is code no GPU runs. `coverage` evaluates every such `if` of the
kernel's body under the constexprs of each CPU case and each GPU shape (recorded from the
launcher, aot.py) and returns each arm with the cases that reach it. An `if` on anything else (a
loaded value, a program id) is decided at run time and left out; arms nested in it are still
reached where it is. The validator compares the candidate's arms with the baseline's
(validator/src/gates/static_gate.rs): an arm the candidate adds or changes that only the CPU's
cases reach is rejected.

Runs in the sandboxed compile worker (kidiom_rt.branches), on the candidate's own source."""
import ast
import hashlib
import inspect
import operator
import textwrap

__all__ = ["coverage"]

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.Div: operator.truediv}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not}


class _Runtime(Exception):
    """The test reads something that is not a constexpr: decided at run time."""


def _eval(node, env):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Runtime(node.id)
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return +v
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right in zip(node.ops, node.comparators):
            if type(op) not in _CMP:
                raise _Runtime(type(op).__name__)
            r = _eval(right, env)
            if not _CMP[type(op)](left, r):
                return False
            left = r
        return True
    raise _Runtime(type(node).__name__)


def _decide(test, sets, constants):
    """The test's truth under each constexpr set (with the module's plain constants beneath it), or
    None when any set leaves it to run time."""
    try:
        return [bool(_eval(test, {**constants, **env})) for env in sets]
    except (_Runtime, ArithmeticError, TypeError, ValueError):
        return None


def _constants(fn):
    """The module-level names a kernel reads that are plain values (or `tl.constexpr` of one): the
    same on every path, so a test on them is decided per specialisation too."""
    out = {}
    for name, v in getattr(fn, "__globals__", {}).items():
        v = getattr(v, "value", v) if type(v).__name__ == "constexpr" else v
        if isinstance(v, (int, float, bool, str)) or v is None:
            out[name] = v
    return out


def _arm_hash(stmts):
    return hashlib.sha256("\n".join(ast.dump(s) for s in stmts).encode()).hexdigest()[:16]


def coverage(jit_fn, cpu_sets, gpu_sets):
    """[{"line", "arm" ("then"/"else"), "test", "hash", "cpu", "gpu"}]: every arm of every constexpr
    `if` in the kernel's body, with the indices of the CPU cases (`cpu_sets`: their constexprs by
    parameter name) and of the GPU shapes (`gpu_sets`) that reach it. `line` is the file's line of
    the arm's first statement; `hash` names the arm's code (its statements' syntax trees)."""
    fn = getattr(jit_fn, "fn", jit_fn)
    lines, start = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    body = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if body is None:
        return []
    out, constants = [], _constants(fn)

    def walk(stmts, cpu, gpu):
        for st in stmts:
            if isinstance(st, ast.If):
                c, g = _decide(st.test, cpu_sets, constants), _decide(st.test, gpu_sets, constants)
                if c is None or g is None:
                    walk(st.body, cpu, gpu)
                    walk(st.orelse, cpu, gpu)
                    continue
                test = ast.unparse(st.test)
                arms = [("then", st.body, [i for i in cpu if c[i]], [i for i in gpu if g[i]])]
                if st.orelse:
                    arms.append(("else", st.orelse, [i for i in cpu if not c[i]], [i for i in gpu if not g[i]]))
                for arm, stmts_, c_in, g_in in arms:
                    out.append({"line": start + stmts_[0].lineno - 1, "arm": arm, "test": test,
                                "hash": _arm_hash(stmts_), "cpu": c_in, "gpu": g_in})
                    walk(stmts_, c_in, g_in)
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(st, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    walk(inner, cpu, gpu)

    walk(body.body, list(range(len(cpu_sets))), list(range(len(gpu_sets))))
    return out
