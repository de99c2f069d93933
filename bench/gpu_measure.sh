#!/usr/bin/env bash
# Issue 7's GPU measurements, in one run, written as a table:
#   1. correctness: the GPU tests (every kernel against the CPU kernel, training
#      on the device against the CPU, swapped training bit-identical);
#   2. training losses of every zoo model at small sizes, --device cuda against
#      --device cpu, through tessera-train;
#   3. where the operator time goes: tessera-train --profile-ops for the
#      transformer and wresnet of step 4, each operator timed alone;
#   4. throughput against PyTorch eager (mlp, transformer, wresnet), and under
#      --device-mem at 1/2, 1/4, 1/8, 1/12 of the footprint against PyTorch
#      with save_on_cpu(pin_memory=True) capped to the same memory
#      (bench/gpu_vs_pytorch.py);
#   5. host-device bandwidth while swapping against a plain pinned
#      cudaMemcpyAsync (tessera-bench-gpu-copy);
#   6. several ranks on the one GPU through real NCCL, every strategy, a
#      budget and a killed rank (bench/gpu_ranks.sh; needs mpirun on PATH).
#
# Usage: bench/gpu_measure.sh [BUILD_DIR=build] [OUT_DIR=gpu-results] [extra args for gpu_vs_pytorch.py]
# GPU_SECTIONS (default "losses ops pytorch copy ranks") picks sections 2 to 6
# by name, for a lease too short for all; the tests (1) always run first.
# Writes OUT_DIR/results.md (and the raw outputs beside it). Needs a GPU,
# CUDA 13, python3 with torch; a build with TESSERA_CUDA on. Exits 1, saying
# why, when any GPU test fails or skips, or no GPU kernel case ran: then it
# measures nothing.
set -uo pipefail
BUILD="${1:-build}"
OUT="${2:-gpu-results}"
shift $(( $# >= 2 ? 2 : $# ))
HERE="$(cd "$(dirname "$0")" && pwd)"
TRAIN="$BUILD/launch/tessera-train"
mkdir -p "$OUT"
for f in "$TRAIN" "$BUILD/bench/tessera-bench-gpu-copy" "$BUILD/tests/exec_cuda_device_test"; do
  [ -x "$f" ] || { echo "gpu_measure: $f is missing; build with scripts/build.sh first" >&2; exit 1; }
done
# A library the bundle leaves out, from the GPU machine's PyTorch wheel when the
# loader does not find it already: NCCL in a bundle packed with --no-nccl, and
# cuDNN, never packed (its engines are a gigabyte).
#   from_wheel SONAME PYTHON_PACKAGE NAME
from_wheel() {
  ldd "$TRAIN" | grep -q "$1 => not found" || return 0
  local dir
  dir="$(python3 -c "import $2, os; print(os.path.join(list($2.__path__)[0], 'lib'))" 2>/dev/null)"
  if [ -n "$dir" ] && [ -e "$dir/$1" ]; then
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu_measure: $3 from $dir" >&2
  else
    echo "gpu_measure: $TRAIN needs $1, which neither the bundle nor the loader's path has; put its folder on" \
         "LD_LIBRARY_PATH" >&2
    exit 1
  fi
}
from_wheel libnccl.so.2 nvidia.nccl NCCL
from_wheel libcudnn.so.9 nvidia.cudnn cuDNN
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_measure: no GPU (nvidia-smi finds none); these measurements need one" >&2
  exit 1
fi
GPU="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
# The commit: from git in a checkout, else from a bundle's BUILD_INFO (scripts/gpu_bundle.sh).
COMMIT="$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null ||
          sed -n 's/^commit: //p' "$BUILD/BUILD_INFO" 2>/dev/null | grep . || echo unknown)"
SECTIONS=" ${GPU_SECTIONS:-losses ops pytorch copy ranks} "
want() { [[ "$SECTIONS" == *" $1 "* ]]; }
R="$OUT/results.md"
{
  echo "# Tessera GPU measurements"
  echo
  echo "GPU: $GPU; $(date -u +%Y-%m-%dT%H:%MZ); commit $COMMIT"
  echo
} > "$R"

echo "== 1. GPU tests" >&2
"$BUILD/tests/exec_cuda_device_test" 2>&1 | tee "$OUT/gpu_tests.txt" >&2
tests_rc=${PIPESTATUS[0]}
{
  echo "## 1. Correctness: GPU tests"
  echo
  echo '```'
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |GPU kernel cases checked|tests? ran" "$OUT/gpu_tests.txt"
  echo '```'
  echo
} >> "$R"
# This machine has a GPU (nvidia-smi said so above), so every GPU test must
# have run and passed: a test that skipped here, or a kernel check that ran
# no case, is a failure, whatever the exit code says. The measurements below
# mean nothing on a device that fails them.
cases=$(grep -oE "^[0-9]+ GPU kernel cases checked" "$OUT/gpu_tests.txt" | grep -oE "^[0-9]+" | tail -1)
skipped=$(grep -cE "^\[  SKIPPED \] [A-Za-z_]+\.[A-Za-z_]+ \(" "$OUT/gpu_tests.txt")
failed=$(grep -cE "^\[  FAILED  \] [A-Za-z_]+\.[A-Za-z_]+ \(" "$OUT/gpu_tests.txt")
why=""
[ "$tests_rc" -ne 0 ] && why="$why; exec_cuda_device_test exited with $tests_rc"
[ "$failed" -gt 0 ] && why="$why; $failed test(s) failed"
[ "$skipped" -gt 0 ] && why="$why; $skipped test(s) skipped on a machine with a GPU ($GPU)"
[ "${cases:-0}" -eq 0 ] && why="$why; no GPU kernel case ran"
if [ -n "$why" ]; then
  msg="the GPU tests did not all pass${why}; see $OUT/gpu_tests.txt. No measurements were taken"
  echo "**FAILED**: $msg." >> "$R"
  echo "gpu_measure: $msg" >&2
  exit 1
fi
echo "All GPU tests passed ($cases GPU kernel cases)." >> "$R"
echo >> "$R"

if want losses; then
echo "== 2. zoo losses, cuda against cpu" >&2
{
  echo "## 2. Training losses, --device cuda against --device cpu (20 steps, synthetic data)"
  echo
  echo "Training amplifies rounding differences (a ReLU or a max that flips); the first step"
  echo "whose losses differ by more than 1e-5 says where, and the lower learning rate shows"
  echo "whether that is the kernels or the training's sensitivity."
  echo
  echo "| model | lr | max relative loss difference | first step over 1e-5 | final loss cpu | final loss cuda |"
  echo "|---|---|---|---|---|---|"
} >> "$R"
# spec|learning rate (sgd); the default 0.05 first, then a lower one for the
# models whose training is chaotic at it.
for run in "mlp:hidden=256|0.05" "cnn:channels=8,hidden=32|0.05" "lstm:hidden=64,seq=8,vocab=100|0.05" \
           "transformer:layers=2,d_model=64,heads=4,seq=16,vocab=100|0.05" \
           "wresnet:depth=18,base=8,image=16|0.05" "wresnet:depth=18,base=8,image=16|0.005"; do
  spec="${run%|*}"; lr="${run#*|}"; tag="${spec%%:*}_lr$lr"
  for dev in cpu cuda; do
    "$TRAIN" --device "$dev" --model "$spec" --data synthetic --synthetic-size 2048 --batch 32 --steps 20 \
      --lr "$lr" --progress none --no-eval --metrics "$OUT/loss_${tag}_$dev.jsonl" > /dev/null 2>> "$OUT/losses.err"
  done
  python3 - "$OUT/loss_${tag}_cpu.jsonl" "$OUT/loss_${tag}_cuda.jsonl" "$spec" "$lr" >> "$R" <<'PY'
import json, sys
def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p) if l.strip() and '"step"' in l]
    except OSError:
        return []
a, b = losses(sys.argv[1]), losses(sys.argv[2])
spec, lr = sys.argv[3], sys.argv[4]
if not a or len(a) != len(b):
    print(f"| {spec} | {lr} | run failed (see losses.err) | | | |")
else:
    rel = [abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b)]
    over = next((i + 1 for i, r in enumerate(rel) if r > 1e-5), None)
    print(f"| {spec} | {lr} | {max(rel):.2e} | {over or 'none'} | {a[-1]:.6f} | {b[-1]:.6f} |")
PY
done
echo >> "$R"
fi

if want ops; then
echo "== 3. where the operator time goes" >&2
{
  echo "## 3. Where the operator time goes (tessera-train --profile-ops; the slowest operator kinds)"
  echo
} >> "$R"
for run in "transformer:layers=24,d_model=768,heads=12,seq=256,vocab=8000|16" \
           "wresnet:depth=50,width=2,image=64,classes=10|64"; do
  spec="${run%|*}"; batch="${run#*|}"; ops="$OUT/ops_${spec%%:*}.txt"
  if "$TRAIN" --device cuda --model "$spec" --data synthetic --synthetic-size "$batch" --batch "$batch" --steps 1 \
       --progress none --no-eval --profile-ops "$ops" > /dev/null 2>> "$OUT/ops.err"; then
    { echo "$spec, batch $batch:"; echo '```'; sed -n '1p;4,14p' "$ops"; echo '```'; echo; } >> "$R"
  else
    echo "$spec: the profile failed (see ops.err)" >> "$R"
  fi
done
fi

if want pytorch; then
echo "== 4. throughput against PyTorch" >&2
{
  echo "## 4. Throughput against PyTorch eager, unconstrained and under a budget"
  echo
} >> "$R"
python3 "$HERE/gpu_vs_pytorch.py" --train "$TRAIN" --out "$OUT/pytorch.json" "$@" 2> "$OUT/pytorch.err" | tee -a "$R"
echo >> "$R"
fi

if want copy; then
echo "== 5. bandwidth while swapping" >&2
{
  echo "## 5. Host-device bandwidth while swapping"
  echo
} >> "$R"
"$BUILD/bench/tessera-bench-gpu-copy" 2>&1 | tee -a "$R"
echo >> "$R"
fi

ranks_rc=0
if want ranks; then
echo "== 6. several ranks on one GPU" >&2
{
  echo "## 6. Several ranks on one GPU through NCCL (TESSERA_NCCL_SHARED_GPU=1; bench/gpu_ranks.sh)"
  echo
} >> "$R"
bash "$HERE/gpu_ranks.sh" "$BUILD" "$OUT" 2> "$OUT/ranks.err" | tee -a "$R"
ranks_rc=${PIPESTATUS[0]}
echo >> "$R"
fi
echo "results: $R" >&2
exit $ranks_rc
