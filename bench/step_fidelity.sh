#!/usr/bin/env bash
# Whole-step simulator fidelity: for each model, at N = 1 and 2 ranks (one rank
# per core, one thread each; N = 2 under mpirun with the tofu plan), with no
# budget and under a budget of 1/RATIO of the footprint, train a few steps with
# --simulate-steps and compare the simulator's prediction of each step (from
# the operator times measured inside that step, sim/step_sim.h) with the
# measured step time: medians over the steps after the first. The bar is
# agreement within 15%. A benchmark, not a test: it reports.
#
# `tessera-bench measure` does the runs and the medians; this script only
# names the five models and the settings of docs/benchmarks.md. Arguments
# after the third go to tessera-bench, e.g. --format html -o fidelity.html.
#   bench/step_fidelity.sh [BUILD_DIR] [RATIO] [STEPS] [tessera-bench measure flags...]
set -euo pipefail
build=${1:-build} ratio=${2:-4} steps=${3:-8}
shift $(($# < 3 ? $# : 3))
models=("mlp:layers=8,hidden=512,input=256,classes=8" "cnn:convs=2,depth=4,channels=8,hidden=64"
        "lstm:hidden=128,seq=16,vocab=256" "transformer:layers=4,d_model=128,heads=4,seq=32,vocab=256"
        "wresnet:depth=18,base=8,image=32")
args=()
for m in "${models[@]}"; do args+=(--model "$m"); done
exec "$build/launch/tessera-bench" measure "${args[@]}" --batch 32 --threads 1 --steps "$steps" --devices 1,2 \
    --strategies tofu --budgets "none,1/$ratio" --search-time 5 "$@"
