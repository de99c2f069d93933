#!/usr/bin/env bash
# Per-device memory of a partitioned model against the single device's
# (the bar: at most 1.1 x single / N at N = 3 and 7, where no dimension
# of mlp at batch 96 divides evenly by 7). For each N: the plan's estimate
# (tessera-plan, per_device_peak_bytes) and the executor's measured peak on
# rank 0, which holds the longest block of every uneven split. A benchmark,
# not a test: it reports.
#   bench/partition_memory.sh [BUILD_DIR] [MODEL] [BATCH] ["3 7"]
set -euo pipefail
build=${1:-build} model=${2:-mlp} batch=${3:-96} nps=${4:-"3 7"}
train=$build/launch/tessera-train plan=$build/launch/tessera-plan
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --data synthetic --batch "$batch" --steps 2 --progress none --no-eval)

# The largest peak_device_bytes of a run's metrics (rank 0 writes them).
peak_of() {
  python3 -c 'import json, sys; print(max(json.loads(l)["peak_device_bytes"] for l in open(sys.argv[1]) if "peak_device_bytes" in l))' "$1"
}

"$train" "${common[@]}" --metrics "$work/single.jsonl" >"$work/log" 2>&1 ||
  { echo "single-process run failed:"; tail -3 "$work/log"; exit 1; }
single=$(peak_of "$work/single.jsonl")
printf "%-10s %3s %14s %14s %10s %14s %10s\n" model N single_peak measured_peak "x single/N" plan_estimate "x single/N"
for n in $nps; do
  if ! mpirun --oversubscribe -np "$n" "$train" "${common[@]}" --no-replicate-weights --metrics "$work/p.jsonl" \
      >"$work/log" 2>&1; then
    echo "np=$n failed:"; tail -3 "$work/log"; exit 1
  fi
  measured=$(peak_of "$work/p.jsonl")
  rm -f "$work/p.jsonl"
  "$plan" --model "$model" --batch "$batch" --devices "$n" --no-replicate-weights --format json -o "$work/plan.json" >/dev/null
  python3 - "$work/plan.json" "$model" "$n" "$single" "$measured" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
model, n, single, measured = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
est, est_single = plan["per_device_peak_bytes"], plan["single_device_peak_bytes"]
print(f"{model:<10} {n:>3} {single:>14,} {measured:>14,} {measured / (single / n):>10.3f} "
      f"{est:>14,} {est / (est_single / n):>10.3f}")
PY
done
