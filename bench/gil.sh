#!/usr/bin/env bash
# The GIL release on our KV-transfer module, measured on this machine.
#
# Mines the corpora that hold the idiom (the SGLang sdist; Mooncake where its
# clone is cached, see corpora/mooncake.toml) into a scratch catalog, applies
# the mined `py::gil_scoped_release` pattern to kernels/kv_transfer/ with
# `kidiom apply`, and runs the harness's host bench, the service bench
# (docs/CONTRACTS.md): requests/s and request latency of a service whose
# requests each need a KV transfer before their decode steps, with the
# scheduler's steps/s and the transfers' GB/s beside; each window in a
# process of its own, baseline and candidate interleaved over ROUNDS rounds.
# Writes bench/runs/<date>-<host>/gil.json and prints the table.
#
#   bench/gil.sh                 # ROUNDS=9 by default
#   ROUNDS=15 bench/gil.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup-python.sh >&2
cargo build --release --locked --quiet
kidiom="$root/target/release/kidiom"
py="$root/.venv/bin/python"
run="${KIDIOM_BENCH_RUN:-bench/runs/$(date +%F)-vm}"
mkdir -p "$run"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

corpora=(corpora/sglang.toml)
if [[ -d "${HOME}/.cache/kidiom/git/kvcache-ai+Mooncake" ]]; then
  corpora+=(corpora/mooncake.toml)
fi
"$kidiom" mine "${corpora[@]}" --db "$tmp/catalog.sqlite" -q >&2
"$kidiom" apply kernels/kv_transfer/kv_transfer.cpp --pattern cpp-guard-binding-fn-py-gil-scoped-release \
  --db "$tmp/catalog.sqlite" --json > "$tmp/apply.json"
"$py" - "$tmp/apply.json" "$tmp/kv_transfer.patch" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["candidates"]
if len(c) != 1:
    sys.exit(f"expected one candidate on kernels/kv_transfer/kv_transfer.cpp, got {len(c)}")
open(sys.argv[2], "w").write(c[0]["diff"])
print(f"candidate {c[0]['id']}: {c[0]['sites']} sites", file=sys.stderr)
EOF
mkdir -p "$tmp/cand"
cp -r kernels "$tmp/cand/"
git -C "$tmp/cand" init -q && git -C "$tmp/cand" apply "$tmp/kv_transfer.patch"

"$py" -m kernels.harness bench --kernel kv_transfer --source "$tmp/cand/kernels/kv_transfer/kv_transfer.cpp" \
  --rounds "${ROUNDS:-9}" --timeout 900 > "$run/gil.json" || true
"$py" - "$run/gil.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
if j.get("status") != "ok":
    sys.exit(f"bench: {j.get('status')}: {j.get('error') or j.get('reason') or j.get('failures')}")
r, pct = j["results"], lambda x: f"{100 * x:.1f}%"
print(f"{'variant':<10} {'requests/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'steps/s alone':>14} {'with service':>13} "
      f"{'gap':>6} {'GB/s':>6}")
for k in ("baseline", "candidate"):
    v = r[k]
    print(f"{k:<10} {v['requests_per_s']:>11.1f} {v['p50_us'] / 1e3:>7.1f} {v['p99_us'] / 1e3:>7.1f} "
          f"{v['steps_per_s_alone']:>14.0f} {v['steps_per_s_loaded']:>13.0f} {pct(v['gap']):>6} {v['transfer_gbps']:>6.2f}")
print(f"rounds {j['rounds']}, requests/s {j['speedup']:.2f}x, noise floor {pct(j['noise_floor'])}, significant "
      f"{j['significant']}, p99 {j['latency_ratio']:.2f}x, memcpy peak {j['floor']['peak_gbps']:.1f} GB/s, "
      f"flags {j['flags'] or 'none'}")
EOF
