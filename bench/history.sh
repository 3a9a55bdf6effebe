#!/usr/bin/env bash
# Benchmark: `kidiom mine --history` over FLA's full first-parent history at
# the pinned commit, against the floor of a parse-only pass over the same
# file versions (`--parse-only-floor`: both versions of every modified file
# parsed whole, nothing diffed or cut).
#
# Each run starts from an empty catalog, so nothing is cached. The machine
# is whatever runs it (SPEC §11: 2 cores); other load on it shows in the
# numbers, so the script prints the load average next to them.
#
# Usage: bench/history.sh [MANIFEST]   (default corpora/fla.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="${1:-corpora/fla.toml}"
cargo build --release --quiet
bin=target/release/kidiom
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() { # label, extra args...
  local label="$1"; shift
  local start end
  start=$(date +%s.%N)
  "$bin" mine --history "$manifest" --db "$tmp/$label.sqlite" -q --json "$@" > "$tmp/$label.json"
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
floor=$(run floor --parse-only-floor)
full=$(run full)
python3 - "$tmp/full.json" "$floor" "$full" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); floor, full = float(sys.argv[2]), float(sys.argv[3])
c = d["corpora"][0]; s = d["stats"]
print(f"commits {c['commits']}, file pairs {c['files']}, concrete edits {c['edits']}, rules {d['patterns']}")
print(f"mining {c['seconds']:.1f}s, generalizing {d['generalize_seconds']:.1f}s "
      f"(replay {s['replay_seconds']:.1f}s, opportunities {s['opportunity_seconds']:.1f}s)")
print(f"parse-only floor {floor:.1f}s, full run {full:.1f}s, ratio {full / floor:.2f}")
PY
