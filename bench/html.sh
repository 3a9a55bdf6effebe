#!/usr/bin/env bash
# Benchmark: `kidiom review --html DIR` (release build) on a catalog of 100
# and of 1000 candidates: each page's side-by-side highlighted diff, its
# pattern's evidence, every gate's record with inline SVG plots, then the
# index. The candidates cycle through the five planted in tests/html.rs
# (`bench_catalog`, an ignored test that writes the catalog): accepted on a
# GPU with speed percentiles, accepted on a host target with per-round gaps,
# needs-gpu with an error curve and a site search's front, rejected at the
# static gate, and not validated; their diffs are a few lines each, as a
# candidate's are. No peer: nothing else renders this site; the figure is
# the time per candidate.
#
# Each run writes into a new, empty folder (every page written); a re-run
# into the same folder writes the same files again, so it is not timed
# separately. Each figure is the median of three runs; the machine's load
# average is printed beside them (other work on it shows in the numbers).
#
# Output (bench/readme.py reads it), one line per catalog size:
#   candidates N: runs A B C s, median M s, per candidate P ms, site S MB (I pages)
#
# Usage: bench/html.sh [OUT]   (default: print only; with OUT, also write it there)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-}"
cargo build --release --quiet --bin kidiom
bin="$PWD/target/release/kidiom"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The catalogs: the debug test binary plants them (its speed is not measured).
cargo test --quiet --test tests --no-run
for n in 100 1000; do
  KIDIOM_BENCH_DB="$tmp/c$n.sqlite" KIDIOM_BENCH_CANDIDATES="$n" \
    cargo test --quiet --test tests -- --ignored --exact html::bench_catalog >/dev/null 2>&1
done

report="$tmp/report.txt"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >"$report"
for n in 100 1000; do
  runs=()
  for r in 1 2 3; do
    site="$tmp/site-$n-$r"
    start=$(date +%s.%N)
    "$bin" review --db "$tmp/c$n.sqlite" --html "$site" >/dev/null
    end=$(date +%s.%N)
    runs+=("$(echo "$end - $start" | bc)")
  done
  pages=$(find "$site/c" -name '*.html' | wc -l)
  bytes=$(du -sb "$site" | cut -f1)
  python3 - "$n" "$pages" "$bytes" "${runs[@]}" >>"$report" <<'PY'
import statistics, sys
n, pages, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
runs = [float(x) for x in sys.argv[4:]]
med = statistics.median(runs)
print(f"candidates {n}: runs {' '.join(f'{r:.2f}' for r in runs)} s, median {med:.2f} s, "
      f"per candidate {med / n * 1000:.1f} ms, site {size / 2**20:.1f} MB ({pages} pages)")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$report"
cat "$report"
if [ -n "$out" ]; then cp "$report" "$out"; fi
