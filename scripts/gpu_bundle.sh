#!/usr/bin/env bash
# Packs what a GPU machine without Tessera's Debian packages needs to run the
# GPU measurements (bench/gpu_measure.sh): the built programs and GPU tests,
# and the shared libraries they load that are not CUDA's or the C runtime's
# (OpenBLAS, OpenMPI's libraries, fmt, zlib, ...). The GPU machine brings CUDA
# (cudart, cuBLAS) and, for --comm nccl, NCCL (e.g. PyTorch's nvidia-nccl wheel:
# add its lib folder to LD_LIBRARY_PATH). No mpirun is packed: the single-GPU
# measurements need none.
#
# Usage: scripts/gpu_bundle.sh [BUILD_DIR=build] [OUT=gpu-bundle.tar.gz]
# There: tar xzf gpu-bundle.tar.gz && export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:$LD_LIBRARY_PATH
#        bash bench/gpu_measure.sh gpu-bundle gpu-results
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-gpu-bundle.tar.gz}"
bins=(launch/tessera-train launch/tessera-plan bench/tessera-bench-gpu-copy tests/exec_cuda_device_test
      tests/exec_gpu_kernels_host_test)
for b in "${bins[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b is missing; build first (scripts/build.sh)" >&2; exit 1; }
done
ldd "$BUILD/${bins[0]}" | grep -q libcublas ||
  { echo "gpu_bundle: $BUILD was built without CUDA (configure with TESSERA_CUDA=ON)" >&2; exit 1; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/gpu-bundle/lib"
for b in "${bins[@]}"; do
  mkdir -p "$stage/gpu-bundle/$(dirname "$b")"
  cp "$BUILD/$b" "$stage/gpu-bundle/$b"
  # Libraries found on this machine, less those the GPU machine has its own of.
  ldd "$BUILD/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -vE '/lib(cuda|cudart|cublas|cublasLt|nccl|c|m|dl|rt|pthread|stdc\+\+|gcc_s)\.so' |
    while read -r lib; do cp -nL "$lib" "$stage/gpu-bundle/lib/"; done
done
tar -C "$stage" -czf "$OUT" gpu-bundle
echo "gpu_bundle: $OUT ($(du -h "$OUT" | cut -f1)): ${#bins[@]} programs, $(ls "$stage/gpu-bundle/lib" | wc -l) libraries"
