#!/usr/bin/env bash
# Times `kidiom apply` (the whole catalog) on kernels/ and on a ~30 MB tree,
# against `ast-grep scan` / `ast-grep scan --update-all` with the exported rules.
#
#   bench/apply.sh [CATALOG] [TREE_SOURCE_DIR...]
#
# CATALOG defaults to .kidiom/catalog.sqlite (run `kidiom mine` first). The
# 30 MB tree is built in a temporary directory by copying the .py/.cu files of
# the source directories (default: kernels/) round-robin until it holds 30 MB.
# Needs a release build (cargo build --release) and .venv/bin/ast-grep
# (scripts/setup-python.sh). Prints one line per measurement.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
db="${1:-.kidiom/catalog.sqlite}"
shift || true
db="$(realpath "$db")"
srcs=("$@")
[[ ${#srcs[@]} -eq 0 ]] && srcs=(kernels)
kidiom="$root/target/release/kidiom"
sg="${AST_GREP:-$root/.venv/bin/ast-grep}"
[[ -x "$kidiom" ]] || { echo "build first: cargo build --release" >&2; exit 2; }
[[ -x "$sg" ]] || sg="$(command -v ast-grep || command -v sg || true)"

t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); echo "$e - $s" | bc; }
best() { local b=999999 x; for _ in 1 2 3; do x=$(t "$@"); b=$(echo "if ($x < $b) $x else $b" | bc); done; echo "$b"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A copy: the candidates this benchmark proposes must not land in the user's catalog.
for suffix in "" -wal -shm; do
  [[ -f "$db$suffix" ]] && cp "$db$suffix" "$work/catalog.sqlite$suffix"
done
db="$work/catalog.sqlite"
"$kidiom" catalog export --format ast-grep --db "$db" --out "$work/rules.yml" || true
echo "rules: $(grep -c '^id:' "$work/rules.yml") ast-grep rules from $db"

echo "kernels/ kidiom apply (dry run, whole catalog): $(best "$kidiom" apply --db "$db" -q kernels) s"
[[ -n "$sg" ]] && echo "kernels/ ast-grep scan: $(best "$sg" scan --rule "$work/rules.yml" kernels) s"

# The 30 MB tree.
mkdir -p "$work/tree"
mapfile -t files < <(find "${srcs[@]}" -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' \) | sort)
n=0; size=0
while (( size < 30 * 1024 * 1024 )); do
  for f in "${files[@]}"; do
    d="$work/tree/c$((n / 500))"; mkdir -p "$d"
    ext="${f##*.}"; cp "$f" "$d/f$n.$ext"; n=$((n + 1))
    size=$((size + $(stat -c %s "$f")))
    (( size >= 30 * 1024 * 1024 )) && break
  done
done
echo "tree: $n files, $(du -sm "$work/tree" | cut -f1) MB"
cd "$work"
git init -q tree && git -C tree add -A && git -C tree -c user.name=b -c user.email=b@b commit -qm t
cd tree
ka=$(best "$kidiom" apply --db "$db" -q .)
echo "30MB kidiom apply (dry run): $ka s"
if [[ -n "$sg" ]]; then
  sa=$(best "$sg" scan --rule "$work/rules.yml" .)
  echo "30MB ast-grep scan: $sa s (kidiom/ast-grep = $(echo "scale=2; $ka / $sa" | bc))"
  kw=$(t "$kidiom" apply --db "$db" -q --write --force .)
  git checkout -q -- . 
  su=$(t "$sg" scan --rule "$work/rules.yml" --update-all .)
  echo "30MB kidiom apply --write: $kw s; ast-grep scan --update-all: $su s"
fi
