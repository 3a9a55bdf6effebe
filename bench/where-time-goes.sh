#!/usr/bin/env bash
# Where the slowest tests' time goes (issue #42): the N slowest tests of a bench/test-times.sh run,
# each run alone under `perf record -a`, its CPU attributed to the harness command, compiler or
# service whose process tree each sample fell in (bench/where_time_goes.py). Needs `perf` and the
# permission to record the whole machine (root, or kernel.perf_event_paranoid <= -1).
#
#   bench/where-time-goes.sh RUN_DIR [N]     default N = 10; writes RUN_DIR/where.json
#
# Run it on an idle machine after bench/test-times.sh has filled RUN_DIR; then
# `python bench/readme.py RUN_DIR` puts the table in its README.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
run="$(cd "${1:?usage: bench/where-time-goes.sh RUN_DIR [N]}" && pwd)"
n="${2:-10}"
command -v perf > /dev/null || { echo "where-time-goes: perf is not installed (linux-perf)" >&2; exit 2; }
. scripts/test-env.sh
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$suite_scratch"' EXIT

# every Python process that is not isolated (-I: the sandboxed workers) says who it is at start
mkdir "$tmp/site"
cat > "$tmp/site/sitecustomize.py" <<'PY'
import json, os, sys
try:
    with open(os.environ["KIDIOM_WHERE_STARTS"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[:3]}) + "\n")
except (KeyError, OSError):
    pass
PY

cargo test --workspace --locked --no-run --message-format=json 2>/dev/null > "$tmp/build.json"
.venv/bin/python - "$run" "$n" "$tmp/build.json" > "$tmp/tests.tsv" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
import test_times
run, n, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]
exes = {}
for line in open(build):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        kind = m["target"]["kind"][0]
        name = m["target"]["name"] + ("-" + kind if kind != "lib" else "")
        exes[name] = (os.path.dirname(m["manifest_path"]), m["executable"])
from pathlib import Path
tests = test_times.rust_tests(Path(run)) + test_times.pytest_tests(Path(run))
waits = test_times.lock_waits(Path(run)) or {}
own = [(b, name, secs - waits.get((b, name), 0.0)) for b, name, secs, _ in tests]   # as the table ranks them
for binary, name, secs in sorted(own, key=lambda t: -t[2])[:n]:
    if binary == "pytest":
        mod, _, case = name.partition("::")
        print(f"pytest\t{name}\t.\t{mod.replace('.', '/')}.py::{case}")
    elif binary in exes:
        print(f"rust\t{name}\t{exes[binary][0]}\t{exes[binary][1]}")
PY

busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
echo '{"tests": [' > "$tmp/where.json"
first=1
while IFS=$'\t' read -r kind name dir what; do
  : > "$tmp/starts.jsonl"
  perf record -a -F 99 -e cpu-clock -o "$tmp/cpu.data" > /dev/null 2>&1 &
  cpu_pid=$!
  perf record -a -c 1 -e sched:sched_process_fork -e sched:sched_process_exec -o "$tmp/sched.data" > /dev/null 2>&1 &
  sched_pid=$!
  sleep 1
  b0="$(busy)"; t0="$EPOCHREALTIME"
  if [ "$kind" = rust ]; then
    (cd "$dir" && PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}" KIDIOM_WHERE_STARTS="$tmp/starts.jsonl" \
      "$what" --exact "$name" --test-threads 1 > "$tmp/out.txt" 2>&1) || echo "where-time-goes: $name failed" >&2
  else
    PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}" KIDIOM_WHERE_STARTS="$tmp/starts.jsonl" \
      .venv/bin/python -m pytest -q -p no:cacheprovider "$what" > "$tmp/out.txt" 2>&1 || echo "where-time-goes: $name failed" >&2
  fi
  t1="$EPOCHREALTIME"; b1="$(busy)"
  kill -INT "$cpu_pid" "$sched_pid"; wait "$cpu_pid" "$sched_pid" || true
  perf script -i "$tmp/cpu.data" -F comm,pid,time,event > "$tmp/cpu.txt" 2>/dev/null
  perf script -i "$tmp/sched.data" -F comm,pid,time,event,trace > "$tmp/sched.txt" 2>/dev/null
  by="$(.venv/bin/python bench/where_time_goes.py attribute "$tmp/cpu.txt" "$tmp/sched.txt" "$tmp/starts.jsonl")"
  [ "$first" = 1 ] || echo ',' >> "$tmp/where.json"
  first=0
  .venv/bin/python -c 'import json, sys; print(json.dumps({"test": sys.argv[1], "wall_s": round(float(sys.argv[2]), 1),
    "busy_core_s": round(float(sys.argv[3]) / 100, 1), "by": json.loads(sys.argv[4])}))' \
    "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(( b1 - b0 ))" "$by" >> "$tmp/where.json"
  echo "$name: $(tail -1 "$tmp/where.json" | cut -c1-200)"
done < "$tmp/tests.tsv"
echo ']}' >> "$tmp/where.json"
.venv/bin/python -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=1)' \
  "$tmp/where.json" "$run/where.json"
.venv/bin/python bench/where_time_goes.py table "$run"
