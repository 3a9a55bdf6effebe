"""Independent counts of usage idioms in a directory, for checking kidiom.

Python files are read with the standard `ast` module, C++/CUDA files with
regular expressions over comment-stripped text. Nothing here shares code or
logic with kidiom's tree-sitter extractors: the two must agree on counts.

Usage: python3 independent_count.py DIR  -> JSON {pattern id: occurrences}
"""
import ast
import json
import os
import re
import sys
from collections import Counter

KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}


def slug(*parts):
    out = []
    for p in parts:
        s = re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-")
        if s:
            out.append(s)
    return "-".join(out)


def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def canonical(name, aliases):
    head, _, rest = name.partition(".")
    if head not in aliases:
        return name
    full = aliases[head] + ("." + rest if rest else "")
    if full.startswith("triton.language."):
        return "tl." + full[len("triton.language."):]
    if full == "triton.language":
        return "tl"
    if full.startswith("triton"):
        return full
    return name


def count_python(src, counts):
    tree = ast.parse(src)
    aliases = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            for a in stmt.names:
                aliases[a.asname or a.name] = stmt.module + "." + a.name
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        decos = []
        for d in fn.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            name = dotted(target)
            decos.append(canonical(name, aliases) if name else "")
        if not any(n.startswith("triton") and n.rsplit(".", 1)[-1] in KERNEL_DECORATORS for n in decos):
            continue
        for n in set(decos):
            if n and not n.endswith(".jit"):
                counts[slug("py", "decorator", "triton-kernel", n)] += 1
        for a in fn.args.args:
            if a.annotation is not None:
                ann = dotted(a.annotation)
                counts[slug("py", "annotation", "triton-param", canonical(ann, aliases))] += 1
        # ast.walk covers the decorator list too.
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            # x.method(...) where x is a call to a dotted name
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call):
                inner = dotted(node.func.value.func)
                if inner:
                    counts[slug("py", "method-wrap", canonical(inner, aliases), node.func.attr)] += 1
            name = dotted(node.func)
            if name is None:
                continue
            callee = canonical(name, aliases)
            for kw in node.keywords:
                if kw.arg:
                    counts[slug("py", "keyword", callee, kw.arg)] += 1
            last = callee.rsplit(".", 1)[-1]
            if last == "exp2":
                counts["py-variant-exp-exp2"] += 1
            if last == "static_range":
                counts["py-variant-range-static-range"] += 1


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def count_cuda(src, counts):
    src = strip_comments(src)
    counts["cu-qualifier-cuda-global-launch-bounds"] += len(re.findall(r"__global__[^{;]*__launch_bounds__", src))
    counts["cu-qualifier-cuda-device-forceinline"] += len(re.findall(r"__device__\s+__forceinline__|__forceinline__\s+__device__", src))
    counts["cu-pragma-loop-unroll"] += len(re.findall(r"#pragma\s+unroll[^\n]*\n\s*for\b", src))
    counts["cu-param-qualifier-pointer-param-restrict"] += len(re.findall(r"\*\s*__restrict__", src))
    counts["cu-intrinsic-kernel-shfl-xor-sync"] += len(re.findall(r"\b__shfl_xor_sync\s*\(", src))
    counts["cu-vector-cast-kernel-reinterpret-cast"] += len(re.findall(r"reinterpret_cast\s*<\s*(?:const\s+)?float4\s*\*\s*>", src))
    counts["cu-inline-asm-kernel-asm"] += len(re.findall(r"\basm\s+volatile\s*\(", src))
    counts["cu-variant-expf-expf"] += len(re.findall(r"\b__expf\s*\(", src))


def count_cpp_binding(src, counts):
    src = strip_comments(src)
    counts["cpp-guard-binding-fn-py-gil-scoped-release"] += len(re.findall(r"py::gil_scoped_release\s+\w+\s*;", src))
    counts["cpp-binding-arg-binding-def-py-call-guard"] += len(re.findall(r"py::call_guard\s*<", src))


def main():
    counts = Counter()
    for root, _, files in os.walk(sys.argv[1]):
        for f in files:
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
            if f.endswith(".py"):
                count_python(src, counts)
            elif f.endswith((".cu", ".cuh")):
                count_cuda(src, counts)
            elif f.endswith((".cpp", ".cc")):
                count_cpp_binding(src, counts)
    json.dump(dict(sorted(counts.items())), sys.stdout, indent=1)


if __name__ == "__main__":
    main()
