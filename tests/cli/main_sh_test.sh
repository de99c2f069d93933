#!/usr/bin/env bash
# scripts/main.sh, the README's main job: the user's flags win over its
# defaults (the README's own example, `--model mlp --epochs 10`, once ended
# with "--model: At Most 1 required but received 2"), and a run of another
# model gets a run directory of its own.
# Usage: main_sh_test.sh PATH/TO/tessera-train SOURCE_DIR
set -uo pipefail
TRAIN="$(realpath "$1")"
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

dry() { TESSERA_MAIN_DRY_RUN=1 bash "$SRC/scripts/main.sh" "$@" | tr '\n' ' '; }
count() { grep -o -- "$1" <<<"$2" | wc -l; }

# The README's example as written: one --model, one --epochs, the user's values.
readme=$(dry --model mlp --epochs 10)
[ "$(count "--model " "$readme")" = 1 ] && [ "$(count "--epochs " "$readme")" = 1 ] &&
  grep -qF -- "--model mlp --epochs 10" <<<"$readme" && grep -qF -- "--checkpoint runs/mlp " <<<"$readme" ||
  { echo "FAIL readme-example: $readme"; fail=1; }
defaults=$(dry)
grep -qF -- "--model cnn --data fashion-mnist --epochs 4 --metrics runs/fashion-mnist.jsonl --checkpoint runs/fashion-mnist" \
  <<<"$defaults" || { echo "FAIL defaults: $defaults"; fail=1; }
# --steps excludes --epochs, so it displaces the default; --flag=value counts.
steps=$(dry --model=transformer:layers=2 --steps 5)
[ "$(count "--epochs" "$steps")" = 0 ] && grep -qF -- "--checkpoint runs/transformer-layers-2 " <<<"$steps" ||
  { echo "FAIL steps: $steps"; fail=1; }

# The merged command runs: tessera-train accepts it as main.sh builds it.
mapfile -t cmd < <(TESSERA_MAIN_DRY_RUN=1 bash "$SRC/scripts/main.sh" --model mlp:layers=2,hidden=16,input=20,classes=4 \
  --data synthetic --synthetic-size 128 --batch 32 --steps 2 --progress lines)
cmd[0]="$TRAIN"
mkdir -p "$TMP/runs"
expect merged-command-trains 0 "step 2" -- bash -c 'cd "$1" && shift && "$@"' _ "$TMP" "${cmd[@]}"
[ -f "$TMP/runs/mlp-layers-2-hidden-16-input-20-classes-4.jsonl" ] || { echo "FAIL run-dir: $(ls "$TMP/runs")"; fail=1; }
exit $fail
