#!/usr/bin/env bash
# A checkpoint written at N=4 resumes at N=2 and at N=1 and continues the
# losses of an uninterrupted run (the resharding bar).
#   reshard_test.sh TESSERA_TRAIN MODEL
set -euo pipefail
train=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model "$model" --data synthetic --synthetic-size 960 --batch 24 --lr-schedule constant --progress none
        --no-eval)

"$train" "${common[@]}" --steps 20 --metrics "$work/whole.jsonl" >/dev/null
mpirun --oversubscribe -np 4 "$train" "${common[@]}" --steps 10 --partition tofu --checkpoint "$work/ck4" \
  --metrics "$work/first.jsonl" >/dev/null
python3 "$here/compare_runs.py" "$work/whole.jsonl" "$work/first.jsonl" >/dev/null
failed=0
for n in 2 1; do
  rm -rf "$work/ck"; cp -r "$work/ck4" "$work/ck"
  if [ "$n" = 1 ]; then
    "$train" "${common[@]}" --steps 20 --checkpoint "$work/ck" --resume --metrics "$work/rest.jsonl" >"$work/log" 2>&1
  else
    mpirun --oversubscribe -np "$n" "$train" "${common[@]}" --steps 20 --partition tofu --checkpoint "$work/ck" \
      --resume --metrics "$work/rest.jsonl" >"$work/log" 2>&1
  fi
  grep -q "resumed from .* at step 10" "$work/log" || { echo "FAIL N=$n did not resume at step 10:"; cat "$work/log"; failed=1; continue; }
  # The single-process run logs no planned bytes: compare losses only.
  if [ "$n" = 1 ]; then
    python3 - "$work/whole.jsonl" "$work/rest.jsonl" <<'PY' || failed=1
import json, sys
a = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1])) if "step" in j}
b = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2])) if "step" in j}
assert sorted(b) == list(range(11, 21)), f"resumed steps {sorted(b)}"
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
if worst > 1e-5:
    sys.exit(f"FAIL N=1: losses differ by {worst:.3g} relative")
print(f"ok   4 ranks -> 1 process: steps 11-20 within {worst:.2e} relative")
PY
  else
    out=$(python3 "$here/compare_runs.py" "$work/whole.jsonl" "$work/rest.jsonl" --from-step 11) \
      && echo "ok   4 ranks -> $n ranks: $out" || { echo "FAIL N=$n: $out"; failed=1; }
  fi
done
exit $failed
