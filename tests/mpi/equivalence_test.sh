#!/usr/bin/env bash
# Partitioned training equals single-process training (the equivalence and
# bytes bars): for one model, 20 steps (or --steps) on one process, then under
# mpirun -np N for each N and strategy; losses within 1e-5 relative at every
# step, weights within 1e-4 after the last step, and the bytes each step sends equal
# the plan's count.
#   equivalence_test.sh TESSERA_TRAIN TESSERA_PLAN MODEL "2 3 4 8" "tofu data owt equalchop" [TRAIN FLAGS]
# (batch 24 and 20 steps unless the flags say --batch or --steps). --loss-rtol R
# and --weight-tol W (compare_runs.py's bounds) go to the comparison, not to
# tessera-train.
set -euo pipefail
train=$1 plan=$2 model=$3 nps=$4 strategies=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The partition flags go to tessera-plan too, so that it prints the same plan.
plan_flags=()
data=(--data auto)
batch=24
steps=20
args=("$@")
train_flags=()
compare_flags=()
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in --batch | --steps | --loss-rtol | --weight-tol) continue ;; esac
  case "${args[i - 1]:-}" in
    --batch | --steps) continue ;;
    --loss-rtol | --weight-tol) compare_flags+=("${args[i - 1]}" "${args[i]}"); continue ;;
  esac
  train_flags+=("${args[i]}")
done
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --batch) batch=${args[i + 1]} ;;
    --steps) steps=${args[i + 1]} ;;
    --force) plan_flags+=(--force "${args[i + 1]}") ;;
    --no-staged-reductions | --sync-batch-norm) plan_flags+=("${args[i]}") ;;
    --bucket-mb | --precision | --grad-reduce-dtype) plan_flags+=("${args[i]}" "${args[i + 1]}") ;;
    --data) data=() ;;
  esac
done
common=(--model "$model" "${data[@]}" --synthetic-size 960 --batch "$batch" --steps "$steps" --lr-schedule constant
        --progress none --no-eval "${train_flags[@]}")

"$train" "${common[@]}" --metrics "$work/single.jsonl" --checkpoint "$work/single" >/dev/null
failed=0
for n in $nps; do
  for s in $strategies; do
    tag="$model np=$n $s"
    if ! mpirun --oversubscribe -np "$n" "$train" "${common[@]}" --partition "$s" --metrics "$work/p.jsonl" \
        --checkpoint "$work/p" >"$work/log" 2>&1; then
      echo "FAIL $tag: tessera-train failed:"; tail -5 "$work/log"; failed=1; continue
    fi
    "$plan" --model "$model" --batch "$batch" --devices "$n" --strategy "$s" --executable "${plan_flags[@]}" --format json \
      -o "$work/plan.json" >/dev/null
    single_cut=()
    if [ "$n" = 2 ] || [ "$n" = 3 ]; then single_cut=(--single-cut); fi
    if out=$(python3 "$here/compare_runs.py" "$work/single.jsonl" "$work/p.jsonl" --plan "$work/plan.json" \
        "${single_cut[@]}" "${compare_flags[@]}" --weights "$work/single/checkpoint.safetensors" "$work/p/checkpoint.safetensors" 2>&1); then
      echo "ok   $tag: $out"
    else
      echo "FAIL $tag: $out"; failed=1
    fi
    rm -rf "$work/p" "$work/p.jsonl"
  done
done
exit $failed
