#!/usr/bin/env bash
# bf16 (or fp16) under a memory budget: one process with --precision bf16 and
# --device-mem a quarter and a twelfth of its footprint trains bit-identically
# to the unconstrained bf16 run (every step's loss, and every tensor of the
# final checkpoint, the same bits), swapping by the planner's plan. With NP
# above 1, every run is partitioned under mpirun -np NP (the budget is each
# rank's, a fraction of rank 0's footprint). PRECISION fp16 runs the same
# with loss scaling, its scale and skips the same too.
#   precision_swap_test.sh TESSERA_TRAIN MODEL [NP] [PRECISION]
set -euo pipefail
train=$1 model=$2 np=${3:-1} precision=${4:-bf16}
launch=()
if [ "$np" -gt 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  launch=(mpirun --oversubscribe -np "$np")
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --precision "$precision" --device cpu --data synthetic --synthetic-size 480 --batch 24 --steps 10
        --lr-schedule constant --progress none --no-eval --swap-time-limit 5 --swap-generations 20)

"${launch[@]}" "$train" "${common[@]}" --metrics "$work/free.jsonl" --checkpoint "$work/free" >/dev/null
footprint=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][0]["footprint_bytes"])' \
            "$work/free.jsonl")
for ratio in 4 12; do
  budget=$(( footprint / ratio / 64 * 64 ))
  if ! "${launch[@]}" "$train" "${common[@]}" --device-mem "$budget" --swap advisor --metrics "$work/b$ratio.jsonl" \
      --checkpoint "$work/b$ratio" >"$work/log$ratio" 2>&1; then
    echo "FAIL: $precision at 1/$ratio of $footprint bytes:"; tail -5 "$work/log$ratio"; exit 1
  fi
  python3 - "$here/../mpi" "$work/free" "$work/b$ratio" "$work/free.jsonl" "$work/b$ratio.jsonl" "$ratio" "$np" \
    "$precision" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from compare_runs import load_safetensors
free_dir, budget_dir, free_m, budget_m, ratio = sys.argv[2:7]
steps = lambda p: [json.loads(l) for l in open(p) if '"step"' in l]
free, budget = steps(free_m), steps(budget_m)
assert len(free) == len(budget) == 10, (len(free), len(budget))
assert all(r["swap_in_bytes"] > 0 for r in budget), "the budgeted run never swapped"
same = lambda a, b: a["loss"] == b["loss"] and a.get("loss_scale") == b.get("loss_scale")
diff = [(a["step"], a["loss"], b["loss"]) for a, b in zip(free, budget) if not same(a, b)]
assert not diff, f"losses differ at 1/{ratio}: {diff[:3]}"
a = load_safetensors(f"{free_dir}/checkpoint.safetensors")
b = load_safetensors(f"{budget_dir}/checkpoint.safetensors")
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
bad = [k for k in a if a[k] != b[k]]
assert not bad, f"tensors differ at 1/{ratio}: {bad[:3]}"
print(f"ok   {sys.argv[8]} at 1/{ratio} on {sys.argv[7]} process(es): 10 steps and {len(a)} checkpoint tensors bit-identical to the unconstrained run")
PY
done
