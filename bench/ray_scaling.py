#!/usr/bin/env python3
"""Scaling of the Ray executor (`kidiom validate --executor ray`), measured and simulated on this
machine, through the real driver (`python -m kernels.harness fleet`) on local Ray heads.

Part 1, real work: the harness calls the validator makes for one candidate of our decode kernel
(a harmless reordering: compile of the baseline and the candidate, the candidate's check with
three seeds and the consistency check), first as local subprocesses, then as tasks on a local
head (num_cpus=2). Gives the per-gate seconds, and the executor's cost per call: wall seen by the
caller minus the harness's own time on its node.

Part 2, simulation: for N = 1, 2, 4, 8, 16, 64 a head that declares N logical GPUs and N CPUs
(Ray resources; there is no GPU here), and 4N candidates (at least 16), each the validator's
pipeline on a GPU fleet: compile (CPU task) alongside the native check (GPU task), then the
bench (GPU task), at most N candidates in flight (Validator::parallelism). Each task is a `sleep`
job of the recorded per-gate seconds times --scale, so only the executor's own costs are real.
Reported per N: dispatch (driver submit to task start) and round trip overhead per task
(caller's wall minus the task's seconds and its wait for a slot), throughput, efficiency against
a zero-overhead schedule of the same work, the driver's CPU seconds per task, the machine's CPU
use, and the memory of the head's processes. The speed gate's seconds are an assumption
(--bench-seconds): no GPU run is recorded in bench/runs/.

    bench/ray_scaling.py [--out DIR] [--scale 0.1] [--ns 1,2,4,8,16,64] [--bench-seconds 15]
"""
import argparse
import datetime
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kernels.harness import fleet  # noqa: E402


class Client:
    """The driver as the validator runs it: one process, JSON lines, results by id."""

    def __init__(self, address):
        self.proc = subprocess.Popen([sys.executable, "-m", "kernels.harness", "fleet", "--address", address],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.hello = self.lines.get(timeout=180)[1]
        if "hello" not in self.hello:
            raise RuntimeError(f"the driver did not connect: {self.hello}")
        self.sent = {}

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.time(), json.loads(line)))
        self.lines.put(None)

    def send(self, job):
        self.sent[job["id"]] = time.time()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def next(self, timeout=600):
        item = self.lines.get(timeout=timeout)
        if item is None:
            raise RuntimeError("the driver exited")
        t, msg = item
        msg["rtt"] = t - self.sent.pop(msg["id"])
        return msg

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def machine_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)     # busy, total jiffies


def session_stats(sid):
    """Per process of the head's session (Ray's processes and its workers): (CPU jiffies, RSS pages)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[3]) == sid:
                yield sum(int(x) for x in stat[11:15]), int(stat[21])
        except (OSError, IndexError, ValueError):
            pass


def group_cpu(sid):
    """CPU seconds of the processes of the head's session (and of their exited children)."""
    return sum(cpu for cpu, _ in session_stats(sid)) / os.sysconf("SC_CLK_TCK")


def group_rss_mb(sid):
    """Resident memory of the head's session (shared pages counted once per process: an upper bound)."""
    return round(sum(rss for _, rss in session_stats(sid)) * os.sysconf("SC_PAGE_SIZE") / 2**20)


# ---------------------------------------------------------------- part 1: real harness calls

def real_calls(cand_path):
    seed = ["--seeds", "3", "--seed", "5", "--device", "cpu"]
    return [
        ("compile (baseline)", ["compile", "--kernel", "kda.decode"]),
        ("compile (candidate)", ["compile", "--kernel", "kda.decode", "--source", cand_path]),
        ("check (candidate)", ["check", "--kernel", "kda.decode", "--source", cand_path, *seed]),
    ]


def part1():
    src = (ROOT / "kernels/kda/decode.py").read_text()
    cand = src.replace("b_beta * (b_v - b_p)", "(b_v - b_p) * b_beta")
    assert cand != src
    out = {"candidate": "kernels/kda/decode.py: b_beta * (b_v - b_p) -> (b_v - b_p) * b_beta", "calls": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "candidate/kernels/kda/decode.py")
        path.parent.mkdir(parents=True)
        path.write_text(cand)
        local = {}
        for name, argv in real_calls(str(path)):
            t0 = time.time()
            r = subprocess.run([sys.executable, "-m", "kernels.harness", *argv, "--json"], cwd=ROOT,
                               capture_output=True, text=True, timeout=900)
            local[name] = (time.time() - t0, json.loads(r.stdout)["status"])
        files = {**fleet.kernels_tree(ROOT, "tree"), "candidate/kernels/kda/decode.py": cand.encode()}
        blobs = {fleet.git_blob_id(d): {"text": d.decode()} for d in files.values()}
        files = {k: fleet.git_blob_id(d) for k, d in files.items()}
        with fleet.LocalHead(num_cpus=2) as head:
            t0 = time.time()
            c = Client(head.address)
            connect = time.time() - t0
            first = True
            for name, argv in real_calls("{base}/candidate/kernels/kda/decode.py"):
                job = {"id": name, "kind": "harness", "argv": [*argv, "--json"], "cwd": "tree", "files": files,
                       "deadline_s": 900, "harness_version": fleet.harness_version(ROOT)}
                if first:
                    job["blobs"], first = blobs, False
                c.send(job)
                r = c.next()
                here, status = local[name]
                out["calls"].append({
                    "call": name, "status": json.loads(r["stdout"])["status"], "local_status": status,
                    "local_seconds": round(here, 3), "ray_rtt": round(r["rtt"], 3), "task_seconds": r["seconds"],
                    "dispatch": r["dispatch"], "node": r["node"], "attempts": r["attempts"],
                    "overhead": round(r["rtt"] - r["seconds"], 3)})
            c.close()
        out["driver_connect_seconds"] = round(connect, 2)
        out["blob_bytes"] = sum(len(b["text"]) for b in blobs.values())
    return out


# ---------------------------------------------------------------- part 2: simulation

def ideal_makespan(m, n, g):
    """The same pipelines with zero overhead: at most n in flight, compile and check together, then
    the bench; GPU tasks never wait (n candidates in flight use at most n GPUs at a time)."""
    per = max(g["compile"], g["check"]) + g["bench"]
    waves, rest = divmod(m, n)
    return (waves + (1 if rest else 0)) * per


def simulate(n, g, scale, m):
    gs = {k: v * scale for k, v in g.items()}
    res = {"N": n, "candidates": m, "tasks": 3 * m}
    t0 = time.time()
    # a GPU task takes a CPU slot too (its process), as on a real node: 2N CPUs for N GPUs
    with fleet.LocalHead(num_cpus=2 * n, num_gpus=n, object_store_mb=80) as head:
        res["head_start_seconds"] = round(time.time() - t0, 2)
        c = Client(head.address)
        # warm-up: a worker per slot, all at once (Ray starts them on demand; a run pays this once)
        t1 = time.time()
        for i in range(n):
            c.send({"id": f"w{i}g", "kind": "sleep", "seconds": 1.0, "gpu": True})
            c.send({"id": f"w{i}c", "kind": "sleep", "seconds": 1.0})
        for _ in range(2 * n):
            c.next()
        res["warmup_seconds"] = round(time.time() - t1, 2)
        cpu0, busy0, own0 = c.cpu_seconds(), machine_cpu(), group_cpu(head.proc.pid)
        started = time.time()
        pending, inflight, done = list(range(m)), {}, []
        stage = {}

        def launch(i):
            stage[i] = {"compile", "check"}
            c.send({"id": f"{i}/compile", "kind": "sleep", "seconds": gs["compile"]})
            c.send({"id": f"{i}/check", "kind": "sleep", "seconds": gs["check"], "gpu": True})
            inflight[i] = True

        while pending and len(inflight) < n:
            launch(pending.pop(0))
        finished = 0
        rss = 0
        while finished < m:
            r = c.next()
            done.append(r)
            i, what = r["id"].split("/")
            i = int(i)
            if what == "bench":
                finished += 1
                del inflight[i]
                if len(done) % max(1, m // 4) == 0:
                    rss = max(rss, group_rss_mb(head.proc.pid))
                if pending:
                    launch(pending.pop(0))
                continue
            stage[i].discard(what)
            if not stage[i]:
                c.send({"id": f"{i}/bench", "kind": "sleep", "seconds": gs["bench"], "gpu": True})
        makespan = time.time() - started
        cpu1, busy1, own1 = c.cpu_seconds(), machine_cpu(), group_cpu(head.proc.pid)
        rss = max(rss, group_rss_mb(head.proc.pid))
        c.close()
    overhead = [r["rtt"] - r["seconds"] - r["queued"] for r in done]
    dispatch = [r["dispatch"] for r in done if r["dispatch"] is not None]
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else xs[0]   # noqa: E731
    ideal = ideal_makespan(m, n, gs)
    ideal_real = ideal_makespan(m, n, g)
    res.update({
        "makespan_seconds": round(makespan, 3),
        "ideal_seconds": round(ideal, 3),
        "efficiency": round(ideal / makespan, 3),
        "throughput_per_s": round(m / makespan, 3),
        "overhead_ms_median": round(1000 * statistics.median(overhead), 1),
        "overhead_ms_p90": round(1000 * q(overhead, 90), 1),
        "dispatch_ms_median": round(1000 * statistics.median(dispatch), 1),
        "dispatch_ms_p90": round(1000 * q(dispatch, 90), 1),
        "driver_cpu_ms_per_task": round(1000 * (cpu1 - cpu0) / (3 * m), 2),
        "machine_cpu_busy": round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3),
        "ray_cpu_seconds": round(own1 - own0 + cpu1 - cpu0, 2),
        "ray_cpu_share": round((own1 - own0 + cpu1 - cpu0) / makespan / os.cpu_count(), 3),
        "head_rss_mb": rss,
        # the overhead is absolute: at real durations the same run takes the ideal plus it
        "projected_per_hour": round(3600 * m / (ideal_real + max(0.0, makespan - ideal)), 1),
        "ideal_per_hour": round(3600 * m / ideal_real, 1),
    })
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "runs" / f"{datetime.date.today()}-ray"))
    ap.add_argument("--scale", type=float, default=0.1, help="simulated seconds per recorded second")
    ap.add_argument("--ns", default="1,2,4,8,16,64")
    ap.add_argument("--bench-seconds", type=float, default=15.0,
                    help="the speed gate on a GPU (assumed: no GPU run is recorded in bench/runs/)")
    ap.add_argument("--skip-real", action="store_true", help="reuse the per-gate seconds of --out/ray.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prev = out / "ray.json"
    if args.skip_real and prev.exists():
        real = json.loads(prev.read_text())["real"]
    else:
        real = part1()
    secs = {c["call"]: c["local_seconds"] for c in real["calls"]}
    gates = {"compile": secs["compile (candidate)"], "check": secs["check (candidate)"], "bench": args.bench_seconds}
    print(f"part 1 (real harness calls, local vs Ray task on a local head, {os.cpu_count()} cores):")
    for c in real["calls"]:
        print(f"  {c['call']:<20} local {c['local_seconds']:6.2f} s  ray {c['ray_rtt']:6.2f} s "
              f"(task {c['task_seconds']:.2f} s, overhead {c['overhead'] * 1000:.0f} ms, "
              f"dispatch {c['dispatch'] * 1000:.0f} ms)  {c['status']}/{c['local_status']}")
    print(f"per-gate seconds for the simulation: {gates} x {args.scale}")
    sims = []
    for n in [int(x) for x in args.ns.split(",")]:
        m = max(16, 4 * n)
        r = simulate(n, gates, args.scale, m)
        sims.append(r)
        print(f"  N={n:<3} {m:>4} candidates {r['makespan_seconds']:7.2f} s (ideal {r['ideal_seconds']:6.2f}) "
              f"eff {r['efficiency']:.2f}  {r['throughput_per_s']:6.2f} cand/s  overhead/task "
              f"{r['overhead_ms_median']:.0f} ms (p90 {r['overhead_ms_p90']:.0f})  dispatch "
              f"{r['dispatch_ms_median']:.0f} ms  driver {r['driver_cpu_ms_per_task']:.1f} ms CPU/task  "
              f"Ray CPU {r['ray_cpu_share']:.0%} of the machine (all work {r['machine_cpu_busy']:.0%})  "
              f"head {r['head_rss_mb']} MB  "
              f"projected {r['projected_per_hour']:.0f}/h of ideal {r['ideal_per_hour']:.0f}/h", flush=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": __import__("ray").__version__, "platform": platform.platform()},
        "scale": args.scale, "gates": gates, "bench_seconds_assumed": True, "real": real, "simulation": sims,
    }
    (out / "ray.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'ray.json'}")


if __name__ == "__main__":
    main()
