#!/usr/bin/env bash
# scripts/gpu_bundle.sh packs what a GPU machine with only the NVIDIA driver and
# a CUDA 13 toolkit needs to run bench/gpu_measure.sh. This builds the bundle,
# unpacks it, and checks with ldd, the bundle's lib first on LD_LIBRARY_PATH,
# that every library each packed program needs is found in the bundle or is
# one the GPU machine has (CUDA runtime, cuBLAS, cuBLASLt, libcuda, glibc,
# libstdc++, libgcc_s): nothing it needs is found only in this machine's
# system folders, and nothing is missing but libcuda (the driver, which a
# machine without a GPU may lack). Also that gpu_measure.sh and the scripts it
# runs are packed, and that the packed tessera-train starts.
#
# Usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR CUDA_ENABLED(1|0) BENCH_ENABLED(1|0)
# Exit 77 (skipped) for a build without CUDA or without the benchmarks, and
# for one whose kernels are for this CPU alone (after checking the refusal).
set -uo pipefail
BUILD="$1"
SRC="$2"
[ "$3" = 1 ] || { echo "SKIP: this build has no CUDA (TESSERA_CUDA off or no nvcc); the bundle is for GPU machines"; exit 77; }
[ "$4" = 1 ] || { echo "SKIP: TESSERA_BUILD_BENCH is off; the bundle packs tessera-bench-gpu-copy"; exit 77; }

# What the GPU machine has, by soname (the test's own list, not the script's).
provided='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn|libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
programs=(launch/tessera-train launch/tessera-plan bench/tessera-bench-gpu-copy tests/exec_cuda_device_test
          tests/exec_gpu_kernels_host_test)
scripts=(bench/gpu_measure.sh bench/gpu_vs_pytorch.py)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# A build whose kernels are for this CPU alone (TESSERA_HALIDE_TARGET ending in
# host, as a build folder configured before the portable default keeps): the
# script must refuse it, saying why; there is nothing more to check.
target="$(sed -n 's/^TESSERA_HALIDE_TARGET:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)"
if [ "${target##*,}" = host ]; then
  if out=$(bash "$SRC/scripts/gpu_bundle.sh" "$BUILD" "$tmp/gpu-bundle.tar.gz" 2>&1) ||
     ! grep -q "compiled for this machine's CPU only" <<<"$out" || [ -e "$tmp/gpu-bundle.tar.gz" ]; then
    echo "FAIL: gpu_bundle.sh should refuse a build with TESSERA_HALIDE_TARGET=$target, writing nothing; it said: $out"
    exit 1
  fi
  echo "SKIP: this build's kernels are for this CPU only (TESSERA_HALIDE_TARGET=$target); the bundle refuses it (checked)"
  exit 77
fi
if ! bash "$SRC/scripts/gpu_bundle.sh" "$BUILD" "$tmp/gpu-bundle.tar.gz"; then
  echo "FAIL: scripts/gpu_bundle.sh failed"
  exit 1
fi
mkdir "$tmp/there"
tar -C "$tmp/there" -xzf "$tmp/gpu-bundle.tar.gz" || { echo "FAIL: the bundle does not unpack"; exit 1; }
bundle="$tmp/there/gpu-bundle"
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

for s in "${scripts[@]}"; do
  cmp -s "$SRC/$s" "$bundle/$s" || bad "$s is not packed (or differs from the source)"
done
# gpu_measure.sh runs these programs from the build folder it is given (and reads BUILD_INFO).
for p in $(grep -oE '\$BUILD/[A-Za-z0-9_/.-]+' "$SRC/bench/gpu_measure.sh" | sed 's/^\$BUILD\///' | sort -u); do
  if [ "$p" = BUILD_INFO ]; then  # read, for the commit, not run
    [ -f "$bundle/$p" ] || bad "gpu_measure.sh reads \$BUILD/$p, which the bundle lacks"
  else
    [ -x "$bundle/$p" ] || bad "gpu_measure.sh runs \$BUILD/$p, which the bundle lacks"
  fi
done
ls "$bundle"/lib/libnccl.so.* > /dev/null 2>&1 || bad "libnccl is not packed"

for p in "${programs[@]}"; do
  [ -x "$bundle/$p" ] || { bad "$p is not packed"; continue; }
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = not ]; then
      [[ "$name" =~ ^libcuda\.so ]] || bad "$p: $name is not found"
    elif [[ "$path" != "$bundle/lib/"* ]] && ! [[ "$name" =~ $provided ]]; then
      bad "$p: $name is found only at $path, outside the bundle"
    fi
  done < <(LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/$p")
done

version="$(LD_LIBRARY_PATH="$bundle/lib" "$bundle/launch/tessera-train" --version 2>&1)" ||
  bad "the packed tessera-train --version fails: $version"

# --no-nccl: the same bundle without libnccl, and saying so.
if bash "$SRC/scripts/gpu_bundle.sh" --no-nccl "$BUILD" "$tmp/lean.tar.gz" > /dev/null; then
  mkdir "$tmp/lean"
  tar -C "$tmp/lean" -xzf "$tmp/lean.tar.gz"
  lean="$tmp/lean/gpu-bundle"
  ! ls "$lean"/lib/libnccl.so.* > /dev/null 2>&1 || bad "--no-nccl packed libnccl"
  want="$(ls "$bundle/lib" | grep -v '^libnccl\.so' | tr '\n' ' ')"
  [ "$(ls "$lean/lib" | tr '\n' ' ')" = "$want" ] ||
    bad "--no-nccl packed $(ls "$lean/lib" | tr '\n' ' '), not the full bundle's libraries less NCCL: $want"
  grep -q "^nccl: not packed" "$lean/BUILD_INFO" || bad "--no-nccl's BUILD_INFO does not say that NCCL is not packed"
else
  bad "scripts/gpu_bundle.sh --no-nccl failed"
fi

[ "$fail" = 0 ] || exit 1
echo "ok: ${#programs[@]} programs, $(ls "$bundle/lib" | wc -l) libraries ($(du -sh "$bundle/lib" | cut -f1)), ${#scripts[@]} scripts"
