#!/usr/bin/env bash
# Simulator fidelity: for each model, train a few steps under a
# budget of 1/RATIO of its footprint and compare the swap plan's predicted
# step time with the measured one (median over the steps after the first).
# The bar is agreement within 15%. A benchmark, not a test: it reports.
# Two predictions: the plan's (operator times from the profiling pass, each
# operator alone), and the same plan re-simulated with the times the operators
# took inside each measured step (median over steps), which separates the
# simulator's error from the profiler's.
#   bench/swap_fidelity.sh [TESSERA_TRAIN] [RATIO] [STEPS]
set -euo pipefail
train=${1:-build/launch/tessera-train} ratio=${2:-4} steps=${3:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=("mlp:layers=8,hidden=512,input=256,classes=8" "cnn:convs=2,depth=4,channels=8,hidden=64"
        "lstm:hidden=128,seq=16,vocab=256" "transformer:layers=4,d_model=128,heads=4,seq=32,vocab=256"
        "wresnet:depth=18,base=8,image=32")
printf "%-55s %6s %10s %12s %12s %8s %14s %8s\n" model ratio arena predicted_ms measured_ms error resimulated_ms error
for m in "${models[@]}"; do
  common=(--model "$m" --data synthetic --synthetic-size 512 --batch 32 --progress none --no-eval --optimizer adam)
  "$train" "${common[@]}" --steps 1 --metrics "$work/full.jsonl" >/dev/null
  fp=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["footprint_bytes"])' "$work/full.jsonl")
  arena=$(( fp / ratio / 64 * 64 ))
  if ! "$train" "${common[@]}" --steps "$steps" --device-mem "$arena" --swap advisor --metrics "$work/s.jsonl" >"$work/log" 2>&1; then
    printf "%-55s %6s failed: %s\n" "$m" "$ratio" "$(tail -1 "$work/log")"; continue
  fi
  python3 - "$work/s.jsonl" "$m" "$ratio" "$arena" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l][1:]
measured = statistics.median(r["step_time_s"] for r in rows)
predicted = rows[-1]["predicted_step_time_s"]
resim = statistics.median(r["resimulated_step_time_s"] for r in rows)
print(f"{sys.argv[2]:55s} {sys.argv[3]:>6s} {int(sys.argv[4]):10d} {predicted*1e3:12.2f} {measured*1e3:12.2f} "
      f"{(predicted - measured) / measured * 100:+7.1f}% {resim*1e3:14.2f} {(resim - measured) / measured * 100:+7.1f}%")
PY
  rm -f "$work/s.jsonl" "$work/full.jsonl"
done
