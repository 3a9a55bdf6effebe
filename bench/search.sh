#!/usr/bin/env bash
# Search latency (`Catalog::search_hits`, the engine of `kidiom catalog search`
# and MCP `search_patterns`) on a large catalog.
#
#   bench/search.sh [PATTERNS] [CATALOG]
#
# Without CATALOG: a synthetic catalog of PATTERNS patterns (default 5000),
# generated deterministically in a temporary directory. With CATALOG: a copy
# of it (the file itself is never migrated or written). Each question of
# tests/search_questions.toml is searched 30 times at limit 20; prints the
# median, 95th percentile and worst latency per query. Target: < 20 ms.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
n="${1:-5000}"
shift || true
cargo run --quiet --release --locked -p kidiom-patterns --example search_bench -- "$n" "$@"
