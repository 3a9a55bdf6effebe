#!/usr/bin/env bash
# One command for a GPU machine: every kernel's correctness check (native, full GPU shape matrix,
# error-vs-T curve, prefill/decode consistency); then kidiom's own GPU gate (SPEC section 8, "The
# GPU gate is owned by Rust"): per kernel, the baseline's launch spec for the bench shape
# (`kernels.harness spec --sets 3`), `kidiom gpu-gate` of the baseline against itself (a speedup
# of 1 within the noise; median, p10/p90, noise floor, bandwidth against the floor, the work
# profile's prediction beside it), then one planted device-side cheat (the decode's spec with the
# grid's y halved: half the blocks skipped) that the gate must reject; then `kidiom validate` on
# the catalog's pending rewrite candidates (timed by the same gate) and its verdict table. FLA's
# KDA is timed beside ours by the harness's bench only when an fla-core wheel sits under .whl/.
# Designed to finish within 5 minutes on one H200 (plus the candidates' validation).
#
#   scripts/device-check.sh                 # JSON logs under $OUT (or /tmp/kidiom-device-check)
#   PYTHON=/path/to/python scripts/device-check.sh
#   KIDIOM=/path/to/kidiom scripts/device-check.sh   # the binary (this machine needs no Rust toolchain)
#
# The GPU machine has no Rust toolchain and takes 64 MiB of carried files: scripts/device-prep.sh
# (here) builds the release binary and strips it into .device/kidiom (about 29 MB, from 34 MB),
# with the catalog to validate; carry `.device` (and `.kidiom` for the catalog).
#
# Python: the first of $PYTHON, python3, /opt/torch/.venv/bin/python3, .venv/bin/python that
# imports torch (with CUDA), triton and numpy. Wheels under .whl/ (e.g. fla_core-*.whl,
# nvidia_cuda_nvrtc_cu12-*.whl) are installed offline into a private directory first.
# Exit status: 0 when every check passed, the gate measured every kernel and rejected the planted
# cheat (or when this machine has no NVIDIA GPU at all: nothing to check, said so); 1 otherwise.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-/tmp/kidiom-device-check}"
mkdir -p "$out"
start=$(date +%s)

# No NVIDIA driver at all: nothing here can be checked; say so and stop cleanly.
if ! command -v nvidia-smi >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
  echo "device-check: no NVIDIA GPU on this machine (no nvidia-smi, no libcuda.so); nothing to check."
  echo "              Run it on a GPU machine; the CPU checks are cargo test and kidiom validate --device cpu."
  exit 0
fi

py=""
for c in ${PYTHON:-} python3 /opt/torch/.venv/bin/python3 "$root/.venv/bin/python"; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c "import torch, triton, numpy; assert torch.cuda.is_available()" 2>/dev/null; then
    py="$c"; break
  fi
done
if [[ -z "$py" ]]; then
  echo "device-check: no python with torch (CUDA), triton and numpy; on a machine with PyPI access run"
  echo "              scripts/setup-python.sh and install a CUDA torch into .venv"
  exit 1
fi

if compgen -G ".whl/*.whl" >/dev/null; then
  site=/tmp/kidiom-site
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" || echo "device-check: installing .whl/ failed, going on without"
fi
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1

echo "== device-check: $("$py" -c 'import torch, triton; print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| triton", triton.__version__)')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

against=()
if "$py" -c "import fla.ops.kda" 2>/dev/null; then
  against=(--against fla)
  echo "== fla found: benches also time FLA's KDA"
fi

kernels=(kda.decode kda.prefill kda_cuda.decode)
status=0
for k in "${kernels[@]}"; do
  echo "== check $k"
  timeout 170 "$py" -m kernels.harness check --kernel "$k" --seeds 2 --json >"$out/check-$k.json" 2>"$out/check-$k.err"
  rc=$?; [[ $rc -ne 0 ]] && status=1 && echo "   check $k: exit $rc (see $out/check-$k.json / .err)"
done
# FLA's KDA beside ours (the harness's bench: the baseline only, no candidate) when FLA is here.
if [[ ${#against[@]} -gt 0 ]]; then
  for k in "${kernels[@]}"; do
    echo "== bench $k against FLA"
    timeout 60 "$py" -m kernels.harness bench --kernel "$k" --iters 20 "${against[@]}" --json >"$out/bench-$k.json" \
      2>"$out/bench-$k.err" || echo "   bench $k against FLA: no figures (see $out/bench-$k.err)"
  done
fi

# The binary: KIDIOM, else target/release/kidiom, else target/debug/kidiom, else a cargo build.
kid="${KIDIOM:-}"
for c in "$root/.device/kidiom" "$root/target/release/kidiom" "$root/target/debug/kidiom"; do
  [[ -z "$kid" && -x "$c" ]] && kid="$c"
done
if [[ -z "$kid" ]] && command -v cargo >/dev/null 2>&1; then
  timeout 300 cargo build -q --release --bin kidiom && kid="$root/target/release/kidiom"
fi
# The work profiles (counted on this machine's CPU, in the check's sandbox) and their roofline
# predictions, printed beside what the GPU measured: the prediction's error, known at once.
if [[ -n "$kid" ]]; then
  for k in "${kernels[@]}"; do
    echo "== profile $k"
    timeout 120 "$kid" profile --kernel "$k" --python "$py" --json >"$out/profile-$k.json" 2>"$out/profile-$k.err" \
      || echo "   profile $k: no profile (see $out/profile-$k.err)"
  done
fi

# kidiom's own GPU gate. Per kernel: the baseline's spec for the bench shape (3 input sets and
# their float64 expected values, made by the harness without a GPU), then `kidiom gpu-gate` of
# the baseline against itself: every call checked on the host, the timing a speedup of 1 within
# the noise. Then the planted cheat: the decode's own cubin under a launch.json whose grid's y is
# halved (the ELF check cannot see a grid; half the blocks never run, their outputs stay NaN):
# it must be rejected, exit 1.
if [[ -z "$kid" ]]; then
  echo "== gpu-gate: no kidiom binary (set KIDIOM, or run scripts/device-prep.sh and carry .device); skipping"
  status=1
else
  for k in "${kernels[@]}"; do
    echo "== gpu-gate $k (baseline against itself)"
    rm -rf "$out/spec-$k"
    if ! timeout 120 "$py" -m kernels.harness spec --kernel "$k" --out "$out/spec-$k" --sets 3 --shapes bench \
        >"$out/spec-$k.json" 2>"$out/spec-$k.err"; then
      status=1; echo "   spec $k failed (see $out/spec-$k.json / .err)"; continue
    fi
    mapfile -t g < <("$py" - "$out/spec-$k.json" "$k" <<'PY'
import json, sys
from kernels.harness.manifest import find_manifest
spec = json.load(open(sys.argv[1]))["specs"][0]
tol = find_manifest(sys.argv[2]).raw["tolerance"]
print(spec["dir"]); print(tol["rel_l2"]); print(tol["max_abs_rel"]); print(spec.get("floor_bytes") or "")
PY
)
    dir="${g[0]:-}"; floor=()
    [[ -n "${g[3]:-}" ]] && floor=(--floor-bytes "${g[3]}")
    timeout 120 "$kid" gpu-gate --baseline "$dir" --candidate "$dir" --rel-l2 "${g[1]:-0}" --max-abs-rel "${g[2]:-0}" \
      --rounds 20 "${floor[@]}" >"$out/gate-$k.json" 2>"$out/gate-$k.err"
    rc=$?; [[ $rc -ne 0 ]] && status=1 && echo "   gpu-gate $k: exit $rc (see $out/gate-$k.json / .err)"
    if [[ "$k" == kda.decode && -n "$dir" ]]; then
      echo "== gpu-gate planted cheat: kda.decode with the grid's y halved (must be rejected)"
      cheat="$out/spec-cheat"; rm -rf "$cheat"; mkdir -p "$cheat"
      cp "$dir/kernel.cubin" "$cheat/"
      "$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); s["grid"][1] //= 2; json.dump(s, open(sys.argv[2], "w"))' \
        "$dir/launch.json" "$cheat/launch.json"
      timeout 120 "$kid" gpu-gate --baseline "$dir" --candidate "$cheat" --rel-l2 "${g[1]:-0}" \
        --max-abs-rel "${g[2]:-0}" --rounds 5 >"$out/gate-cheat.json" 2>"$out/gate-cheat.err"
      rc=$?
      if [[ $rc -eq 1 ]]; then
        echo "   rejected: $("$py" -c 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]; print(v.get("what"), "| call", v.get("call"))' "$out/gate-cheat.json")"
      else
        status=1; echo "   NOT REJECTED: exit $rc (see $out/gate-cheat.json / .err)"
      fi
    fi
  done
fi

"$py" - "$out" "${kernels[@]}" <<'PY'
import json, sys
from pathlib import Path
out, kernels = Path(sys.argv[1]), sys.argv[2:]
def load(p):
    try:
        return json.loads(p.read_text())
    except Exception as e:
        return {"status": "error", "error": f"no JSON ({e})"}
print()
print("correctness (the harness's check on this GPU)")
print(f"{'kernel':<17} {'check':<8} {'worst rel_l2':>12} {'consist.':>9} {'fla us':>8}")
fmt = lambda x, f: "-" if x is None else format(x, f)
for k in kernels:
    c, b = load(out / f"check-{k}.json"), load(out / f"bench-{k}.json")
    worst = max((o["rel_l2"] or 0 for case in c.get("cases", []) for o in case["outputs"].values()
                 if isinstance(o.get("rel_l2"), float)), default=float("nan"))
    cons = c.get("consistency", {}).get("o_rel_l2")
    fla = b.get("results", {}).get("against", {}).get("median_us")
    print(f"{k:<17} {c.get('status','?'):<8} {worst:>12.2e} {fmt(cons, '.1e'):>9} {fmt(fla, '.1f'):>8}")
    for f in (c.get("failures") or [])[:3] + ([c["error"]] if "error" in c else []):
        print(f"   {f}")
    if c.get("curve"):
        print("   error vs T: " + ", ".join(f"T={p['T']}: {p['rel_l2']:.2e}" for p in c["curve"]))
print()
print("kidiom's GPU gate, the baseline against itself at the bench shape (every call checked on the host)")
print(f"{'kernel':<17} {'verdict':<9} {'median us':>10} {'p10-p90 us':>15} {'noise':>6} {'speedup':>8} "
      f"{'GB/s':>7} {'%peak':>6} {'floor MB':>9} {'pred us':>8} {'meas/pred':>9}")
for k in kernels:
    g = load(out / f"gate-{k}.json")
    v = g.get("verdict") or {}
    spec = (load(out / f"spec-{k}.json").get("specs") or [{}])[0]
    prof = (load(out / f"profile-{k}.json").get("profiles") or [{}])[0]
    pred = (prof.get("predicted") or {}).get("us")
    r = v.get("candidate") or {}
    med = r.get("median_us")
    floor = spec.get("floor_bytes")
    print(f"{k:<17} {v.get('kind', g.get('status', '?')):<9} {fmt(med, '.1f'):>10} "
          f"{(fmt(r.get('p10_us'), '.1f') + '-' + fmt(r.get('p90_us'), '.1f')) if r else '-':>15} "
          f"{fmt(v.get('noise_floor'), '.1%'):>6} {fmt(v.get('speedup'), '.3f'):>8} "
          f"{fmt(r.get('achieved_gbps'), '.0f'):>7} {fmt(100 * r['fraction_of_peak_bw'] if r.get('fraction_of_peak_bw') is not None else None, '.1f'):>6} "
          f"{fmt(floor / 1e6 if floor else None, '.1f'):>9} {fmt(pred, '.1f'):>8} "
          f"{fmt(med / pred if pred and med else None, '.2f'):>9}")
    sc = v.get("second_clock")
    if sc:
        print(f"   the two clocks: events {fmt(v['baseline'].get('median_us'), '.1f')} / {fmt(med, '.1f')} us, "
              f"CUPTI kernel records {sc['baseline_median_us']:.1f} / {sc['candidate_median_us']:.1f} us "
              f"(baseline / candidate), speedup {fmt(v.get('speedup'), '.3f')} vs {sc['speedup']:.3f}")
    for why in [v.get("reason"), v.get("what")] + v.get("flags", []) + g.get("notes", []) + ([g["error"]] if "error" in g else []):
        if why:
            print(f"   {why}")
    if g.get("cubins"):
        print(f"   cubin {g['cubins'].get('baseline', '?')[:16]}, seed {g.get('seed')}, {g.get('calls')} calls on {g.get('device')}")
    if prof.get("traffic_ratio") is not None:
        print(f"   profile (prediction, {(prof.get('predicted') or {}).get('bound', '?')}-bound): traffic ratio "
              f"{prof['traffic_ratio']:.2f}, re-read {prof['totals']['reread_bytes'] / 1e6:.1f} MB, "
              f"special functions {prof['totals']['special_calls'] / 1e6:.1f} M")
cheat = load(out / "gate-cheat.json").get("verdict") or {}
print(f"\nplanted cheat (decode, grid y halved): {cheat.get('kind', 'not run')}"
      + (f" at {cheat.get('variant')} call {cheat.get('call')}: {cheat.get('tensor') or ''} {cheat.get('what')}" if cheat.get("kind") == "rejected" else ""))
PY

# Every pending rewrite candidate in the catalog through `kidiom validate` on this GPU: the
# correctness gate natively over the GPU shape matrix, then the speed gate, kidiom's own GPU gate
# (the candidate's launch spec and cubin from its sandboxed compile, `kidiom gpu-gate` with a
# deadline; Triton and CUDA C++ kernels alike). The verdicts (accepted / rejected with the gate / needs-gpu / error) are stored in the catalog and printed.
# KIDIOM_DB names the catalog (default .kidiom/catalog.sqlite); KIDIOM names the binary (default
# target/release/kidiom, else target/debug/kidiom, else a cargo build when cargo is here).
db="${KIDIOM_DB:-$root/.kidiom/catalog.sqlite}"
if [[ ! -f "$db" ]]; then
  echo "== validate: no catalog at $db; skipping (run kidiom mine and kidiom apply first)"
elif [[ -z "$kid" ]]; then
  echo "== validate: no kidiom binary and no cargo; skipping"
else
  # Pending candidates, but of a site search only its choice and its all-sites variants (the rest
  # of its front waits for `kidiom validate ID`): the choice's speed against the baseline and
  # against rewriting every site is what a GPU adds to the search.
  "$kid" review --json --db "$db" >"$out/candidates.json" 2>/dev/null
  mapfile -t ids < <("$py" - "$out/candidates.json" <<'PY'
import json, sys
try:
    cands = json.load(open(sys.argv[1]))
except Exception:
    cands = []
# of each (pattern, file): a search's choice and all-sites variants where it was searched, else the
# latest proposal (an earlier run's are superseded)
roles = lambda c: (c.get("provenance") or {}).get("search", {}).get("roles") or []
latest, searched = {}, set()
for c in cands:
    k = (c["pattern_id"], c["path"])
    latest[k] = max(latest.get(k, ""), c.get("created_at", ""))
    if roles(c):
        searched.add(k)
for c in cands:
    k, r = (c["pattern_id"], c["path"]), roles(c)
    pending = c.get("status") in ("proposed", "applied") and (c.get("evidence") or {}).get("verdict", {}).get("kind") in (None, "needs-gpu", "error")
    wanted = ("chosen" in r or "all-sites" in r) if k in searched else c.get("created_at", "") == latest[k]
    if pending and wanted:
        print(c["id"])
PY
)
  echo "== validate: ${#ids[@]} pending candidates in $db"
  if [[ ${#ids[@]} -gt 0 ]]; then
    timeout "${VALIDATE_TIMEOUT:-900}" "$kid" validate "${ids[@]}" --device cuda --python "$py" --seeds 2 \
      --timeout "${VALIDATE_CANDIDATE_TIMEOUT:-300}" --db "$db" 2>"$out/validate.err" | tee "$out/validate.txt"
    rc=${PIPESTATUS[0]}
    # exit 1 is a verdict (a rejection, an error), not a broken run
    [[ $rc -ne 0 && $rc -ne 1 ]] && status=1 && echo "   validate: exit $rc (see $out/validate.err)"
    # the all-sites variants the static gate predicted slower: timed anyway, to check the prediction
    mapfile -t slow < <("$py" - "$out/candidates.json" <<'PY'
import json, sys
try:
    cands = json.load(open(sys.argv[1]))
except Exception:
    cands = []
for c in cands:
    r = (c.get("provenance") or {}).get("search", {}).get("roles") or []
    v = (c.get("evidence") or {}).get("verdict", {})
    if "all-sites" in r and v.get("kind") == "rejected" and v.get("gate") == "static":
        print(c["id"])
PY
)
    if [[ ${#slow[@]} -gt 0 ]]; then
      echo "== validate: ${#slow[@]} all-sites variants predicted slower, timed with --allow-static-regression"
      timeout "${VALIDATE_TIMEOUT:-900}" "$kid" validate "${slow[@]}" --allow-static-regression --device cuda \
        --python "$py" --seeds 1 --timeout "${VALIDATE_CANDIDATE_TIMEOUT:-300}" --db "$db" 2>>"$out/validate.err" \
        | tee -a "$out/validate.txt"
    fi
    "$kid" review --json --db "$db" >"$out/candidates.json" 2>/dev/null
    "$py" - "$out/candidates.json" <<'PY'
import json, sys
try:
    cands = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
rows = []
for c in cands:
    s = (c.get("provenance") or {}).get("search") or {}
    if not s.get("roles") or s.get("kind") == "memory-roles":
        continue
    ev = c.get("evidence") or {}
    sp = next((g for g in ev.get("gates", []) if g.get("gate") == "speed"), {})
    m, before, after = sp.get("metrics") or {}, sp.get("before") or {}, sp.get("after") or {}
    rows.append((",".join(s["roles"]), s.get("assignment", ""), ev.get("verdict", {}).get("kind", "-"),
                 before.get("median_us"), after.get("median_us"), m.get("speedup"),
                 (ev.get("prediction") or {}).get("speedup")))
if rows:
    print("\nsite search on the GPU: the choice against the baseline and the all-sites variants")
    print(f"{'roles':<24} {'variant':<40} {'verdict':<10} {'base us':>9} {'cand us':>9} {'speedup':>8} {'predicted':>9}")
    f = lambda x, p: "-" if x is None else format(x, p)
    for r in rows:
        print(f"{r[0]:<24} {r[1][:40]:<40} {r[2]:<10} {f(r[3], '.1f'):>9} {f(r[4], '.1f'):>9} {f(r[5], '.3f'):>8} {f(r[6], '.3f'):>9}")
# every timed candidate: the speedup measured here beside the one predicted from its CPU profile
timed = []
for c in cands:
    ev = c.get("evidence") or {}
    sp = next((g for g in ev.get("gates", []) if g.get("gate") == "speed"), {})
    meas, pred = (sp.get("metrics") or {}).get("speedup"), (ev.get("prediction") or {}).get("speedup")
    if isinstance(meas, (int, float)) and pred is not None:
        timed.append((c["id"], meas, pred))
if timed:
    print("\nmeasured against predicted speedup (the roofline over CPU work profiles)")
    print(f"{'candidate':<60} {'measured':>9} {'predicted':>9} {'ratio':>6}")
    for cid, meas, pred in timed:
        print(f"{cid[:60]:<60} {meas:>9.3f} {pred:>9.3f} {meas / pred if pred else float('nan'):>6.2f}")
PY
  fi
fi
echo "== device-check: $(( $(date +%s) - start )) s, logs in $out"
exit $status
