"""The comparisons a candidate adds to a Triton kernel on values only known at run time (issue #50,
class 5): a program id (`tl.program_id`, `tl.num_programs`, or a name computed from one) or a
runtime (non-constexpr) parameter. Such a test is a branch the specialisations' sampled programs
may never take: a kernel wrong only in program 1234, or only past a size no CPU case has, passes
every program the CPU ran. check.py runs every program of each specialisation for a candidate that
adds one on a program id, and says in the record which comparisons it found.

Pure syntax (`ast`): the candidate's text is parsed, never run, so this runs in the harness's own
process."""
import ast
from collections import Counter

__all__ = ["new_runtime_comparisons"]

_PROGRAM_CALLS = {"program_id", "num_programs"}


def _jit_functions(tree):
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
                (isinstance(d, ast.Attribute) and d.attr == "jit") or (isinstance(d, ast.Name) and d.id == "jit")
                or (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "jit")
                for d in node.decorator_list):
            out[node.name] = node
    return out


def _constexpr(arg):
    a = arg.annotation
    return a is not None and ("constexpr" in ast.unparse(a))


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _calls_program(node):
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _PROGRAM_CALLS
               for n in ast.walk(node))


def _taint(fn):
    """(names computed from a program id, names computed from a runtime parameter), to a fixpoint
    over the function's assignments."""
    runtime = {a.arg for a in fn.args.args + fn.args.kwonlyargs if not _constexpr(a)}
    program = set()
    assigns = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            names = {t.id for tg in targets for t in ast.walk(tg) if isinstance(t, ast.Name)}
            assigns.append((names, n.value))
    changed = True
    while changed:
        changed = False
        for names, value in assigns:
            used = _names(value)
            if (_calls_program(value) or used & program) and not names <= program:
                program |= names
                changed = True
            if used & runtime and not names <= runtime:
                runtime |= names
                changed = True
    return program, runtime


def _comparisons(fn):
    """Every comparison in the function: (normalised text, node)."""
    return [(ast.unparse(n), n) for n in ast.walk(fn) if isinstance(n, ast.Compare)]


def new_runtime_comparisons(base_text, cand_text):
    """[{line, test, on: "program id" | "runtime value", names}] for each comparison in a
    `@triton.jit` function of `cand_text` that is not in the same function of `base_text` (as
    often) and reads a program id or a runtime value. A source that does not parse gives []."""
    try:
        base, cand = ast.parse(base_text), ast.parse(cand_text)
    except (SyntaxError, ValueError):
        return []
    bfns, out = _jit_functions(base), []
    for name, fn in _jit_functions(cand).items():
        have = Counter(t for t, _ in _comparisons(bfns[name])) if name in bfns else Counter()
        program, runtime = _taint(fn)
        for text, node in sorted(_comparisons(fn), key=lambda c: c[1].lineno):
            if have[text] > 0:
                have[text] -= 1
                continue
            used = _names(node)
            if _calls_program(node) or used & program:
                out.append({"line": node.lineno, "test": text, "on": "program id",
                            "names": sorted(used & program) or ["tl.program_id"]})
            elif used & runtime:
                out.append({"line": node.lineno, "test": text, "on": "runtime value", "names": sorted(used & runtime)})
    return out
