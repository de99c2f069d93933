#!/usr/bin/env bash
# The main job on CPU: installs the Debian dependencies, builds, and trains the
# zoo's CNN on Fashion-MNIST (from Debian's dataset-fashion-mnist) on the CPU
# device, writing per-step metrics and a checkpoint under ./runs/. Extra
# arguments go to tessera-train and win over these defaults, e.g.
# `bash scripts/main.sh --model mlp --epochs 10` trains the MLP for 10 epochs,
# into runs/mlp/ and runs/mlp.jsonl.
# TESSERA_MAIN_DRY_RUN=1 prints the tessera-train command, one argument a
# line, without installing, building or training.
set -euo pipefail
cd "$(dirname "$0")/.."

user=("$@")
# Whether the user gave one of these flags (as `--flag value` or `--flag=value`).
given() {
  local a f
  for a in "${user[@]}"; do
    for f in "$@"; do [[ $a == "$f" || $a == "$f="* ]] && return 0; done
  done
  return 1
}
# The value the user gave --model, or "".
user_model() {
  local i
  for ((i = 0; i < ${#user[@]}; i++)); do
    [[ ${user[i]} == --model=* ]] && { echo "${user[i]#--model=}"; return; }
    [[ ${user[i]} == --model ]] && { echo "${user[i+1]:-}"; return; }
  done
}

run=fashion-mnist
defaults=()
if given --model; then
  # A run directory of the model's own, so that two models never share one.
  run=$(basename "$(user_model)" .onnx | tr -c 'A-Za-z0-9_.\n-' '-')
else
  defaults+=(--model cnn --data fashion-mnist)
fi
given --epochs --steps || defaults+=(--epochs 4)
given --metrics || defaults+=(--metrics "runs/$run.jsonl")
given --checkpoint || defaults+=(--checkpoint "runs/$run")
command=(./build/launch/tessera-train "${defaults[@]}" "${user[@]}")

if [[ ${TESSERA_MAIN_DRY_RUN:-0} == 1 ]]; then
  printf '%s\n' "${command[@]}"
  exit 0
fi
bash scripts/deps.sh
bash scripts/build.sh
mkdir -p runs
exec "${command[@]}"
