#!/usr/bin/env bash
# bf16 and fp16 against fp32 on Fashion-MNIST, same seed: the zoo's mlp for 10
# epochs and cnn for 4, each trained once per precision on the CPU; prints each
# run's test accuracy and its difference from fp32 in points (the bar is 0.5),
# with the step time of each, and fp16's skipped steps. Takes tens of minutes
# on 2 cores.
#   bench/precision_accuracy.sh [BUILD_DIR] [OUT_DIR] [PRECISIONS]
# PRECISIONS: the low precisions to run beside fp32 (default "bf16 fp16").
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
lows=${3:-bf16 fp16}
train=$build/launch/tessera-train
[ -x "$train" ] || { echo "precision_accuracy.sh: no $train; build first (README)" >&2; exit 1; }
mkdir -p "$out"

# The last test accuracy and the median step time of one run's metrics.
summary() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = [r["test_accuracy"] for r in rows if "test_accuracy" in r][-1]
times = [r["step_time_s"] for r in rows if "step_time_s" in r][5:]
skipped = max([r.get("skipped_steps", 0) for r in rows])
print(f"{100 * acc:.2f} {1e3 * statistics.median(times):.1f} {skipped}")
PY
}

for job in "mlp 10" "cnn 4"; do
  read -r model epochs <<<"$job"
  declare -A acc=()
  for p in fp32 $lows; do
    "$train" --model "$model" --epochs "$epochs" --precision "$p" --device cpu --seed 1 --progress none \
      --metrics "$out/$model-$p.jsonl" >"$out/$model-$p.out" 2>&1 || { tail -5 "$out/$model-$p.out"; exit 1; }
    read -r a t skipped <<<"$(summary "$out/$model-$p.jsonl")"
    acc[$p]=$a
    echo "$model $epochs epochs $p: test accuracy $a%, median step $t ms, $skipped steps skipped"
  done
  for p in $lows; do
    python3 -c "import sys; d = float(sys.argv[2]) - float(sys.argv[1]); print(f'$model: $p - fp32 = {d:+.2f} points (bar: within 0.5)')" \
      "${acc[fp32]}" "${acc[$p]}"
  done
done
echo "metrics and outputs in $out"
