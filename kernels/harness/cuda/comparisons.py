"""The comparisons a CUDA candidate adds, and an emulation source that records which side each one
takes (issue #50, class 5: the CUDA half of triton/runtime_tests.py).

In a CUDA kernel every comparison reads run-time values (a size parameter, `blockIdx`, `gridDim`,
loaded data), so one a candidate adds is a branch whose side the grid, the sizes or the data choose,
and the GPU's may choose one no CPU case does (`if (N > 64)` where every CPU case has N <= 4). The
emulation is built with each added comparison `a OP b` wrapped as `kidiom_side(k, (a OP b))`, on
its own line (so the file's line numbers stand); the runtime ORs into `sides[k]` 1 for true, 2 for
false, and the check requires both of every one.

Operands are found from C's precedence on a token stream: a relational operator's operands stop at
an equality operator, `&`, `^`, `|`, `&&`, `||`, `?`, `:`, an assignment, `,`, `;` or an unmatched
bracket; an equality operator's also at another equality operator. Angle brackets of a `*_cast<>`
or a `template<>` are not comparisons; any other template argument list on a line the candidate
adds is read as comparisons, whose wrapped build then fails: the check says so (never a pass).
Pure text: runs in the harness and in the sandboxed worker alike."""
import re
from collections import Counter

__all__ = ["added_comparisons", "instrument"]

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.])*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|->\*|\.\.\.|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||::|\+=|-=|\*=|/=|%=|&=|\|=|\^=
           |[-+*/%&|^!~<>=?:;,.()\[\]{}])
  | (?P<other>.)
""", re.S | re.X)

_RELATIONAL = {"<", ">", "<=", ">="}
_EQUALITY = {"==", "!="}
_STOP = {";", ",", "?", ":", "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "&&", "||", "&",
         "|", "^", "{", "}", "return", "case", "else", "do"}
_CASTS = {"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "template"}


def _tokens(text):
    """[(kind, text, start, end)] of the code, preprocessor directives (with their continuation
    lines) and comments left out."""
    directive = [False] * (text.count("\n") + 2)
    cont = False
    for i, line in enumerate(text.split("\n")):
        directive[i] = cont or line.lstrip().startswith("#")
        cont = directive[i] and line.rstrip().endswith("\\")
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment") or directive[text.count("\n", 0, m.start())]:
            continue
        out.append((kind, m.group(), m.start(), m.end()))
    return out


def _angles(toks):
    """Indices of `<` and `>` that bracket a cast's or a template's arguments."""
    skip = set()
    for i, t in enumerate(toks):
        if t[1] == "<" and i > 0 and toks[i - 1][1] in _CASTS:
            depth = 0
            for j in range(i, len(toks)):
                s = toks[j][1]
                if s == "<":
                    depth += 1
                elif s == ">":
                    depth -= 1
                elif s == ">>":
                    depth -= 2
                elif s in (";", "{", "}"):
                    break
                if s in ("<", ">"):
                    skip.add(j)
                if depth <= 0:
                    break
    return skip


def _extent(toks, i, angles):
    """(first, last) token indices of the comparison whose operator is toks[i] (`angles`: the
    indices of a cast's or template's brackets, part of an operand)."""
    op = toks[i][1]
    stop = _STOP | _EQUALITY | (_RELATIONAL if op in _RELATIONAL else set())
    lo, depth = i - 1, 0
    while lo >= 0:
        s = toks[lo][1]
        if s in (")", "]"):
            depth += 1
        elif s in ("(", "["):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and s in stop and lo not in angles:
            break
        lo -= 1
    hi, depth = i + 1, 0
    while hi < len(toks):
        s = toks[hi][1]
        if s in ("(", "["):
            depth += 1
        elif s in (")", "]"):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and s in stop and hi not in angles:
            break
        hi += 1
    return lo + 1, hi - 1


def _comparisons(text):
    """[(normalised text, line, start, end)] of every comparison in `text`."""
    toks = _tokens(text)
    skip = _angles(toks)
    out = []
    for i, (kind, s, start, _) in enumerate(toks):
        if kind != "op" or i in skip or s not in _RELATIONAL | _EQUALITY:
            continue
        lo, hi = _extent(toks, i, skip)
        if lo > i - 1 or hi < i + 1:
            continue   # an operand missing: not an expression we can wrap
        a, b = toks[lo][2], toks[hi][3]
        out.append((" ".join(text[a:b].split()), text.count("\n", 0, start) + 1, a, b))
    return out


def added_comparisons(base_text, cand_text):
    """[{line, test, on, form}] for each comparison in `cand_text` not in `base_text` (as often)."""
    have = Counter(t for t, _, _, _ in _comparisons(base_text))
    out = []
    for text, line, _, _ in _comparisons(cand_text):
        if have[text] > 0:
            have[text] -= 1
            continue
        out.append({"line": line, "test": text, "on": "runtime value", "form": "comparison"})
    return out


def instrument(text, watched, fn="kidiom_side"):
    """`text` with each comparison of `watched` ([{line, test}]) wrapped as `fn(k, (...))`, k its
    index in `watched`; line numbers unchanged. Returns (text, {k: line})."""
    want = {}
    for k, w in enumerate(watched):
        want.setdefault((int(w["line"]), str(w["test"])), []).append(k)
    edits, lines = [], {}
    for test, line, a, b in _comparisons(text):
        ks = want.get((line, test))
        if not ks:
            continue
        k = ks.pop(0)
        lines[k] = line
        edits.append((a, b, k))
    # every wrap as two insertions, so that nested comparisons (`(a < b) == c`) wrap each other:
    # at one place, closings before openings, an inner closing before an outer, an outer opening
    # before an inner
    marks = [(a, 1, -b, f"{fn}({k}, (") for a, b, k in edits] + [(b, 0, -a, "))") for a, b, k in edits]
    out, at = [], 0
    for pos, _, _, piece in sorted(marks):
        out += [text[at:pos], piece]
        at = pos
    text = "".join(out) + text[at:]
    return text, lines
