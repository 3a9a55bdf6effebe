"""The per-test time table of a bench/test-times.sh run (issue #42).

    python bench/test_times.py bench/runs/<date>-tests [--top N]

Reads phases.tsv (each phase's wall seconds and exit code), rust/<binary>.jsonl (libtest's JSON
events with `exec_time`) and pytest.xml (JUnit), and writes times.md beside them: the phases, every
test binary's total, and the slowest tests of the whole suite; prints the same.
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def rust_tests(run):
    """(binary, test, seconds, outcome) of every Rust test that reported a time."""
    out = []
    for f in sorted((run / "rust").glob("*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue   # the test's own output, interleaved
            if ev.get("type") == "test" and ev.get("event") in ("ok", "failed", "ignored"):
                out.append((f.stem, ev["name"], float(ev.get("exec_time") or 0.0), ev["event"]))
    return out


def pytest_tests(run):
    p = run / "pytest.xml"
    if not p.exists():
        return []
    out = []
    for case in ET.parse(p).getroot().iter("testcase"):
        outcome = "ok"
        for tag, name in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            if case.find(tag) is not None:
                outcome = name
        out.append(("pytest", f"{case.get('classname')}::{case.get('name')}", float(case.get("time") or 0), outcome))
    return out


def phases_of(run):
    """(phase, wall seconds as text, exit code as text) from phases.tsv."""
    return [line.split("\t") for line in (Path(run) / "phases.tsv").read_text().splitlines() if line.strip()]


def lock_waits(run):
    """{(binary, test): seconds} each test waited for the suite's CPU locks (waits.tsv: the Rust
    tests' `cpu_heavy`/`cpu_alone` and pytest's share), or None for a run that did not record them.
    Rust tests are keyed by the binary that holds the locks (tests-test), pytest's by node id in
    its JUnit form (`kernels.tests.test_x::test_y[param]`)."""
    p = run / "waits.tsv"
    if not p.exists():
        return None
    waits = {}
    for line in p.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        kind, name, secs = parts
        try:
            secs = float(secs)
        except ValueError:
            continue
        if kind == "pytest":
            key = ("pytest", name.replace(".py::", "::").replace("/", "."))
        else:
            key = ("tests-test", name)
        waits[key] = waits.get(key, 0.0) + secs
    return waits


def table(run, top=20):
    """The tables (Markdown) of a run: phases, binaries, the slowest `top` tests."""
    run = Path(run)
    phases = phases_of(run)
    tests = rust_tests(run) + pytest_tests(run)
    lines = ["| phase | wall s | exit |", "|---|---|---|"]
    for name, secs, rc in phases:
        lines.append(f"| {name} | {float(secs):.1f} | {rc} |")
    total = sum(float(s) for _, s, _ in phases)
    lines += [f"| **total** | **{total:.1f}** | |"]
    wall = run / "wall.txt"   # runs whose phases overlap (the Rust tests beside pytest) say their wall time
    if wall.exists():
        lines += [f"| **wall, start to end** (phases overlap) | **{float(wall.read_text()):.1f}** | |"]
    lines += [""]
    by_binary = {}
    for binary, _, secs, _ in tests:
        n, s = by_binary.get(binary, (0, 0.0))
        by_binary[binary] = (n + 1, s + secs)
    lines += ["| tests of | count | sum of test seconds |", "|---|---|---|"]
    for b, (n, s) in sorted(by_binary.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {b} | {n} | {s:.1f} |")
    over = [t for t in tests if t[2] > 60]
    failed = [t for t in tests if t[3] == "failed"]
    waits = lock_waits(run)
    if waits is None:
        lines += ["", f"{len(tests)} tests; {len(over)} over 60 s; {len(failed)} failed", "",
                  f"| slowest {top} | binary | s | outcome |", "|---|---|---|---|"]
        for binary, name, secs, outcome in sorted(tests, key=lambda t: -t[2])[:top]:
            lines.append(f"| `{name}` | {binary} | {secs:.1f} | {outcome} |")
        return "\n".join(lines), bool(failed) or any(rc != "0" for _, _, rc in phases)
    # a test's own time: its time less its wait for the CPU locks (a share waits while a timed test
    # has the CPU alone; a timed test waits for the shares running to end)
    own = [(b, n, max(0.0, s - waits.get((b, n), 0.0)), s, o) for b, n, s, o in tests]
    over_own = [t for t in own if t[2] > 60]
    lines += ["", f"{len(tests)} tests; {len(over_own)} over 60 s of their own time ({len(over)} counting their "
              f"waits for the CPU locks, {sum(waits.values()):.0f} s of waits in all); {len(failed)} failed", "",
              f"| slowest {top}, by own time | binary | own s | with waits s | outcome |", "|---|---|---|---|---|"]
    for binary, name, mine, secs, outcome in sorted(own, key=lambda t: -t[2])[:top]:
        lines.append(f"| `{name}` | {binary} | {mine:.1f} | {secs:.1f} | {outcome} |")
    return "\n".join(lines), bool(failed) or any(rc != "0" for _, _, rc in phases)


def main(argv):
    run = Path(argv[0])
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 20
    text, bad = table(run, top)
    text = "# Suite time by phase and by test\n\n" + text + "\n"
    (run / "times.md").write_text(text)
    sys.stdout.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
