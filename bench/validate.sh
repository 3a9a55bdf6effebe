#!/usr/bin/env bash
# Times `kidiom validate` of one Triton candidate on a CPU: the prefill with every `tl.dot` made
# explicit-precision IEEE (a precision pattern mined from a two-line corpus and applied with
# `kidiom apply`), through syntax + static (two ahead-of-time sm_90 compiles) + correctness (the
# CPU shape matrix under the TF32-faithful interpreter, several seeds, the error-vs-T curve against
# the baseline, the prefill/decode consistency). Budget: 60 s on the 2-core development machine.
#
#   bench/validate.sh [SEEDS=3]
#
# Needs .venv (scripts/setup-python.sh). Uses target/release/kidiom when present, else builds the
# debug binary (the Rust side is negligible: the time is the harness's). Prints the verdict, the
# per-gate times and the static figures before/after; exits 1 when over budget or not needs-gpu.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seeds="${1:-3}"
budget=60
kidiom="$root/target/release/kidiom"
if [[ ! -x "$kidiom" ]]; then
  cargo build -q --bin kidiom
  kidiom="$root/target/debug/kidiom"
fi
py="${KIDIOM_PYTHON:-$root/.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r kernels "$work/kernels"
find "$work/kernels" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$work/up"
cat >"$work/up/up.py" <<'PY'
import triton
import triton.language as tl


@triton.jit
def up(x, y, BT: tl.constexpr):
    a = tl.load(x + tl.arange(0, BT))
    b = tl.dot(a, a, input_precision="ieee")
    c = tl.dot(a, b, input_precision="ieee")
    tl.store(y + tl.arange(0, BT), tl.dot(b, c))
PY
cd "$work"
"$kidiom" mine up --name up --db catalog.sqlite -q >/dev/null
"$kidiom" apply kernels/kda/prefill.py --pattern py-keyword-tl-dot-input-precision --value '"ieee"' \
  --db catalog.sqlite -q >/dev/null
start=$(date +%s.%N)
KIDIOM_PYTHON="$py" "$kidiom" validate --pending --device cpu --seeds "$seeds" --db catalog.sqlite --json \
  >report.json || true
end=$(date +%s.%N)
"$py" - report.json "$(echo "$end - $start" | bc)" "$budget" "$(nproc)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall, budget, cores = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
e = r["candidates"][0]
print(f"candidate   {e['candidate']}")
print(f"verdict     {e['verdict']['kind']}  ({e['verdict']['reason'][:160]})")
print(f"seeds       {e['seeds']}")
for g in e["gates"]:
    print(f"gate {g['gate']:<12} {g['status']:<8} {g['seconds']:6.1f} s")
st = next((g for g in e["gates"] if g["gate"] == "static"), None)
if st and st.get("before"):
    for side in ("before", "after"):
        m = st[side]
        top = ", ".join(f"{k} {v}" for k, v in sorted(m["by_class"].items(), key=lambda kv: -kv[1])[:6])
        print(f"static {side:<6} regs {m['registers']}, spills {m['spill_store_bytes']}/{m['spill_load_bytes']} B, "
              f"smem {m['shared_static_bytes']}+{m['shared_dynamic_bytes']} B, {m['instructions']} instr ({top})")
cr = next((g for g in e["gates"] if g["gate"] == "correctness"), None)
if cr and cr.get("before"):
    pts = zip(cr["before"]["curve"], cr["after"]["curve"])
    print("curve       " + ", ".join(f"T={b['T']}: {b['rel_l2']:.2e} -> {a['rel_l2']:.2e}" for b, a in pts))
print(f"total       {wall:.1f} s wall ({e['seconds']:.1f} s in the validator) on {cores} cores; budget {budget:.0f} s")
ok = e["verdict"]["kind"] == "needs-gpu" and wall <= budget
print("result      " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
