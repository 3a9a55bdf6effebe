"""Where a test's CPU goes, from `perf` samples of the whole machine (issue #42).

    python bench/where_time_goes.py attribute SAMPLES EVENTS STARTS     # one test: JSON on stdout
    python bench/where_time_goes.py table RUN                            # where.json -> markdown

`SAMPLES`: `perf script -F comm,pid,time,event` of `perf record -a -F 99 -e cpu-clock`; `EVENTS`:
`perf script -F comm,pid,time,event,trace` of `perf record -a -c 1 -e sched:sched_process_fork -e
sched:sched_process_exec` (every fork and exec, not a sample of them); `STARTS`: JSON lines
{pid, argv} that each Python process wrote at start (the sitecustomize that bench/where-time-goes.sh
puts on PYTHONPATH). A sample belongs to the nearest harness command (`python -m kernels.harness
CMD`) above it in the fork tree, so a sandboxed worker's samples count for the `check` that
started it; compilers and CUDA tools are named apart wherever they run. `/usr/bin/time` cannot
do this: the sandboxed workers live in PID namespaces of their own and are never reaped by the
process it follows.
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

HZ = 99
DEBUG = False
CXX = {"cc1plus", "cc1", "as", "ld", "collect2", "g++", "c++", "gcc", "x86_64-linux-gnu-g++-12"}
CUDA_TOOLS = {"nvdisasm", "ptxas", "ptxas-blackwell", "cuobjdump"}
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+[\d.]+:\s+(\S+):\s*(.*)")


def starts(path):
    """{pid: label} of the Python processes that logged their start."""
    out = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        argv = r.get("argv") or []
        if any(str(a).startswith("--address") for a in argv) or (argv and "ray" in str(argv[0])):
            out[int(r["pid"])] = "Ray"   # the fleet's driver and Ray's own processes
        elif len(argv) >= 2 and argv[0] == "-m" and argv[1] in HARNESS_COMMANDS:
            out[int(r["pid"])] = f"harness {argv[1]}"
    return out


HARNESS_COMMANDS = {"compile", "check", "bench", "sweep", "profile", "spec", "precision", "fleet", "device", "list"}


def category(top, comm, prog):
    """The row a sample counts in: a tool by its own name, else the harness command above it, else
    the program its process (or the nearest ancestor that exec'd one) runs."""
    if comm in CXX:
        return "C++ builds (g++, as, ld)"
    if comm in CUDA_TOOLS:
        return "CUDA tools (ptxas, cuobjdump, nvdisasm)"
    if top:
        return "Ray" if top == "harness fleet" else top
    prog = prog or comm
    if prog.startswith(("ray", "raylet", "gcs_server")):
        return "Ray"
    if prog == "kidiom":
        return "kidiom"
    if prog.startswith(("chrom", "Chrome")):
        return "Chromium"
    if prog.startswith(("tests-", "python", "pytest", "cargo")):
        return "the test itself"
    if comm.startswith(("kworker", "kdamond", "rcu_", "ksoftirqd", "kthreadd", "migration")):
        return "kernel threads"
    return "other"


def attribute(samples, events, started):
    """{category: core-seconds} of one recording."""
    labels = starts(started)
    parent, execd = {}, {}
    for line in Path(events).read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if not m:
            continue
        pid, ev, rest = int(m.group(2)), m.group(3), m.group(4)
        if ev.endswith("sched_process_fork"):
            c = re.search(r"child_pid=(\d+)", rest)
            if c:
                parent[int(c.group(1))] = pid
        elif ev.endswith("sched_process_exec"):
            f = re.search(r"filename=(\S+)", rest)
            if f:
                execd[pid] = f.group(1).rsplit("/", 1)[-1]
    counts, others = Counter(), Counter()
    for line in Path(samples).read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if not m or not m.group(3).startswith("cpu-clock"):
            continue
        comm, pid = m.group(1), int(m.group(2))
        if pid == 0:
            continue   # idle
        p, top, prog, seen = pid, None, None, 0
        while p is not None and seen < 64:   # the nearest labelled ancestor (or itself)
            prog = prog or execd.get(p)
            if p in labels:
                top = labels[p]
                break
            p, seen = parent.get(p), seen + 1
        cat = category(top, comm, prog)
        counts[cat] += 1
        if DEBUG and cat == "other":
            others[(comm, prog)] += 1
    if DEBUG:
        print(others.most_common(20), file=sys.stderr)
    return {k: round(v / HZ, 1) for k, v in counts.most_common()}


def table(run):
    """The markdown table of RUN/where.json ({"tests": [{test, wall_s, busy_core_s, by}]})."""
    data = json.loads((Path(run) / "where.json").read_text())
    tests = data["tests"]
    cats = Counter()
    for t in tests:
        cats.update(t["by"])
    cols = [c for c, _ in cats.most_common()]
    rows = ["| test (alone) | wall s | busy core-s | " + " | ".join(cols) + " |",
            "|---|---|---|" + "---|" * len(cols)]
    for t in tests:
        rows.append(f"| `{t['test']}` | {t['wall_s']:.1f} | {t['busy_core_s']:.1f} | "
                    + " | ".join(f"{t['by'].get(c, 0):.1f}" for c in cols) + " |")
    total = sum(cats.values())
    rows.append(f"| **all {len(tests)}** | {sum(t['wall_s'] for t in tests):.1f} | "
                f"{sum(t['busy_core_s'] for t in tests):.1f} | " + " | ".join(f"{cats[c]:.1f}" for c in cols) + " |")
    share = ", ".join(f"{c} {100 * cats[c] / total:.0f}%" for c in cols[:6]) if total else "no samples"
    return "\n".join(rows) + f"\n\nShares of the sampled CPU over these tests: {share}."


def main(argv):
    if len(argv) == 5 and argv[1] == "attribute":
        print(json.dumps(attribute(argv[2], argv[3], argv[4])))
    elif len(argv) == 3 and argv[1] == "table":
        print(table(argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
