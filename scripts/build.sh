#!/usr/bin/env bash
# Configures and builds Tessera in ./build (Release, Ninja, ccache when present).
# Extra arguments go to CMake, e.g. scripts/build.sh -DTESSERA_ASAN=ON
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${TESSERA_JOBS:-2}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$JOBS"
