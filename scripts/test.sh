#!/usr/bin/env bash
# Installs the Debian dependencies, builds, and runs every test with ctest.
# GPU tests (label gpu) skip themselves when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j"${TESSERA_JOBS:-2}" --timeout 600
