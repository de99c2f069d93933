#!/usr/bin/env bash
# Fused collectives against one collective per tensor, measured side by side:
# the transformer's data-parallel step under mpirun, --bucket-mb 0 and 25 in
# alternating rounds (this machine is shared and noisy, so the two always run
# under the same load), one thread per rank. Prints each round's median step
# and the medians over all rounds, with the collectives per step from the
# banner.
#   bench/fusion_bench.sh [BUILD_DIR] [NP] [ROUNDS] [MODEL]
set -euo pipefail
build=${1:-build}
np=${2:-4}
rounds=${3:-5}
model=${4:-transformer:layers=2,d_model=128,heads=4,seq=32,vocab=500}
train=$build/launch/tessera-train
[ -x "$train" ] || { echo "fusion_bench.sh: no $train; build first (README)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=30

# The median step time of one run's metrics, skipping the first 5 steps (warm-up).
median() {
  python3 - "$1" <<'PY'
import json, statistics, sys
times = [json.loads(l)["step_time_s"] for l in open(sys.argv[1])][5:]
print(f"{statistics.median(times) * 1e3:.2f}")
PY
}

echo "model $model, batch 32, $np ranks (mpirun, --threads 1), data parallel, $steps steps per run"
declare -A all
for ((r = 1; r <= rounds; r++)); do
  line="round $r:"
  for bucket in 0 25; do
    mpirun --oversubscribe -np "$np" "$train" --model "$model" --batch 32 --data synthetic --synthetic-size 960 \
      --steps $steps --progress none --no-eval --partition data --threads 1 --bucket-mb $bucket \
      --metrics "$work/m$bucket.jsonl" >"$work/out$bucket" 2>&1 || { tail -5 "$work/out$bucket"; exit 1; }
    m=$(median "$work/m$bucket.jsonl")
    all[$bucket]+="$m "
    line+=" --bucket-mb $bucket ${m} ms;"
  done
  echo "$line"
done
for bucket in 0 25; do
  c=$(grep -o '[0-9]* collectives\? per step' "$work/out$bucket")
  med=$(python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" ${all[$bucket]})
  echo "--bucket-mb $bucket: median step $med ms over $rounds rounds; $c"
done
python3 -c "import statistics,sys; a=statistics.median(map(float, sys.argv[1].split())); b=statistics.median(map(float, sys.argv[2].split())); print(f'fused / unfused: {b / a:.3f}')" "${all[0]}" "${all[25]}"
