#!/usr/bin/env bash
# Installs Tessera's build and run dependencies from Debian packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build ccache pkg-config \
  libhalide14-0-dev llvm-14-dev libpng-dev libjpeg-dev \
  libopenmpi-dev openmpi-bin \
  googletest libgtest-dev libgmock-dev libbenchmark-dev \
  nlohmann-json3-dev libcli11-dev libfmt-dev \
  libopenblas-dev zlib1g-dev \
  libonnx-dev libprotobuf-dev python3-onnx python3-torch python3-numpy \
  dataset-fashion-mnist graphviz python3 chromium \
  clang libclang-rt-14-dev >/dev/null
