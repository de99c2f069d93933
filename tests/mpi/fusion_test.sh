#!/usr/bin/env bash
# Fused collectives change how many collectives run, never a bit of the
# result: for each model, rank count and strategy, 10 steps with --bucket-mb 0
# (one collective per tensor), with a bucket of a few KiB (several buckets) and
# with the default 25 MiB (one bucket for these small models). Every run must
# have the unfused run's losses and final weights bit for bit and send the
# same bytes each step, while data parallelism runs fewer collectives. Rank counts of
# 3 and 4: with 2 ranks every ring sum has two terms, which add alike in any
# order, so only k > 2 could tell a wrongly fused ring apart.
#   fusion_test.sh TESSERA_TRAIN
set -uo pipefail
TRAIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUN=(--data synthetic --synthetic-size 480 --batch 24 --steps 10 --lr-schedule constant --progress none --no-eval)
fail=0

# run TAG NP MODEL STRATEGY BUCKET_MB: trains, keeping the banner, metrics and weights under TAG.
run() {
  local tag=$1 np=$2 model=$3 strategy=$4 bucket=$5
  if ! mpirun --oversubscribe -np "$np" "$TRAIN" --model "$model" "${RUN[@]}" --partition "$strategy" \
      --bucket-mb "$bucket" --metrics "$TMP/$tag.jsonl" --checkpoint "$TMP/$tag" >"$TMP/$tag.out" 2>&1; then
    echo "FAIL $tag: tessera-train failed:"; tail -5 "$TMP/$tag.out"; fail=1; return 1
  fi
}

comm_nodes() { grep -o '[0-9]* collectives\? per step' "$1" | grep -o '^[0-9]*'; }
field() { grep -o "\"$2\":[^,]*" "$1"; }

for model in "transformer:layers=2,d_model=32,heads=2,seq=8,vocab=50" "cnn:channels=4,hidden=16"; do
  for np in 3 4; do
    for strategy in data tofu; do
      base="${model%%:*}-$np-$strategy"
      run "$base-0" "$np" "$model" "$strategy" 0 || continue
      for bucket in 0.004 25; do
        tag="$base-$bucket"
        run "$tag" "$np" "$model" "$strategy" "$bucket" || continue
        what="$model np=$np $strategy --bucket-mb $bucket"
        alone=$(comm_nodes "$TMP/$base-0.out") fused=$(comm_nodes "$TMP/$tag.out")
        if ! cmp -s <(field "$TMP/$base-0.jsonl" loss) <(field "$TMP/$tag.jsonl" loss); then
          echo "FAIL $what: the losses differ from --bucket-mb 0"; fail=1
        elif ! cmp -s "$TMP/$base-0/checkpoint.safetensors" "$TMP/$tag/checkpoint.safetensors"; then
          echo "FAIL $what: the final weights differ from --bucket-mb 0"; fail=1
        elif ! cmp -s <(field "$TMP/$base-0.jsonl" comm_bytes) <(field "$TMP/$tag.jsonl" comm_bytes); then
          echo "FAIL $what: the bytes sent differ from --bucket-mb 0"; fail=1
        elif [ "$strategy" = data ] && ! [ "$fused" -lt "$alone" ]; then
          echo "FAIL $what: $fused collectives per step, unfused $alone"; fail=1
        else
          echo "ok   $what: losses, weights and bytes equal unfused bit for bit; $fused collectives per step, unfused $alone"
        fi
      done
    done
  done
done
exit $fail
