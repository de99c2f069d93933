#!/usr/bin/env bash
# The CPU kernels' portable baseline, the last target of TESSERA_HALIDE_TARGET,
# runs on any x86-64 CPU with SSE4.1 only if its objects, and the Halide runtime
# that every target shares, hold no instruction beyond SSE4.1: no AVX, AVX2,
# FMA or AVX-512 (VEX- or EVEX-encoded, ymm, zmm or mask registers), no BMI,
# POPCNT, LZCNT, MOVBE or SSE4.2. Kernels and runtime compiled for the build
# machine alone died of an illegal instruction on a GPU host without AVX-512.
# This machine's CPU cannot show that by running them, so their disassembly does.
#
# Usage: baseline_isa_test.sh GEN_DIR TESSERA_HALIDE_TARGET
# Exit 77 (skipped) when the last target is not x86-64-linux or x86-64-linux-sse41.
set -euo pipefail
gen="$1"
IFS=, read -ra targets <<< "$2"
last=$(( ${#targets[@]} - 1 ))
case "${targets[$last]}" in
  x86-64-linux | x86-64-linux-sse41) ;;
  *) echo "SKIP: the last Halide target is '${targets[$last]}', not a portable x86-64 baseline"; exit 77 ;;
esac
command -v objdump > /dev/null || { echo "SKIP: no objdump (binutils)"; exit 77; }

beyond='^ *[0-9a-f]+:\s+(v[a-z0-9]+|popcnt|lzcnt|tzcnt|andn|bextr|blsi|blsr|blsmsk|bzhi|sarx|shlx|shrx|rorx|mulx|pdep|pext|movbe|crc32[a-z]*|pcmp[ei]str[im])\s|%[yz]mm[0-9]|%k[0-7]\b'
objects=("$gen/halide_runtime.o" "$gen"/kernels_*_t"$last".o)
fail=0
for o in "${objects[@]}"; do
  [ -f "$o" ] || { echo "FAIL: $o is missing (build the tessera_lang target first)"; fail=1; continue; }
  n=$(objdump -d --no-show-raw-insn "$o" | grep -cE "$beyond" || true)
  if [ "$n" -gt 0 ]; then
    echo "FAIL: $(basename "$o") holds $n instructions beyond SSE4.1, e.g.:"
    objdump -d --no-show-raw-insn "$o" | grep -E "$beyond" | head -3 || true
    fail=1
  fi
done
[ "$fail" = 0 ] || exit 1
echo "ok: ${#objects[@]} objects for ${targets[$last]} (halide_runtime.o and kernels_*_t$last.o) hold nothing beyond SSE4.1"
