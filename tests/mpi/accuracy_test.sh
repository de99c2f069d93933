#!/usr/bin/env bash
# Fashion-MNIST under mpirun -np 4 --partition tofu reaches the single-process
# test accuracy within 0.5 points (the accuracy bar).
#   accuracy_test.sh TESSERA_TRAIN [MODEL] [EPOCHS]
set -euo pipefail
train=$1 model=${2:-mlp:hidden=256} epochs=${3:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model "$model" --data fashion-mnist --batch 128 --epochs "$epochs" --progress none)
"$train" "${common[@]}" --metrics "$work/single.jsonl" >/dev/null
mpirun --oversubscribe -np 4 "$train" "${common[@]}" --partition tofu --metrics "$work/four.jsonl" >/dev/null
python3 - "$work/single.jsonl" "$work/four.jsonl" <<'PY'
import json, sys
def acc(path):
    return [j["test_accuracy"] for j in map(json.loads, open(path)) if "test_accuracy" in j][-1] * 100
a, b = acc(sys.argv[1]), acc(sys.argv[2])
if abs(a - b) > 0.5:
    sys.exit(f"FAIL: 4 ranks reach {b:.2f}% test accuracy, one process {a:.2f}% (more than 0.5 points apart)")
print(f"ok   Fashion-MNIST test accuracy: one process {a:.2f}%, 4 ranks (tofu) {b:.2f}%, {abs(a - b):.2f} points apart")
PY
