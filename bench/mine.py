#!/usr/bin/env python3
"""End-to-end benchmark: `kidiom mine` against `ast-grep scan` on the pinned corpora.

What it measures
  cold   `kidiom mine` of FLA + DeepGEMM + the SGLang sdist into a fresh catalog
         (list, read, prefilter, parse, extract, aggregate, write SQLite).
  warm   the same command again with nothing changed (every blob cached).
  peer   `ast-grep scan` with 24 rules equivalent to the idiom families the
         issue names, over the same files, in the same run.

Is the comparison fair?
  ast-grep parses every file of a language its rules name; kidiom parses only
  files whose bytes contain a kernel marker (its prefilter is part of the
  design, SPEC §11). ast-grep's rules are written to find the same sites
  (keyword arguments through `has`, kernel scope through `inside`), so both
  tools do comparable matching work on the files they parse. kidiom also
  writes a SQLite catalog; ast-grep writes JSON to /dev/null.

The corpora live outside the repository: FLA and DeepGEMM are read from git
clones in the kidiom cache (~/.cache/kidiom/git/<owner>+<name>), the SGLang
sdist is fetched by kidiom itself. Results go to bench/runs/<date>-<host>/.

Usage: bench/mine.py [--reps N] [--kidiom PATH] [--ast-grep PATH]
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFESTS = [os.path.join(ROOT, "corpora", m) for m in ("fla.toml", "deepgemm.toml", "sglang.toml")]
CACHE = os.environ.get("KIDIOM_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kidiom")
PINS = {
    "fla": ("fla-org+flash-linear-attention", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"),
    "deepgemm": ("deepseek-ai+DeepGEMM", "54e22612409371d6364144b69086735beb54e98b"),
}
KERNEL = "inside: {kind: decorated_definition, stopBy: end, has: {kind: decorator, regex: 'triton\\.(jit|autotune|heuristics)'}}"
CUDA_FN = "inside: {kind: function_definition, stopBy: end, regex: '__global__|__device__|CUTLASS_DEVICE|CUTE_HOST_DEVICE'}"


def kw_rule(callee, kw):
    return (f"rule:\n  kind: call\n  {KERNEL}\n  all:\n"
            f"    - has: {{field: function, regex: '^{callee}$'}}\n"
            f"    - has: {{field: arguments, has: {{kind: keyword_argument, has: {{field: name, regex: '^{kw}$'}}}}}}\n")


RULES = {
    "dot-input-precision": ("python", kw_rule("tl\\.dot", "input_precision")),
    "dot-allow-tf32": ("python", kw_rule("tl\\.dot", "allow_tf32")),
    "load-eviction": ("python", kw_rule("tl\\.load", "eviction_policy")),
    "load-cache-modifier": ("python", kw_rule("tl\\.load", "cache_modifier")),
    "load-boundary-check": ("python", kw_rule("tl\\.load", "boundary_check")),
    "store-boundary-check": ("python", kw_rule("tl\\.store", "boundary_check")),
    "config-num-warps": ("python", kw_rule("triton\\.Config", "num_warps")),
    "config-num-stages": ("python", kw_rule("triton\\.Config", "num_stages")),
    "jit-do-not-specialize": ("python", kw_rule("triton\\.jit", "do_not_specialize")),
    "autotune": ("python", "rule:\n  kind: decorator\n  regex: '^@triton\\.autotune'\n"),
    "heuristics": ("python", "rule:\n  kind: decorator\n  regex: '^@triton\\.heuristics'\n"),
    "program-id-int64": ("python", f"rule:\n  pattern: tl.program_id($$$A).to($T)\n  {KERNEL}\n"),
    "exp2": ("python", f"rule:\n  kind: call\n  {KERNEL}\n  has: {{field: function, regex: '(^|\\.)exp2$'}}\n"),
    "static-range": ("python", f"rule:\n  pattern: tl.static_range($$$A)\n  {KERNEL}\n"),
    "multiple-of": ("python", f"rule:\n  pattern: tl.multiple_of($$$A)\n  {KERNEL}\n"),
    "constexpr-param": ("python", "rule:\n  kind: typed_parameter\n  has: {field: type, regex: 'constexpr$'}\n"),
    "launch-bounds": ("cpp", "rule:\n  kind: function_definition\n  regex: '__launch_bounds__'\n"),
    "pragma-unroll": ("cpp", f"rule:\n  kind: preproc_call\n  regex: '#pragma\\s+unroll'\n  {CUDA_FN}\n"),
    "restrict": ("cpp", "rule:\n  kind: parameter_declaration\n  regex: '__restrict__'\n"),
    "forceinline": ("cpp", "rule:\n  kind: function_definition\n  regex: '^[^{]*__forceinline__'\n"),
    "shfl": ("cpp", f"rule:\n  kind: call_expression\n  has: {{field: function, regex: '^__shfl'}}\n  {CUDA_FN}\n"),
    "vector-cast": ("cpp", f"rule:\n  kind: call_expression\n  regex: '^reinterpret_cast<[^>]*(2|4|8)\\s*\\*'\n  {CUDA_FN}\n"),
    "inline-asm": ("cpp", f"rule:\n  kind: gnu_asm_expression\n  {CUDA_FN}\n"),
    "gil-release": ("cpp", "rule:\n  kind: declaration\n  regex: 'gil_scoped_release'\n"),
}


def write_rules(dir):
    os.makedirs(os.path.join(dir, "rules"), exist_ok=True)
    with open(os.path.join(dir, "sgconfig.yml"), "w") as f:
        f.write("ruleDirs:\n  - rules\nlanguageGlobs:\n  cpp: ['*.cu', '*.cuh']\n")
    for name, (lang, body) in RULES.items():
        with open(os.path.join(dir, "rules", name + ".yml"), "w") as f:
            f.write(f"id: {name}\nlanguage: {lang}\nseverity: info\n{body}")
    return os.path.join(dir, "sgconfig.yml")


def trees(kidiom, tmp):
    """The corpora as plain directories for ast-grep (kidiom reads git objects directly)."""
    out = []
    for name, (mirror, rev) in PINS.items():
        dest = os.path.join(CACHE, "bench", "trees", f"{name}-{rev[:12]}")
        if not os.path.isdir(dest):
            repo = os.path.join(CACHE, "git", mirror)
            if not os.path.exists(repo):
                sys.exit(f"bench: no clone of {name} at {repo}; clone it there first")
            os.makedirs(dest + ".partial", exist_ok=True)
            archive = subprocess.run(["git", f"--git-dir={repo}", "archive", rev], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", dest + ".partial"], input=archive, check=True)
            os.rename(dest + ".partial", dest)
        out.append(dest)
    # The sdist is unpacked by kidiom on its first run.
    subprocess.run([kidiom, "mine", MANIFESTS[2], "--db", os.path.join(tmp, "warmup.sqlite"), "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    sdist = os.path.join(CACHE, "pypi", "sglang-0.5.10.post1", "src")
    out.append(os.path.join(sdist, os.listdir(sdist)[0]))
    return out


def timed(cmd, **kw):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kidiom", default=os.path.join(ROOT, "target", "release", "kidiom"))
    ap.add_argument("--ast-grep", dest="astgrep", default=shutil.which("ast-grep") or os.path.join(ROOT, ".venv", "bin", "ast-grep"))
    args = ap.parse_args()
    if not os.path.exists(args.astgrep):
        sys.exit("bench: ast-grep not found (scripts/setup-python.sh installs ast-grep-cli into .venv)")
    tmp = tempfile.mkdtemp(prefix="kidiom-bench-")
    config = write_rules(tmp)
    dirs = trees(args.kidiom, tmp)
    cold, warm, peer = [], [], []
    for i in range(args.reps):
        db = os.path.join(tmp, f"cold{i}.sqlite")
        mine = [args.kidiom, "mine", *MANIFESTS, "--db", db, "--quiet"]
        cold.append(timed(mine))
        warm.append(timed(mine))
        peer.append(timed([args.astgrep, "scan", "-c", config, "--json=compact", *dirs]))
    report = json.loads(subprocess.run([args.kidiom, "mine", *MANIFESTS, "--db", os.path.join(tmp, "cold0.sqlite"), "--json"],
                                       check=True, capture_output=True, text=True).stdout)
    hits = json.loads(subprocess.run([args.astgrep, "scan", "-c", config, "--json=compact", *dirs],
                                     capture_output=True, text=True).stdout or "[]")
    per_rule = {}
    for h in hits:
        per_rule[h["ruleId"]] = per_rule.get(h["ruleId"], 0) + 1
    med = {k: statistics.median(v) for k, v in (("cold", cold), ("warm", warm), ("ast_grep", peer))}
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "files": sum(c["files"] for c in report["corpora"]),
        "parsed": sum(c["parsed"] + c["cached"] - c["no_kernels"] for c in report["corpora"]),
        "seconds": {"cold": cold, "warm": warm, "ast_grep": peer},
        "median": med,
        "ratio_cold_over_ast_grep": med["cold"] / med["ast_grep"],
        "ratio_warm_over_cold": med["warm"] / med["cold"],
        "ast_grep_hits": per_rule,
        "patterns": report["patterns"],
    }
    out = os.path.join(ROOT, "bench", "runs", f"{result['date']}-{platform.node()[:24]}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "mine.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"files {result['files']}, usage patterns {result['patterns']}")
    print(f"kidiom mine cold  {med['cold']:.2f} s   (runs: {', '.join(f'{x:.2f}' for x in cold)})")
    print(f"kidiom mine warm  {med['warm']:.3f} s   ({100 * result['ratio_warm_over_cold']:.1f}% of cold)")
    print(f"ast-grep scan     {med['ast_grep']:.2f} s   ({len(RULES)} rules)")
    print(f"cold / ast-grep   {result['ratio_cold_over_ast_grep']:.2f}")
    print(f"written to {out}/mine.json")


if __name__ == "__main__":
    main()
