#!/usr/bin/env bash
# Installs the Debian dependencies, builds, and runs every test with ctest,
# then a short run of every fuzz target (scripts/fuzz.sh, TESSERA_FUZZ_SECONDS
# each, default 5; 0 skips them), then the unit tests under ASan+UBSan
# and the executor's, devices' and communicator's tests under TSan
# (scripts/sanitize.sh, each in a build directory of its own;
# TESSERA_SANITIZE=0 skips both, TESSERA_SANITIZE=asan runs only ASan). GPU
# tests (label gpu) skip themselves when no device is present. Each stage
# prints its wall time.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$(dirname "$0")/.."
start=$(date +%s)
stage() {  # stage NAME COMMAND...: runs the command and reports its wall time
  local name=$1 t0; shift; t0=$(date +%s)
  "$@"
  echo "test.sh: $name took $(($(date +%s) - t0)) s ($(($(date +%s) - start)) s in all)"
}
run_tests() { (cd build && ctest --output-on-failure -j"${TESSERA_JOBS:-2}" --timeout 600); }
stage deps bash scripts/deps.sh
stage build bash scripts/build.sh
stage tests run_tests
fuzz_seconds=${TESSERA_FUZZ_SECONDS:-5}
if [ "$fuzz_seconds" != 0 ]; then stage fuzz bash scripts/fuzz.sh "$fuzz_seconds"; fi
sanitizers=${TESSERA_SANITIZE:-asan tsan}
if [ "$sanitizers" != 0 ]; then
  for s in $sanitizers; do stage "$s" bash scripts/sanitize.sh "$s"; done
fi
