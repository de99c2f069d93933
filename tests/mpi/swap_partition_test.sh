#!/usr/bin/env bash
# Partitioning and swapping together (the combined bar): mpirun -np 4
# with --partition tofu and a --device-mem below what each rank's share needs;
# every rank plans swaps for its lowered graph, and the losses stay within
# 1e-5 of the single-process run at every step, weights within 1e-4, with
# each rank's communication bytes as planned.
#   swap_partition_test.sh TESSERA_TRAIN MODEL RATIO [TRAIN FLAGS]
# DEVICE_MEM_PLUS (bytes, default 0): what the device keeps beside the arena
# out of --device-mem (a CUDA device's kernel workspaces, kCudaWorkspacesBytes).
set -euo pipefail
train=$1 model=$2 ratio=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model "$model" --data synthetic --synthetic-size 480 --batch 24 --steps 10 --lr-schedule constant
        --progress none --no-eval --swap-time-limit 5 --swap-generations 10 "$@")

"$train" "${common[@]}" --metrics "$work/single.jsonl" --checkpoint "$work/single" >/dev/null
mpirun --oversubscribe -np 4 "$train" "${common[@]}" --partition tofu --metrics "$work/p.jsonl" >/dev/null
shard=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][0]["footprint_bytes"])' \
        "$work/p.jsonl")
single=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][0]["footprint_bytes"])' \
         "$work/single.jsonl")
arena=$(( shard / ratio / 64 * 64 ))
rm -f "$work/p.jsonl"
if ! mpirun --oversubscribe -np 4 "$train" "${common[@]}" --partition tofu --device-mem "$((arena + ${DEVICE_MEM_PLUS:-0}))" --swap advisor \
    --metrics "$work/p.jsonl" --checkpoint "$work/p" >"$work/log" 2>&1; then
  echo "FAIL: tessera-train under mpirun failed:"; tail -8 "$work/log"; exit 1
fi
python3 - "$work/p.jsonl" "$arena" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
arena = int(sys.argv[2])
assert all(r["arena_bytes"] == arena and r["arena_high_water"] <= arena for r in rows), rows[0]
assert all(r["swap_in_bytes"] > 0 for r in rows), "rank 0 never swapped"
PY
out=$(python3 "$here/compare_runs.py" "$work/single.jsonl" "$work/p.jsonl" \
      --weights "$work/single/checkpoint.safetensors" "$work/p/checkpoint.safetensors")
echo "ok   $model np=4 tofu, arena $arena bytes: single process needs $single, rank 0's share $shard" \
     "(${ratio}x its arena): $out"
