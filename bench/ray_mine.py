#!/usr/bin/env python3
"""Mining on Ray (`kidiom mine --executor ray`) against a local run, on this machine, through a
local Ray head on 127.0.0.1 that this script starts and stops.

For each mode (usage: the files of a corpus; history: its first-parent commits) and corpus:
`kidiom mine` from an empty catalog locally, then through Ray (RAY_ADDRESS=the head,
`--executor ray`): once with the nodes' blob cache emptied (the kidiom binary crosses to the node
again), then --runs times warm. Reported: wall time (median), the run's shards (count, files or
commits in them), connecting (driver start and joining the cluster), and per shard the time on
the node, the mining inside `kidiom shard`, and the overhead (admission to answer, less the
mining and the wait for a slot: dispatch, the files' and results' transfer, process start).
The two catalogs are compared (`kidiom catalog list --json --all`).

    bench/ray_mine.py --out DIR [--runs 3] [--manifest corpora/fla.toml] [--bin target/release/kidiom]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kernels.harness import fleet  # noqa: E402


def kidiom(bin_, args, env):
    t = time.time()
    p = subprocess.run([str(bin_), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t
    if p.returncode != 0:
        raise RuntimeError(f"kidiom {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall, json.loads(p.stdout) if p.stdout.strip() else None


def mine(bin_, mode, manifest, db, env, extra=()):
    if db.exists():
        db.unlink()
    args = ["mine", *(["--history"] if mode == "history" else []), manifest, "--db", str(db), "-q", "--json",
            *extra]
    wall, report = kidiom(bin_, args, env)
    return wall, report["corpora"][0]


def listing(bin_, db, env):
    return kidiom(bin_, ["catalog", "list", "--json", "--all", "--db", str(db)], env)[1]


def shard_figures(c):
    s = c.get("shards") or {}
    n = max(1, s.get("shards", 0))
    return {"shards": s.get("shards", 0), "items": s.get("items", 0), "nodes": s.get("nodes", []),
            "connect_seconds": round(s.get("connect_seconds", 0.0), 3), "seconds": round(s.get("seconds", 0.0), 3),
            "node_seconds_per_shard": round(s.get("node_seconds", 0.0) / n, 4),
            "work_seconds_per_shard": round(s.get("work_seconds", 0.0) / n, 4),
            "overhead_seconds_per_shard": round(s.get("overhead_seconds", 0.0) / n, 4),
            "queued_seconds_per_shard": round(s.get("queued_seconds", 0.0) / n, 4),
            "retried": s.get("retried", 0)}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--manifest", default="corpora/fla.toml")
    p.add_argument("--bin", default=str(ROOT / "target/release/kidiom"))
    p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 2)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bin_ = Path(a.bin)
    tmp = Path(tempfile.mkdtemp(prefix="kidiom-ray-mine-"))
    env = {**os.environ, "KIDIOM_PYTHON": sys.executable}
    env.pop("RAY_ADDRESS", None)
    import ray
    result = {"date": datetime.date.today().isoformat(), "manifest": a.manifest, "runs": a.runs,
              "machine": {"cpus": os.cpu_count(), "ray": ray.__version__, "python": platform.python_version(),
                          "head_cpus": a.num_cpus, "kidiom_bytes": bin_.stat().st_size,
                          "load_before": os.getloadavg()[0]},
              "modes": []}
    head = fleet.LocalHead(num_cpus=a.num_cpus, object_store_mb=400)
    try:
        ray_env = {**env, "RAY_ADDRESS": head.address}
        cache = Path(tempfile.gettempdir(), f"kidiom-fleetcache-{os.getuid()}")
        for mode in ("usage", "history"):
            local_db, ray_db = tmp / f"{mode}-local.sqlite", tmp / f"{mode}-ray.sqlite"
            local = [mine(bin_, mode, a.manifest, local_db, env) for _ in range(a.runs)]
            shutil.rmtree(cache, ignore_errors=True)
            cold = mine(bin_, mode, a.manifest, ray_db, ray_env, ["--executor", "ray"])
            warm = [mine(bin_, mode, a.manifest, ray_db, ray_env, ["--executor", "ray"]) for _ in range(a.runs)]
            identical = listing(bin_, local_db, env) == listing(bin_, ray_db, env)
            med = sorted(warm, key=lambda r: r[0])[len(warm) // 2]
            items = local[0][1].get("commits" if mode == "history" else "files", 0)
            lmed = sorted(local, key=lambda r: r[0])[len(local) // 2]
            row = {"mode": mode, "corpus": local[0][1]["name"], "items": items,
                   # the corpus's own part of the run (listing, reading, mining; not aggregating,
                   # generalizing or writing), and for history the file versions parsed
                   "local_corpus_seconds": round(lmed[1]["seconds"], 3),
                   "ray_corpus_seconds": round(med[1]["seconds"], 3),
                   "local_parsed": lmed[1].get("parsed_blobs", lmed[1].get("parsed")),
                   "ray_parsed": med[1].get("parsed_blobs", med[1].get("parsed")),
                   "local_seconds": [round(w, 3) for w, _ in local],
                   "local_median": round(statistics.median(w for w, _ in local), 3),
                   "ray_cold_seconds": round(cold[0], 3), "ray_cold": shard_figures(cold[1]),
                   "ray_seconds": [round(w, 3) for w, _ in warm],
                   "ray_median": round(statistics.median(w for w, _ in warm), 3),
                   "ray": shard_figures(med[1]), "identical": identical}
            result["modes"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        head.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["machine"]["load_after"] = os.getloadavg()[0]
    (out / "ray_mine.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'mode':8} {'local':>8} {'ray':>8} {'cold':>8} {'shards':>7} {'items':>6} {'connect':>8} "
          f"{'node/sh':>8} {'work/sh':>8} {'ovh/sh':>8} same")
    for r in result["modes"]:
        s = r["ray"]
        print(f"{r['mode']:8} {r['local_median']:8.2f} {r['ray_median']:8.2f} {r['ray_cold_seconds']:8.2f} "
              f"{s['shards']:7} {s['items']:6} {s['connect_seconds']:8.2f} {s['node_seconds_per_shard']:8.3f} "
              f"{s['work_seconds_per_shard']:8.3f} {s['overhead_seconds_per_shard']:8.3f} {r['identical']}")
    if not all(r["identical"] for r in result["modes"]):
        sys.exit("the catalogs differ")


if __name__ == "__main__":
    main(sys.argv[1:])
