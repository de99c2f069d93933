#!/usr/bin/env bash
# Installs the Debian dependencies, builds, and runs every test with ctest,
# then a short run of every fuzz target (scripts/fuzz.sh, TESSERA_FUZZ_SECONDS
# each, default 5; 0 skips them), then the unit tests under ASan+UBSan
# (scripts/sanitize.sh, in a build directory of its own; TESSERA_SANITIZE=0
# skips it, TESSERA_SANITIZE="asan tsan" adds the executor's and the
# communicator's tests under TSan). GPU tests (label gpu) skip themselves when
# no device is present.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"${TESSERA_JOBS:-2}" --timeout 600)
fuzz_seconds=${TESSERA_FUZZ_SECONDS:-5}
if [ "$fuzz_seconds" != 0 ]; then bash scripts/fuzz.sh "$fuzz_seconds"; fi
sanitizers=${TESSERA_SANITIZE:-asan}
if [ "$sanitizers" != 0 ]; then
  for s in $sanitizers; do bash scripts/sanitize.sh "$s"; done
fi
