"""The suite's CPU locks (conftest.py `take_a_share`, tests/util.rs `cpu_heavy`/`cpu_alone`: the same
two flock files) and the time table that reads their waits (bench/test_times.py)."""
import fcntl
import importlib.util
import json
import threading
import time

from .conftest import ROOT, take_a_share


def _alone(locks):
    """The CPU alone, as tests/util.rs `cpu_alone` takes it: the gate, then `cpu` exclusively."""
    locks.mkdir(parents=True, exist_ok=True)
    gate, cpu = open(locks / "gate", "ab"), open(locks / "cpu", "ab")
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(cpu, fcntl.LOCK_EX)
    return gate, cpu


def test_a_share_waits_while_a_timed_test_has_the_cpu_and_says_how_long(tmp_path):
    gate, cpu = _alone(tmp_path)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("cpu", take_a_share(tmp_path, "kernels/tests/test_x.py::t[a]")))
    t.start()
    time.sleep(0.4)
    assert "cpu" not in got, "a share started while the CPU was held alone"
    gate.close()
    cpu.close()
    t.join(10)
    assert "cpu" in got
    kind, name, secs = (tmp_path / "waits.tsv").read_text().strip().split("\t")
    assert (kind, name) == ("pytest", "kernels/tests/test_x.py::t[a]") and float(secs) >= 0.4
    # shares do not wait for each other
    other = take_a_share(tmp_path, "kernels/tests/test_x.py::t[b]")
    assert len((tmp_path / "waits.tsv").read_text().splitlines()) == 1
    # a timed test waits for the shares running, and holds the gate meanwhile: no new share starts
    asked = {}

    def timed():
        asked["locks"] = _alone(tmp_path)

    w = threading.Thread(target=timed)
    w.start()
    time.sleep(0.3)
    assert "locks" not in asked, "the CPU was taken alone while shares ran"
    got["cpu"].close()
    other.close()
    w.join(10)
    assert "locks" in asked
    for f in asked["locks"]:
        f.close()


def _test_times():
    spec = importlib.util.spec_from_file_location("test_times", ROOT / "bench" / "test_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_time_table_counts_a_test_over_a_minute_by_its_own_time(tmp_path):
    (tmp_path / "phases.tsv").write_text("pytest\t100.0\t0\n")
    (tmp_path / "rust").mkdir()
    events = [{"type": "test", "event": "ok", "name": "service::timed", "exec_time": 90.0},
              {"type": "test", "event": "ok", "name": "trust::waited", "exec_time": 130.0}]
    (tmp_path / "rust" / "tests-test.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\nnoise\n")
    (tmp_path / "pytest.xml").write_text(
        '<testsuites><testsuite><testcase classname="kernels.tests.test_a" name="test_b[x]" time="70.0"/>'
        "</testsuite></testsuites>")
    text, bad = _test_times().table(tmp_path)
    assert "3 tests; 3 over 60 s; 0 failed" in text and not bad   # no waits recorded: the old table
    (tmp_path / "waits.tsv").write_text("rust\ttrust::waited\t100.0\npytest\tkernels/tests/test_a.py::test_b[x]\t"
                                        "20.5\nbad line\n")
    text, bad = _test_times().table(tmp_path)
    assert "3 tests; 1 over 60 s of their own time (3 counting their waits for the CPU locks, 120 s of waits" in text
    assert "| `trust::waited` | tests-test | 30.0 | 130.0 | ok |" in text
    assert "| `kernels.tests.test_a::test_b[x]` | pytest | 49.5 | 70.0 | ok |" in text
    assert text.index("service::timed") < text.index("test_b[x]") < text.index("trust::waited")   # by own time
