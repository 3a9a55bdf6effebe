"""The comparisons a candidate adds to a Triton kernel on values known only at run time (issue #50,
class 5): on a program id (`tl.program_id`, `tl.num_programs`, or a name computed from one), on a
runtime (non-constexpr) parameter, or on a value loaded from memory; a two-operand minimum or
maximum counts as one. Each is a branch whose side the grid, the sizes or the data choose: a kernel
wrong only in program 1234, past a size no CPU case has, or for inputs the cases never draw passes
every program the CPU ran. check.py runs every program of each specialisation for a candidate that
adds one on a program id, and requires every one to take both its sides in the CPU's runs
(interp.py, `install_side_watch`, records them).

Pure syntax (`ast`): the candidate's text is parsed, never run, so this runs in the harness's own
process."""
import ast
from collections import Counter

__all__ = ["new_runtime_comparisons", "is_pick"]

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
    """(names computed from a program id, from a runtime parameter, from a value loaded from
    memory), to a fixpoint over the function's assignments."""
    runtime = {a.arg for a in fn.args.args + fn.args.kwonlyargs if not _constexpr(a)}
    program = set()
    assigns = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            names = {t.id for tg in targets for t in ast.walk(tg) if isinstance(t, ast.Name)}
            assigns.append((names, n.value))
    loaded = set()
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
            if (_calls_load(value) or used & loaded) and not names <= loaded:
                loaded |= names
                changed = True
    return program, runtime, loaded


def _calls_load(node):
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load"
               for n in ast.walk(node))


_PICKS = {"minimum", "maximum", "min", "max"}


def is_pick(node):
    """A two-operand minimum or maximum (`tl.minimum(T, 2048)`, `min(a, b)`): a comparison that
    chooses a value rather than a branch."""
    f = node.func if isinstance(node, ast.Call) else None
    name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
    return name in _PICKS and len(node.args) == 2 and not node.keywords


def _comparisons(fn):
    """Every comparison in the function, minima and maxima included: (normalised text, node)."""
    return [(ast.unparse(n), n) for n in ast.walk(fn) if isinstance(n, ast.Compare) or is_pick(n)]


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
        program, runtime, loaded = _taint(fn)
        for text, node in sorted(_comparisons(fn), key=lambda c: c[1].lineno):
            if have[text] > 0:
                have[text] -= 1
                continue
            used = _names(node)
            form = "min/max" if isinstance(node, ast.Call) else "comparison"
            if _calls_load(node) or used & loaded:
                # a test on the inputs' values: which side depends on the data, not on the grid
                out.append({"line": node.lineno, "test": text, "on": "loaded value", "form": form,
                            "names": sorted(used & loaded) or ["tl.load"]})
            elif _calls_program(node) or used & program:
                out.append({"line": node.lineno, "test": text, "on": "program id", "form": form,
                            "names": sorted(used & program) or ["tl.program_id"]})
            elif used & runtime:
                out.append({"line": node.lineno, "test": text, "on": "runtime value", "form": form,
                            "names": sorted(used & runtime)})
    return out
