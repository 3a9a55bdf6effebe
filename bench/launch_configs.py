"""Launch configurations on our Triton kernels, as the device model predicts them (issue #40).

    python bench/launch_configs.py RUN_DIR      writes RUN_DIR/launch-configs.json

For `kda.decode` at N = 1, 8 and 64 sequences (H = 16, HV = 32, K = V = 128) and `kda.prefill` at its
bench shape, each launched with num_warps 1, 2, 4 (ours) and 8 (the launcher's kernel call edited in a
copy of the source): `kidiom profile --kernel K --source COPY --shape ... --json`, the predicted time,
what decides it, the resident programs per SM and each term. Uses target/release/kidiom, else
target/debug/kidiom (or $KIDIOM).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIDIOM = os.environ.get("KIDIOM") or next(
    (str(p) for p in (ROOT / "target/release/kidiom", ROOT / "target/debug/kidiom") if p.exists()), "kidiom")
# (kernel, source, the kernel call's last line, shapes)
DECODE = ("kda.decode", "kernels/kda/decode.py", "        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,\n",
          [f"N={n},H=16,HV=32,K=128,V=128,S={n}" for n in (1, 8, 64)])
PREFILL = ("kda.prefill", "kernels/kda/prefill.py", None, [None])


def call_line(text):
    """The last keyword line of the kernel launch in the launcher (where num_warps goes)."""
    lines = [ln for ln in text.splitlines(keepends=True) if "BV=BV" in ln and ln.strip().endswith(",")]
    if len(lines) != 1:
        sys.exit(f"launch_configs: expected one launch line with BV=BV, found {len(lines)}")
    return lines[0]


def main(run):
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kernel, source, line, shapes in (DECODE, PREFILL):
            text = (ROOT / source).read_text()
            line = line or call_line(text)
            for warps in (1, 2, 4, 8):
                copy = Path(tmp) / str(warps) / Path(source).name
                copy.parent.mkdir(exist_ok=True)
                copy.write_text(text.replace(line, line.rstrip("\n") + f" num_warps={warps},\n", 1))
                for shape in shapes:
                    args = [KIDIOM, "profile", "--kernel", kernel, "--source", str(copy), "--json"]
                    args += ["--shape", shape] if shape else []
                    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
                    if out.returncode != 0:
                        sys.exit(f"launch_configs: {' '.join(args)}: {out.stderr[-2000:]}")
                    p = json.loads(out.stdout)["profiles"][0]
                    rows.append({"kernel": kernel, "num_warps": warps, "shape": p["shape"],
                                 "predicted": p["predicted"], "terms": p.get("prediction_terms", [])})
    (run / "launch-configs.json").write_text(json.dumps({"kidiom": KIDIOM, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__))
