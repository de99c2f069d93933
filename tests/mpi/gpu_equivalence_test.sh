#!/usr/bin/env bash
# Partitioned training on GPUs equals single-GPU training (label gpu): the
# equivalence test with --device cuda, once with --comm auto (NCCL
# all-reduces when each rank has a GPU of its own, host staging when they
# share one) and once with --comm mpi (everything staged through host memory).
# Exits 77 (skipped) when there is no GPU or no driver; any other CUDA error fails.
#   gpu_equivalence_test.sh TESSERA_TRAIN TESSERA_PLAN
set -uo pipefail
train=$1 plan=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! probe=$("$train" --device cuda --model mlp:hidden=8,input=8,classes=2 --data synthetic --synthetic-size 64 \
    --batch 32 --steps 1 --no-eval --progress none 2>&1); then
  # The GPU tests' rule (tests/require_gpu.h): skip only for a build without
  # CUDA, no device, or no driver at all; any other CUDA error fails.
  driver=$("$train" --env 2>/dev/null | grep -o 'driver [^ ,]*' | head -1)
  if grep -q "no CUDA backend\|no CUDA-capable device" <<<"$probe" ||
     { [ "$driver" = "driver none" ] && grep -q "no CUDA device is usable" <<<"$probe"; }; then
    echo "skipped: $(grep -o 'no CUDA.*' <<<"$probe" | head -1) ($driver)"
    exit 77
  fi
  echo "FAIL: tessera-train --device cuda: $probe"
  exit 1
fi
failed=0
for comm in auto mpi; do
  bash "$here/equivalence_test.sh" "$train" "$plan" "mlp:hidden=64" "2 4" "data tofu" --device cuda --comm "$comm" ||
    failed=1
done
exit $failed
