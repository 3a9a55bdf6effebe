"""Which lines of a change the checks ran (issue #48): a rewrite inside a branch no CPU case takes
(a mode flag the contract fixes, a backward launch it never calls) passes every case without
being run once, and must say so (`unverified`), never "correctness passed".

The harness diffs the candidate's source against the baseline's (`changed_lines`) and asks the
candidate's worker to watch those lines. The worker inserts a marker call before every statement
of a function body that holds one (`Marker`): in the launchers and helpers when it imports the
file, in the @triton.jit functions when the interpreter rewrites them (interp.py). A marker that
runs records its lines in RAN. `watchable` tells the harness which changed lines have a marker:
the others (module level, decorators, a `def` line, comments) run when the file is imported or
the kernel launched, and are not claimed unrun.

This file is part of the worker's runtime (kidiom_rt): numpy-free, stdlib only.
"""
import ast
import difflib

__all__ = ["Marker", "changed_lines", "watchable", "RAN"]

RAN = set()   # the watched lines whose marker ran, in this process


def changed_lines(base_text, cand_text):
    """1-based line numbers of the candidate that a change wrote (replaced or inserted, blank and
    comment-only lines left out); a deletion counts against the line before it."""
    base, cand = base_text.splitlines(), cand_text.splitlines()
    out = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, base, cand, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.update(j for j in range(j1 + 1, j2 + 1) if _code(cand[j - 1]))
        elif tag == "delete":
            j = j1
            while j >= 1 and not _code(cand[j - 1]):
                j -= 1
            if j >= 1:
                out.add(j)
    return sorted(out)


def _code(line):
    s = line.strip()
    return bool(s) and not s.startswith("#")


class Marker(ast.NodeTransformer):
    """Before each statement in a function body that holds a watched line (its header only, for a
    compound statement: its body's statements are marked on their own), a call `name((lines,))`.
    `offset`: added to the tree's line numbers to give the file's (a function parsed alone)."""

    def __init__(self, lines, name, offset=0):
        self.lines, self.name, self.offset = set(lines), name, offset
        self.marked = set()
        self.depth = 0

    def _own_lines(self, st):
        lo = st.lineno + self.offset
        hi = (st.end_lineno or st.lineno) + self.offset
        inner = [b for f in ("body", "orelse", "finalbody", "handlers") for b in getattr(st, f, None) or []
                 if isinstance(b, (ast.stmt, ast.excepthandler))]
        if inner:
            hi = min(b.lineno + self.offset for b in inner) - 1
        return sorted(ln for ln in self.lines if lo <= ln <= hi)

    def _statements(self, stmts):
        out = []
        for st in stmts:
            own = self._own_lines(st) if self.depth else []
            if own:
                self.marked.update(own)
                call = ast.Call(func=ast.Name(id=self.name, ctx=ast.Load()),
                                args=[ast.Tuple(elts=[ast.Constant(ln) for ln in own], ctx=ast.Load())], keywords=[])
                out.append(ast.copy_location(ast.Expr(value=call), st))
            out.append(self.visit(st))
        return out

    def generic_visit(self, node):
        inside = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        self.depth += inside
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and all(isinstance(s, ast.stmt) for s in stmts):
                setattr(node, field, self._statements(stmts))
        for h in getattr(node, "handlers", None) or []:
            h.body = self._statements(h.body)
        self.depth -= inside
        return node


def watchable(text, lines):
    """The lines of `lines` that a Marker marks in `text` (a whole file)."""
    m = Marker(lines, "_")
    m.visit(ast.parse(text))
    return sorted(m.marked)


def record(lines):
    RAN.update(lines)
