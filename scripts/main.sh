#!/usr/bin/env bash
# The main job on CPU: installs the Debian dependencies, builds, and trains the
# zoo's CNN on Fashion-MNIST (from Debian's dataset-fashion-mnist) on the CPU
# device, writing per-step metrics and a checkpoint under ./runs/. Extra
# arguments go to tessera-train, e.g. `bash scripts/main.sh --model mlp --epochs 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
mkdir -p runs
exec ./build/launch/tessera-train --model cnn --data fashion-mnist --epochs 4 \
    --metrics runs/fashion-mnist.jsonl --checkpoint runs/fashion-mnist "$@"
