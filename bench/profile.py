"""The work profile's cost per kernel, and the prediction table of a catalog's candidates.

For each GPU kernel: `kidiom profile --kernel K --json`, timed `--runs` times (the profile runs in
every validation's static gate), beside the harness's `check --quick` of the same kernel in the same
run (what a validation already pays for correctness). Then, from a catalog that `kidiom run` filled
(`--db`), every validated candidate's predicted speedup (a roofline over its CPU work profile against
its baseline's: a prediction, not a measurement), its verdict and what bounds it.

    .venv/bin/python bench/profile.py --kidiom target/release/kidiom --db .kidiom/catalog.sqlite \\
        --out bench/runs/2026-12-01-vm/profile.json
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

KERNELS = ["kda.decode", "kda.prefill", "kda_cuda.decode"]


def timed(cmd, env=None):
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t, r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kidiom", default="target/release/kidiom")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--db", help="a catalog whose candidates were validated (kidiom run)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    kernels = []
    for k in KERNELS:
        secs, prof = [], None
        for _ in range(a.runs):
            s, r = timed([a.kidiom, "profile", "--kernel", k, "--json", "--python", a.python])
            secs.append(s)
            try:
                prof = json.loads(r.stdout)["profiles"][0]
            except (ValueError, KeyError, IndexError):
                prof = {"error": (r.stderr or r.stdout)[-400:]}
        check_s, _ = timed([a.python, "-m", "kernels.harness", "check", "--kernel", k, "--quick", "--json"])
        entry = {"kernel": k, "seconds": secs, "median_s": statistics.median(secs), "check_quick_s": check_s}
        if "totals" in prof:
            entry.update(totals=prof["totals"], traffic_ratio=prof["traffic_ratio"], floor=prof["floor"],
                         predicted=prof.get("predicted"), counted=prof.get("counted"))
        else:
            entry["error"] = prof.get("error") or "no profile"
        kernels.append(entry)
        print(f"{k}: profile {entry['median_s']:.1f} s (check --quick {check_s:.1f} s)", file=sys.stderr)
    candidates = []
    if a.db:
        r = subprocess.run([a.kidiom, "review", "--json", "--db", a.db], capture_output=True, text=True)
        for c in json.loads(r.stdout or "[]"):
            ev = c.get("evidence") or {}
            p = ev.get("prediction")
            if not p:
                continue
            candidates.append({"id": c["id"], "pattern": c["pattern_id"], "verdict": (ev.get("verdict") or {}).get("kind"),
                               "gate": (ev.get("verdict") or {}).get("gate"), "speedup": p["speedup"],
                               "bound": p["bound"], "baseline_us": p["baseline_us"], "candidate_us": p["candidate_us"],
                               "traffic_ratio": p["traffic_ratio"], "device": p["device"]})
        candidates.sort(key=lambda c: -c["speedup"])
    out = {"kernels": kernels, "candidates": candidates, "runs": a.runs,
           "machine": {"cores": __import__("os").cpu_count()}}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
