#!/usr/bin/env bash
# Benchmark: `kidiom mine --history` over the full first-parent history of
# each corpus at its pinned commit (FLA and DeepGEMM by default), beside
# the floor of a parse-only pass over the same file versions
# (`--parse-only-floor`: every file version the run parses, read and parsed
# as the run does it -- each distinct version once, most of them re-parsed
# incrementally from a neighbouring version -- and nothing lowered, diffed,
# cut or generalized).
#
# Each run starts from an empty catalog, so nothing is cached; each figure
# is the median of three runs. The machine is whatever runs it (SPEC §11:
# 2 cores); other load on it shows in the numbers, so the script prints the
# load average next to them.
#
# Output (bench/readme.py reads it): one block per corpus, starting with
# `corpus NAME (MANIFEST)`.
#
# Usage: bench/history.sh [MANIFEST...]   (default corpora/fla.toml corpora/deepgemm.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- corpora/fla.toml corpora/deepgemm.toml; fi
cargo build --release --quiet
bin=target/release/kidiom
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() { # manifest, label, extra args... -> seconds; the report in $tmp/label.json
  local manifest="$1" label="$2"; shift 2
  local start end
  rm -f "$tmp/$label".sqlite*
  start=$(date +%s.%N)
  "$bin" mine --history "$manifest" --db "$tmp/$label.sqlite" -q --json "$@" > "$tmp/$label.json"
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for manifest in "$@"; do
  floors=() fulls=()
  for _ in 1 2 3; do
    floors+=("$(run "$manifest" floor --parse-only-floor)")
    fulls+=("$(run "$manifest" full)")
  done
  python3 - "$manifest" "$tmp/full.json" "$(median3 "${floors[@]}")" "$(median3 "${fulls[@]}")" <<'PY'
import json, sys
manifest, report = sys.argv[1], json.load(open(sys.argv[2]))
floor, full = float(sys.argv[3]), float(sys.argv[4])
c = report["corpora"][0]; s = report["stats"]
print(f"corpus {c['name']} ({manifest})")
print(f"commits {c['commits']}, file pairs {c['files']}, concrete edits {c['edits']}, rules {report['patterns']}")
print(f"file versions {c['file_versions']}, parsed {c['parsed_blobs']} "
      f"({c['incremental_parses']} incrementally from a neighbouring version)")
print(f"mining {c['seconds']:.1f}s, generalizing {report['generalize_seconds']:.1f}s "
      f"(replay {s['replay_seconds']:.1f}s, opportunities {s['opportunity_seconds']:.1f}s)")
print(f"parse-only floor {floor:.1f}s, full run {full:.1f}s, ratio {full / floor:.2f}")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
