"""The fleet driver (`python -m kernels.harness fleet`, kernels/harness/fleet.py) on a Ray head
on 127.0.0.1 that this module starts and stops (also when a test fails): a harness job answers
what the harness answers here; jobs that need a GPU get one of the head's logical GPUs; a worker
killed mid-task is retried once, and killed twice is an error with the reason; a hung command and
a hung task end as errors at their deadlines; cancelling; bad jobs are answered and the driver
goes on; the end of input lets running jobs finish. Skips (with the reason) without Ray."""
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import ROOT

pytest.importorskip("ray", reason="no Ray here (scripts/setup-python.sh installs kernels/requirements-ray.txt)")

from kernels.harness import fleet  # noqa: E402


class Driver:
    """`python -m kernels.harness fleet` as the validator runs it: JSON lines both ways."""

    def __init__(self, address, grace=30):
        self.proc = subprocess.Popen([sys.executable, "-m", "kernels.harness", "fleet", "--address", address,
                                      "--grace", str(grace)], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines, self.results = queue.Queue(), {}
        threading.Thread(target=self._read, daemon=True).start()
        self.err = []
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()
        self.hello = self._next(120)
        assert "hello" in self.hello, (self.hello, "".join(self.err)[-3000:])

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def _next(self, timeout):
        msg = self.lines.get(timeout=timeout)
        assert msg is not None, f"the driver exited: {''.join(self.err)[-3000:]}"
        return msg

    def send(self, job):
        self.proc.stdin.write((job if isinstance(job, str) else json.dumps(job)) + "\n")
        self.proc.stdin.flush()

    def result(self, job_id, timeout=120):
        deadline = time.time() + timeout
        while job_id not in self.results:
            msg = self._next(max(0.1, deadline - time.time()))
            self.results[msg.get("id")] = msg
        return self.results.pop(job_id)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def files_of(named):
    """{path: bytes} -> the job's `files` and `blobs`."""
    files, blobs = {}, {}
    for rel, data in named.items():
        blob = fleet.git_blob_id(data)
        files[rel] = blob
        blobs[blob] = {"text": data.decode()}
    return files, blobs


def command(job_id, code, deadline=60, **more):
    return {"id": job_id, "kind": "command", "argv": [sys.executable, "-c", code], "deadline_s": deadline, **more}


@pytest.fixture(scope="module")
def head():
    with fleet.LocalHead(num_cpus=2, num_gpus=2) as h:
        yield h


@pytest.fixture(scope="module")
def driver(head):
    d = Driver(head.address)
    yield d
    d.close()


def test_the_driver_connects_and_reports_the_cluster(driver):
    h = driver.hello["hello"]
    assert h["protocol"] == fleet.PROTOCOL and h["nodes"] == 1
    assert h["resources"] == {"CPU": 2.0, "GPU": 2.0}


def test_a_harness_job_answers_what_the_harness_answers_here(driver):
    """The same check, same seed: locally and as a task from shipped files only."""
    argv = ["check", "--kernel", "kda.decode", "--seeds", "1", "--seed", "7", "--no-consistency", "--device", "cpu",
            "--json"]
    local = subprocess.run([sys.executable, "-m", "kernels.harness", *argv], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    files, blobs = files_of(fleet.kernels_tree(ROOT))
    driver.send({"id": 1, "kind": "harness", "argv": argv, "cwd": "tree", "files": files, "blobs": blobs,
                 "deadline_s": 300, "harness_version": fleet.harness_version(ROOT)})
    r = driver.result(1, timeout=330)
    assert r["status"] == "ok" and r["rc"] == local.returncode == 0, r
    remote, here = json.loads(r["stdout"]), json.loads(local.stdout)
    assert remote["status"] == here["status"] == "passed" and remote["seeds"] == here["seeds"] == [7]
    assert [c["outputs"] for c in remote["cases"]] == [c["outputs"] for c in here["cases"]]
    assert remote["manifest"].endswith("kernels/kda/decode.toml") and "kidiom-fleet-" in remote["manifest"]
    assert r["harness_version"] == fleet.harness_version(ROOT) and r["attempts"] == 1
    assert "127.0.0.1" in r["node"] and r["gpu"] is None
    print(f"\nharness check: {r['seconds']:.2f} s on the node, dispatch {r['dispatch'] * 1000:.1f} ms")


def test_a_job_with_the_wrong_harness_version_does_not_run(driver):
    files, blobs = files_of(fleet.kernels_tree(ROOT, "t2"))
    driver.send({"id": "v", "kind": "harness", "argv": ["list"], "cwd": "t2", "files": files, "blobs": blobs,
                 "harness_version": "0" * 40})
    r = driver.result("v")
    assert r["status"] == "error" and r["error"].startswith("harness version mismatch"), r
    assert r["stdout"] == "" and r["rc"] is None


def test_jobs_that_need_a_gpu_get_one_of_the_logical_gpus(driver):
    for i in range(2):
        driver.send({"id": f"g{i}", "kind": "sleep", "seconds": 4.0, "gpu": True})   # overlapping
    driver.send({"id": "c", "kind": "sleep", "seconds": 0.1})
    got = [driver.result(f"g{i}") for i in range(2)]
    assert sorted(r["gpu"] for r in got) == ["0", "1"], got   # both at once, each its own
    assert driver.result("c")["gpu"] is None


def test_files_and_argv_placeholders_reach_the_command(driver):
    files, blobs = files_of({"in/a.txt": b"hello", "in/b.txt": b"world"})
    code = "import sys, pathlib; print(open(sys.argv[1]).read() + pathlib.Path('b.txt').read_text())"
    driver.send({"id": "f", "kind": "command", "argv": [sys.executable, "-c", code, "{base}/in/a.txt"],
                 "cwd": "in", "files": files, "blobs": blobs, "deadline_s": 60})
    r = driver.result("f")
    assert (r["status"], r["rc"], r["stdout"]) == ("ok", 0, "helloworld\n"), r
    # a blob is sent once per driver: a later job names it only
    driver.send({"id": "f2", "kind": "command", "argv": [sys.executable, "-c", "print(open('a.txt').read())"],
                 "cwd": "in", "files": {"in/a.txt": files["in/a.txt"]}, "deadline_s": 60})
    assert driver.result("f2")["stdout"] == "hello\n"


def test_a_worker_killed_mid_task_is_retried_once(driver, tmp_path):
    marker = tmp_path / "killed-once"
    code = (f"import os, pathlib, signal\np = pathlib.Path({str(marker)!r})\n"
            "if not p.exists():\n    p.touch()\n    os.kill(os.getppid(), signal.SIGKILL)\n"
            "print('{\"second\": true}')\n")
    t0 = time.time()
    driver.send(command("k1", code))
    r = driver.result("k1")
    assert marker.exists()
    assert (r["status"], r["rc"], r["attempts"]) == ("ok", 0, 2), r
    assert json.loads(r["stdout"]) == {"second": True}
    assert len(r["failures"]) == 1 and r["failures"][0].startswith("attempt 1: "), r["failures"]
    print(f"\nkilled worker: retried, answered in {time.time() - t0:.1f} s ({r['failures'][0][:120]})")


def test_a_worker_killed_twice_is_an_error_with_the_reason(driver):
    driver.send(command("k2", "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"))
    r = driver.result("k2")
    assert (r["status"], r["attempts"], r["rc"]) == ("error", 2, None), r
    assert r["error"].startswith("worker died twice: attempt 1: ") and "attempt 2: " in r["error"], r["error"]
    # the driver goes on, and the dead workers' scratch directories are swept by the next task
    code = ("import glob, os, tempfile\ndead = []\n"
            "for d in glob.glob(tempfile.gettempdir() + '/kidiom-fleet-*-*'):\n"
            "    try:\n        os.kill(int(d.split('-')[-2]), 0)\n"
            "    except ProcessLookupError:\n        dead.append(d)\nprint(dead)\n")
    driver.send(command("after", code))
    assert driver.result("after")["stdout"] == "[]\n"


def test_a_hung_command_ends_as_an_error_at_its_deadline(driver):
    t0 = time.time()
    driver.send(command("h", "import time; print('started', flush=True); time.sleep(600)", deadline=3))
    r = driver.result("h")
    took = time.time() - t0
    assert (r["status"], r["timed_out"], r["rc"]) == ("error", True, None), r
    assert r["error"].startswith("deadline: killed after 3 s") and r["stdout"] == "started\n"
    assert 3 <= took < 15, took


def test_a_hung_task_is_cancelled_past_its_deadline_and_grace(head):
    d = Driver(head.address, grace=1)
    try:
        t0 = time.time()
        d.send({"id": "stuck", "kind": "sleep", "seconds": 600, "deadline_s": 2})
        r = d.result("stuck", timeout=60)
        took = time.time() - t0
        assert (r["status"], r["timed_out"]) == ("error", True), r
        assert r["error"].startswith("deadline: no answer 3 s after the task started"), r["error"]
        assert 3 <= took < 20, took
        d.send({"id": "next", "kind": "sleep", "seconds": 0})     # its slot is free again
        assert d.result("next", timeout=60)["status"] == "ok"
    finally:
        d.close()


def test_a_cancelled_job_answers_at_once(driver):
    driver.send({"id": "long", "kind": "sleep", "seconds": 600})
    time.sleep(1)
    t0 = time.time()
    driver.send({"cancel": "long"})
    r = driver.result("long")
    assert r["status"] == "cancelled" and time.time() - t0 < 5, r


def test_bad_jobs_are_answered_and_the_driver_goes_on(driver):
    files, blobs = files_of({"x": b"x"})
    bad = {
        "b1": {"id": "b1", "kind": "command", "argv": ["true"], "files": {"x": "0" * 40}},
        "b2": {"id": "b2", "kind": "command", "argv": ["true"], "files": {"../x": files["x"]}, "blobs": blobs},
        "b3": {"id": "b3", "kind": "command"},
        "b4": {"id": "b4", "kind": "teleport", "argv": ["true"]},
        "b5": {"id": "b5", "kind": "command", "argv": ["true"], "files": {"y": "1" * 40},
               "blobs": {"1" * 40: {"text": "not this"}}},
        "b6": {"id": "b6", "kind": "command", "argv": ["true"], "blobs": {"2" * 40: "no body"}},
        "b7": {"id": "b7", "kind": "command", "argv": ["true"], "deadline_s": "soon"},
    }
    for job in bad.values():
        driver.send(job)
    driver.send("not json")
    why = {k: driver.result(k)["error"] for k in bad}
    assert why["b1"] == f"bad job: unknown blob {'0' * 40} for x"
    assert why["b2"] == "bad job: file path '../x' must be relative, without '..'"
    assert why["b3"] == "bad job: no argv"
    assert why["b4"] == "bad job: unknown kind 'teleport'"
    assert why["b5"] == f"bad job: blob {'1' * 40} does not match its content"
    assert why["b6"].startswith("bad job: TypeError")
    assert why["b7"] == "bad job: deadline_s must be a number"
    assert driver.result(None)["error"].startswith("not JSON")
    driver.send(command("ok", "print(1)"))
    assert driver.result("ok")["stdout"] == "1\n"


def test_the_end_of_input_lets_running_jobs_finish(head):
    """`fleet < jobs.jsonl`: every job answered, then the driver exits by itself."""
    jobs = "".join(json.dumps({"id": i, "kind": "sleep", "seconds": 0.5, "stdout": f"job {i}"}) + "\n"
                   for i in range(4))
    r = subprocess.run([sys.executable, "-m", "kernels.harness", "fleet", "--address", head.address], cwd=ROOT,
                       input=jobs, capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and "hello" in lines[0], r.stderr[-2000:]
    assert sorted((x["id"], x["stdout"]) for x in lines[1:]) == [(i, f"job {i}") for i in range(4)]


def test_the_ray_client_address_works_too(head):
    d = Driver(head.client)
    try:
        d.send(command("rc", "print('via ray://')"))
        r = d.result("rc")
        assert (r["status"], r["stdout"]) == ("ok", "via ray://\n"), r
    finally:
        d.close()


def _head_processes(session):
    """The processes of the head's session: Ray's own and its workers (whose titles Ray rewrites)."""
    r = subprocess.run(["pgrep", "-s", str(session)], capture_output=True, text=True)
    return r.stdout.split()


@pytest.mark.parametrize("how", ["stdin closed", "holder killed"])
def test_the_head_holder_stops_its_head(how):
    """`fleet --head`: whoever starts it stops the head by closing its stdin, or even by dying."""
    p = subprocess.Popen([sys.executable, "-m", "kernels.harness", "fleet", "--head", "--num-cpus", "1"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(p.stdout.readline())
        assert info["head"].startswith("127.0.0.1:") and Path(info["temp_dir"]).is_dir(), info
        d = Driver(info["head"])          # a task, so that the head has workers too
        d.send({"id": 1, "kind": "sleep", "seconds": 0})
        assert d.result(1)["status"] == "ok"
        d.close()
        assert len(_head_processes(info["session"])) > 3, "the head and its workers run"
        if how == "stdin closed":
            p.stdin.close()
            assert p.wait(timeout=90) == 0
            assert not Path(info["temp_dir"]).exists()
        else:
            p.kill()
            p.wait()
        t0 = time.time()
        while _head_processes(info["session"]) and time.time() - t0 < 90:
            time.sleep(0.5)
        assert _head_processes(info["session"]) == [], "processes of the head are left"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if how == "holder killed":
            import shutil
            shutil.rmtree(info["temp_dir"], ignore_errors=True)


def test_git_blob_ids_match_git():
    assert fleet.git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert fleet.git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert len(fleet.harness_version(ROOT)) == 40 and fleet.harness_version(ROOT / "nowhere") is None


def test_a_ray_client_connection_is_retried_and_nothing_else(monkeypatch):
    """A busy head may fail to start its per-client server: `ray://` connects are retried twice,
    then the error stands; other addresses fail at once."""
    monkeypatch.setattr(fleet, "CLIENT_RETRIES_S", (0.0, 0.0))

    class FakeRay:
        def __init__(self, failures):
            self.failures, self.calls = failures, 0

        def init(self, **kw):
            self.calls += 1
            if self.calls <= self.failures:
                raise ConnectionAbortedError("Starting Ray client server failed")
            return "connected"

    r = FakeRay(2)
    assert fleet._connect(r, {"address": "ray://127.0.0.1:1"}) == "connected" and r.calls == 3
    for address, calls in (("ray://127.0.0.1:1", 3), ("127.0.0.1:1", 1)):
        r = FakeRay(9)
        with pytest.raises(ConnectionAbortedError):
            fleet._connect(r, {"address": address})
        assert r.calls == calls
