#!/usr/bin/env bash
# Create (or refresh) the Python environment of kernels/ at <repo>/.venv.
#
# Idempotent: a stamp file inside .venv records the sha256 of kernels/requirements.txt (and
# kernels/requirements-ray.txt, the Ray executor's optional extra; KIDIOM_NO_RAY=1 leaves it out)
# and of this script; when it matches, nothing is done. Usable on a fresh CI machine (needs
# python3 >= 3.10 with the venv module and access to PyPI).
#
#   scripts/setup-python.sh            # create / update .venv
#   PYTHON=python3.11 scripts/setup-python.sh
#   KIDIOM_VENV=/some/dir scripts/setup-python.sh
#   KIDIOM_VENV=.venv-triton36 KIDIOM_REQUIREMENTS=kernels/requirements-triton36.txt scripts/setup-python.sh
#                                      # another set of requirements alone (the GPU machine's Triton)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$root/kernels/requirements.txt"
reqs=("$req")
if [[ -n "${KIDIOM_REQUIREMENTS:-}" ]]; then
  reqs=("$(cd "$(dirname "$KIDIOM_REQUIREMENTS")" && pwd)/$(basename "$KIDIOM_REQUIREMENTS")")
elif [[ "${KIDIOM_NO_RAY:-0}" != 1 ]]; then
  reqs+=("$root/kernels/requirements-ray.txt")
fi
venv="${KIDIOM_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
stamp="$venv/.kidiom-requirements.sha256"

want="$(cat "${reqs[@]}" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup-python: $venv is up to date"
  exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup-python: creating $venv with $($py --version 2>&1)"
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# one resolution for all of them (Ray and the MCP SDK share dependencies)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]/#/--requirement=}"
"$venv/bin/python" -c "import numpy, triton; print('setup-python: numpy', numpy.__version__, 'triton', triton.__version__)"
echo "$want" > "$stamp"
echo "setup-python: $venv ready"
