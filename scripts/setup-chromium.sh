#!/usr/bin/env bash
# Make sure a headless Chromium is on PATH for the browser tests of
# `kidiom review --html` (tests/html.rs). Idempotent: nothing is done when one
# is found. Installs Debian's `chromium` (and a font, so pages render text)
# with apt-get when it exists and we are root; otherwise says so and leaves it
# to the tests, which skip with a reason outside CI and fail under CI.
#
#   scripts/setup-chromium.sh
set -euo pipefail

for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    echo "setup-chromium: $(command -v "$b") is here"
    exit 0
  fi
done

if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
  echo "setup-chromium: installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  echo "setup-chromium: $(command -v chromium) ready"
else
  echo "setup-chromium: no chromium on PATH and no way to install it here (needs apt-get as root);" \
       "the browser tests of tests/html.rs skip outside CI and fail under it" >&2
fi
