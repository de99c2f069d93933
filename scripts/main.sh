#!/usr/bin/env bash
# The main job on CPU: installs the Debian dependencies, builds, and runs it.
# Until training lands (issue 3), the main job prints the operator table with the
# partition strategies that Halide's bounds inference derived for each operator.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
./build/launch/tessera-plan --ops
