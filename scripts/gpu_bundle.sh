#!/usr/bin/env bash
# Packs what a GPU machine with only the NVIDIA driver and a CUDA 13 toolkit
# needs to take the GPU measurements (bench/gpu_measure.sh): the built programs
# and GPU tests, the scripts gpu_measure.sh runs, and every shared library they
# load that such a machine lacks: NCCL (neither the driver nor every toolkit
# brings it), OpenBLAS, OpenMPI's libraries, fmt, zlib, ... Left out, because
# the GPU machine has its own: the CUDA runtime, cuBLAS and cuBLASLt (the
# toolkit), libcuda (the driver), glibc, libstdc++ and libgcc_s. No mpirun is
# packed: the single-GPU measurements need none (tessera-train starts MPI only
# under a launcher).
#
# The programs' CPU kernels must run on the GPU machine's CPU as well, so the
# build's TESSERA_HALIDE_TARGET must end with a portable target, as its default
# does (docs/cuda.md, "Running on a GPU machine").
#
# --no-nccl leaves NCCL out (208 MB of the 218): for a GPU machine that has its
# own libnccl.so.2, such as the one in PyTorch's nvidia-nccl wheel, and a
# transfer limit the whole bundle exceeds. There, gpu_measure.sh takes the
# nvidia-nccl wheel's library when the loader finds none; other programs need
# that library's folder on LD_LIBRARY_PATH.
#
# Usage: scripts/gpu_bundle.sh [--no-nccl] [BUILD_DIR=build] [OUT=gpu-bundle.tar.gz]
# There: tar xzf gpu-bundle.tar.gz
#        export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
#        bash gpu-bundle/bench/gpu_measure.sh gpu-bundle gpu-results
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
pack_nccl=1
if [ "${1:-}" = --no-nccl ]; then
  pack_nccl=0
  shift
fi
BUILD="${1:-build}"
OUT="${2:-gpu-bundle.tar.gz}"
bins=(launch/tessera-train launch/tessera-plan bench/tessera-bench-gpu-copy tests/exec_cuda_device_test
      tests/exec_gpu_kernels_host_test)
# gpu_measure.sh and what it runs besides the programs above.
scripts=(bench/gpu_measure.sh bench/gpu_vs_pytorch.py)
# Libraries the GPU machine has, by soname.
provided='^(libcuda|libcudart|libcublas|libcublasLt|libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
[ "$pack_nccl" = 1 ] || provided="${provided%)*}|libnccl)\\.so"

for b in "${bins[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b is missing; build first (scripts/build.sh)" >&2; exit 1; }
done
# ldd's whole output first: `ldd | grep -q` under pipefail fails at random when
# grep stops reading early and ldd dies of SIGPIPE.
deps="$(ldd "$BUILD/${bins[0]}")"
grep -q libcublas <<<"$deps" ||
  { echo "gpu_bundle: $BUILD was built without CUDA (configure with TESSERA_CUDA=ON)" >&2; exit 1; }
target="$(sed -n 's/^TESSERA_HALIDE_TARGET:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)"
if [ "${target##*,}" = host ]; then
  echo "gpu_bundle: $BUILD's CPU kernels are compiled for this machine's CPU only (TESSERA_HALIDE_TARGET=$target)" \
       "and die of an illegal instruction on a CPU without its features; reconfigure with the default" \
       "(cmake -U TESSERA_HALIDE_TARGET $BUILD) or end the list with a portable target such as x86-64-linux-sse41" >&2
  exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
dest="$stage/gpu-bundle"
mkdir -p "$dest/lib"
for b in "${bins[@]}"; do
  mkdir -p "$dest/$(dirname "$b")"
  cp "$BUILD/$b" "$dest/$b"
  missing="$(ldd "$BUILD/$b" | awk '/not found/ {print $1}' | grep -vE '^libcuda\.so' || true)"
  [ -z "$missing" ] || { echo "gpu_bundle: $BUILD/$b needs $missing, which this machine lacks" >&2; exit 1; }
  # Each library under its soname, the name the loader looks for.
  ldd "$BUILD/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [[ "$name" =~ $provided ]] || [ -e "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name"
    done
done
for s in "${scripts[@]}"; do
  mkdir -p "$dest/$(dirname "$s")"
  cp -p "$SRC/$s" "$dest/$s"
done
{
  echo "commit: $(git -C "$SRC" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "packed: $(date -u +%Y-%m-%dT%H:%MZ) from $BUILD"
  echo "TESSERA_HALIDE_TARGET: $target"
  [ "$pack_nccl" = 1 ] || echo "nccl: not packed (--no-nccl); put the GPU machine's libnccl.so.2 on LD_LIBRARY_PATH"
} > "$dest/BUILD_INFO"
tar -C "$stage" -czf "$OUT" gpu-bundle
echo "gpu_bundle: $OUT ($(du -h "$OUT" | cut -f1)): ${#bins[@]} programs, ${#scripts[@]} scripts," \
     "$(ls "$dest/lib" | wc -l) libraries"
