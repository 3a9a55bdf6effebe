#!/bin/bash
# every FLA ops/modules kernel file (or the files given): kidiom init in place; the skeleton loaded; the unmodified
# baseline compiled ahead of time, at init's placeholder sizes (or, SIZES=small, at its CPU placeholders everywhere)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd ${FLA_SCRATCH:?a scratch copy of fla-core 0.6.0 with einops beside fla/}
export TMPDIR=$(mktemp -d /dev/shm/x.XXXX) KIDIOM_CACHE=${FLA_SCRATCH:?a scratch copy of fla-core 0.6.0 with einops beside fla/}-cache
[ $# -gt 0 ] || find fla -name "*.toml" -o -name "*_contract.py" | xargs rm -f
files="$*"  # the files given, else every one
[ -n "$files" ] || files=$(find fla -name "*.py" \( -path "*ops*" -o -path "*modules*" \) | grep -v __init__ | grep -v triton_ascend | grep -v _contract.py | sort)
for f in $files; do
  rm -f "${f%.py}.toml" "${f%.py}_contract.py"
  if ! $root/target/debug/kidiom init "$f" > /dev/null 2>&1; then echo -e "$f\tno-init"; continue; fi
  m="${f%.py}.toml"
  load=$($root/.venv/bin/python - "$m" <<'PY' 2>&1 | tail -1
import sys, tomllib, importlib.util, numpy as np
m = sys.argv[1]; man = tomllib.load(open(m, "rb"))
spec = importlib.util.spec_from_file_location("c", m.replace(".toml", "_contract.py")); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
s = man["shapes"]["cpu"][0]; mod.tensors(s); mod.make_inputs(s, np.random.default_rng(0)); print("loads")
PY
)
  # SIZES=small: the user's part (the sizes) stood in for by init's own CPU placeholders at every shape
  if [ "${SIZES:-}" = small ]; then
    $root/.venv/bin/python - "$m" <<'PY'
import re, sys
m = sys.argv[1]; t = open(m).read()
cpu = re.search(r"^cpu = \[(\{.*?\})\]", t, re.M).group(1)
t = re.sub(r"^gpu = .*$", f"gpu = [{cpu}]", t, flags=re.M)
t = re.sub(r"^bench = .*$", f"bench = {cpu}", t, flags=re.M)
open(m, "w").write(t)
PY
  fi
  out=$(cd $root && timeout 120 .venv/bin/python -m kernels.harness compile --manifest "${FLA_SCRATCH:?a scratch copy of fla-core 0.6.0 with einops beside fla/}/$m" --json --timeout 100 2>/dev/null)
  echo "$out" | $root/.venv/bin/python -c "
import json,sys
try: d=json.load(sys.stdin)
except Exception: print('$f\t$load\tnojson'); sys.exit()
e=(d.get('error') or '').splitlines()
print('$f\t$load\t'+d.get('status','?')+'\t'+(e[0][:200] if e else ''))"
done
