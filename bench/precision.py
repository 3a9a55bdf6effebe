"""The precision variants of the decode's state (issue #27), one row each: worst error against float64
and against the simulated reference (one step, CPU shapes), the drift of the state and of o against
float64 at 1, 64, 1024 and 4096 steps (variant; fp32 baseline at 4096), the step where the variant
first exceeds its budget, bytes per step and the verdict.

    .venv/bin/python bench/precision.py [--steps 4096] [--seed 0] [--kernels a,b] [--json DIR]

Each variant runs `python -m kernels.harness precision` (docs/HARNESS.md, "precision"); --json DIR
keeps the raw objects, one file per variant (a bench run keeps them in
bench/runs/<date>-precision/precision/, where bench/readme.py makes its README's table from them).
The fp32 baseline's drift (from each variant's own stored initial state) is cached in
$TMPDIR/kidiom-precision/: clear it to time a first run.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernels", help="comma-separated variant names (default: every variant manifest)")
    p.add_argument("--json", help="directory for the raw JSON objects")
    a = p.parse_args()
    from kernels.harness.manifest import all_manifests
    names = a.kernels.split(",") if a.kernels else sorted(n for n, m in all_manifests().items()
                                                            if m.raw.get("variant_of"))
    rows = []
    for n in names:
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "kernels.harness", "precision", "--kernel", n, "--steps",
                            str(a.steps), "--seed", str(a.seed)], cwd=ROOT, capture_output=True, text=True)
        out = json.loads(r.stdout)
        if a.json:
            Path(a.json).mkdir(parents=True, exist_ok=True)
            (Path(a.json) / f"{n}.json").write_text(json.dumps(out, indent=1))
        if out.get("status") not in ("ok", "rejected"):
            print(f"{n}: {out.get('status')}: {out.get('error') or out.get('reason')}", file=sys.stderr)
            continue
        rows.append((n, out, time.time() - t0))
    at = [t for t in (1, 64, 1024, 4096) if t <= a.steps]
    head = (f"{'variant':36s} {'verdict':14s} {'f64 o':>8s} {'f64 S':>8s} {'sim o':>8s} {'units':>5s} "
            + " ".join(f"{'S@' + str(t):>8s}" for t in at) + " " + " ".join(f"{'o@' + str(t):>8s}" for t in at)
            + f" {'fp32 S@' + str(at[-1]):>10s} {'cross':>6s} {'bytes/step':>10s} {'fp32':>10s} {'speedup':>7s} {'s':>5s}")
    print(f"precision variants, seed {a.seed}, drift {a.steps} steps (state and o rel_l2 against float64, "
          "long-memory inputs); one step: worst over the CPU shapes")
    print(head)
    for n, out, secs in rows:
        w, d, b = out["worst"], out["drift"], out["bytes_per_step"]
        v = lambda t, k: d["at"][str(t)]["variant"][k]   # noqa: E731
        cross = d["crossing"].get("variant")
        print(f"{n:36s} {out['verdict']:14s} {w['vs_float64']['o_rel_l2']:8.1e} {w['vs_float64']['state_rel_l2']:8.1e} "
              f"{w['vs_simulated']['o_rel_l2']:8.1e} {w['vs_simulated']['state_units']:5.2f} "
              + " ".join(f"{v(t, 'state'):8.1e}" for t in at) + " " + " ".join(f"{v(t, 'o'):8.1e}" for t in at)
              + f" {d['at'][str(at[-1])]['baseline']['state']:10.1e} {str(cross if cross else '-'):>6s} "
              f"{b['variant']:10.3g} {b['baseline']:10.3g} {b['baseline'] / b['variant']:7.2f} {secs:5.0f}")
    print("budgets (o_rel_l2 / state_rel_l2 over budget.steps): " + "; ".join(
        f"{n}: {out['variant']['budget']['o_rel_l2']:g} / {out['variant']['budget']['state_rel_l2']:g}" for n, out, _ in rows))


if __name__ == "__main__":
    main()
