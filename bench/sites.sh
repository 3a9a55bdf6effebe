#!/usr/bin/env bash
# The per-site precision search on our KDA prefill kernel, measured on this machine.
#
# Mines the corpora kidiom.toml lists into a scratch catalog (whatever this machine can reach:
# the FLA and SGLang sdists suffice for the precision idiom and its named constants), then runs
# `kidiom apply --search` for `py-keyword-tl-dot-input-precision` on kernels/kda/prefill.py twice:
# cold (an empty sweep cache) and warm (every variant cached). Beside it, in the same run, the
# CPU validation of the all-sites ieee candidate (what kidiom proposed before the search) with
# `--allow-static-regression`, so the search's cost reads against one candidate's validation.
# Writes bench/runs/<date>-<host>/sites.json and prints the front.
#
#   bench/sites.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup-python.sh >&2
cargo build --release --locked --quiet
kidiom="$root/target/release/kidiom"
py="$root/.venv/bin/python"
export KIDIOM_PYTHON="$py"
run="${KIDIOM_BENCH_RUN:-bench/runs/$(date +%F)-vm}"
mkdir -p "$run"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

mapfile -t corpora < <("$py" -c 'import tomllib; print("\n".join(tomllib.load(open("kidiom.toml", "rb"))["mine"]["corpora"]))')
"$kidiom" mine "${corpora[@]}" --db "$tmp/catalog.sqlite" -q >&2 || true
search() {
  local t0 t1
  t0=$(date +%s.%N)
  # cold means cold: kidiom's sweep cache and Triton's own kernel cache both start empty
  KIDIOM_CACHE="$tmp/cache" TRITON_CACHE_DIR="$tmp/triton" "$kidiom" apply kernels/kda/prefill.py --pattern py-keyword-tl-dot-input-precision \
    --search --db "$tmp/catalog.sqlite" --json -q > "$1"
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}'
}
cold=$(search "$tmp/cold.json")
warm=$(search "$tmp/warm.json")
"$kidiom" apply kernels/kda/prefill.py --pattern py-keyword-tl-dot-input-precision --value '"ieee"' \
  --db "$tmp/catalog.sqlite" --json -q > "$tmp/ieee.json"
id=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["candidates"][0]["id"])' "$tmp/ieee.json")
t0=$(date +%s.%N)
KIDIOM_CACHE="$tmp/cache" "$kidiom" validate "$id" --device cpu --allow-static-regression --db "$tmp/catalog.sqlite" \
  --json -q > "$tmp/validate.json" || true
t1=$(date +%s.%N)
validate=$(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}')

"$py" - "$tmp/cold.json" "$tmp/warm.json" "$cold" "$warm" "$validate" "$run/sites.json" <<'PY'
import json, os, sys
cold, warm = (json.load(open(p))["searches"][0] for p in sys.argv[1:3])
tc, tw, tv = map(float, sys.argv[3:6])
keep = ("values", "fixing", "sites", "lengths", "points", "attribution", "reference_error", "chosen", "why",
        "rule", "measured", "compiled", "cached", "seconds")
out = {"cpus": os.cpu_count(), "cold_seconds": tc, "warm_seconds": tw, "validate_one_seconds": tv,
       "warm_cached": warm["cached"], "warm_measured": warm["measured"], "search": {k: cold[k] for k in keep}}
json.dump(out, open(sys.argv[6], "w"), indent=1)
print(f"search: cold {tc:.1f} s ({cold['measured']} variants, {cold['compiled']} compiled), warm {tw:.1f} s; "
      f"one candidate's CPU validation {tv:.1f} s")
PY
python3 bench/readme.py "$run"
