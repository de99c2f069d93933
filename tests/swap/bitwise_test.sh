#!/usr/bin/env bash
# Training under a memory budget changes no bits (the first bar): one
# model, a few steps unconstrained, then with --device-mem at 1/R of what the
# run needs for each ratio R; losses and every checkpointed tensor must be
# bit-identical, and each step must stay inside its arena (tessera-train also
# checks, every step, that the swap bytes and the arena high water equal its
# swap plan's prediction).
# With TESSERA_TEST_NP=N both runs are mpirun -np N jobs (give --partition in
# the flags); the ratios are of rank 0's share.
#   bitwise_test.sh TESSERA_TRAIN MODEL "2 4 8 12" POLICY [TRAIN FLAGS]
set -euo pipefail
train=$1 model=$2 ratios=$3 policy=$4
shift 4
launch=()
if [ -n "${TESSERA_TEST_NP:-}" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  launch=(mpirun --oversubscribe -np "$TESSERA_TEST_NP")
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --data synthetic --synthetic-size 256 --batch 16 --steps 4 --lr-schedule constant
        --optimizer adam --progress none --no-eval --swap-time-limit 5 --swap-generations 15 "$@")

"${launch[@]}" "$train" "${common[@]}" --metrics "$work/full.jsonl" --checkpoint "$work/full" >/dev/null
footprint=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][0]["footprint_bytes"])' \
            "$work/full.jsonl")
failed=0
for r in $ratios; do
  arena=$(( footprint / r / 64 * 64 ))
  tag="$model $policy 1/$r ($arena of $footprint bytes)"
  if ! "${launch[@]}" "$train" "${common[@]}" --device-mem "$arena" --swap "$policy" --metrics "$work/s.jsonl" \
      --checkpoint "$work/s" >"$work/log" 2>&1; then
    echo "FAIL $tag: tessera-train failed:"; tail -5 "$work/log"; failed=1; continue
  fi
  # With --host-updates all, the plan must really update on the host.
  if [[ " $* " == *" --host-updates all "* ]] && ! grep -qE "\| [1-9][0-9]* optimizer updates? on the host" "$work/log"; then
    echo "FAIL $tag: no optimizer update ran on the host:"; grep "swap advisor" "$work/log"; failed=1; continue
  fi
  if out=$(python3 "$here/compare_bitwise.py" "$work/full.jsonl" "$work/s.jsonl" \
      "$work/full/checkpoint.safetensors" "$work/s/checkpoint.safetensors" 2>&1); then
    echo "ok   $tag: $out"
  else
    echo "FAIL $tag: $out"; failed=1
  fi
  rm -rf "$work/s" "$work/s.jsonl"
done
exit $failed
