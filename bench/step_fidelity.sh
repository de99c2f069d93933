#!/usr/bin/env bash
# Whole-step simulator fidelity: for each model, at N = 1 and 2 ranks (one rank
# per core, one thread each; N = 2 under mpirun with the tofu plan), with no
# budget and under a budget of 1/RATIO of the footprint, train a few steps with
# --simulate-steps and compare the simulator's prediction of each step (from
# the operator times measured inside that step, sim/step_sim.h) with the
# measured step time: medians over the steps after the first. The bar is
# agreement within 15%. A benchmark, not a test: it reports.
#   bench/step_fidelity.sh [BUILD_DIR] [RATIO] [STEPS]
set -euo pipefail
build=${1:-build} ratio=${2:-4} steps=${3:-8}
train=$build/launch/tessera-train
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
models=("mlp:layers=8,hidden=512,input=256,classes=8" "cnn:convs=2,depth=4,channels=8,hidden=64"
        "lstm:hidden=128,seq=16,vocab=256" "transformer:layers=4,d_model=128,heads=4,seq=32,vocab=256"
        "wresnet:depth=18,base=8,image=32")
printf "%-55s %2s %8s %12s %12s %8s %10s\n" model N budget measured_ms simulated_ms error exposed_ms
run() {  # N, budget args...
  local n=$1; shift
  if [ "$n" = 1 ]; then "$train" "$@"; else mpirun -np "$n" --bind-to core "$train" "$@"; fi
}
for m in "${models[@]}"; do
  common=(--model "$m" --data synthetic --synthetic-size 512 --batch 32 --progress none --no-eval --optimizer adam
          --threads 1 --steps "$steps" --simulate-steps --swap-time-limit 5)
  for n in 1 2; do
    fp=0
    for budget in none quarter; do
      extra=()
      # Each rank's budget is 1/RATIO of its own footprint, from the run without one.
      [ "$budget" = quarter ] && extra=(--device-mem $(( fp / ratio / 64 * 64 )))
      if ! run "$n" "${common[@]}" "${extra[@]}" --metrics "$work/s.jsonl" >"$work/log" 2>&1; then
        printf "%-55s %2s %8s failed: %s\n" "$m" "$n" "$budget" "$(grep -m1 'error:' "$work/log" || tail -1 "$work/log")"; continue
      fi
      [ "$budget" = none ] &&
        fp=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["footprint_bytes"])' "$work/s.jsonl")
      python3 - "$work/s.jsonl" "$m" "$n" "$budget" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l][1:]
measured = statistics.median(r["step_time_s"] for r in rows)
simulated = statistics.median(r["simulated_step_time_s"] for r in rows)
exposed = statistics.median(r["simulated_exposed_comm_s"] + r["simulated_exposed_swap_s"] for r in rows)
print(f"{sys.argv[2]:55s} {sys.argv[3]:>2s} {sys.argv[4]:>8s} {measured*1e3:12.2f} {simulated*1e3:12.2f} "
      f"{(simulated - measured) / measured * 100:+7.1f}% {exposed*1e3:10.2f}")
PY
      rm -f "$work/s.jsonl"
    done
  done
done
