#!/usr/bin/env bash
# Plans as files: `tessera-plan ... --format json -o p.json` then
# `tessera-train --plan p.json` runs that partition and swap plan without
# searching again, with losses bit-identical to a run that searches: one
# process and under mpirun -np 4, with and without a budget. A plan made for
# another run is refused with an error naming the difference.
#   plan_file_test.sh TESSERA_TRAIN TESSERA_PLAN
set -uo pipefail
TRAIN=$1 PLAN=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../cli/expect.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MODEL=(--model "cnn:channels=4,hidden=16" --batch 24)
RUN=(--data synthetic --synthetic-size 480 --steps 6 --lr-schedule constant --progress none --no-eval)

same_losses() {  # same_losses NAME A.jsonl B.jsonl
    if python3 - "$2" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"step"' in l] for p in sys.argv[1:3])
sys.exit(0 if a == b and len(a) == 6 else 1)
PY
    then echo "ok   $1: 6 losses bit-identical"; else echo "FAIL $1: losses differ"; fail=1; fi
}

# case NAME NP PLAN_FLAGS... -- TRAIN_FLAGS...
case_run() {
    local name=$1 np=$2; shift 2
    local plan_flags=() train_flags=()
    while [ "$1" != -- ]; do plan_flags+=("$1"); shift; done
    shift
    train_flags=("$@")
    local launch=()
    [ "$np" -gt 1 ] && launch=(mpirun --oversubscribe -np "$np")
    "$PLAN" "${MODEL[@]}" --devices "$np" --format json -o "$TMP/$name.json" "${plan_flags[@]}" >/dev/null \
        || { echo "FAIL $name: tessera-plan"; fail=1; return; }
    "${launch[@]}" "$TRAIN" "${MODEL[@]}" "${RUN[@]}" "${train_flags[@]}" --metrics "$TMP/$name-search.jsonl" \
        >/dev/null 2>&1 || { echo "FAIL $name: searching run"; fail=1; return; }
    "${launch[@]}" "$TRAIN" "${MODEL[@]}" "${RUN[@]}" "${train_flags[@]}" --plan "$TMP/$name.json" \
        --metrics "$TMP/$name-file.jsonl" >"$TMP/$name.out" 2>&1 || { echo "FAIL $name: --plan run"; cat "$TMP/$name.out"; fail=1; return; }
    same_losses "$name" "$TMP/$name-search.jsonl" "$TMP/$name-file.jsonl"
}

case_run single 1 --
case_run single-budget 1 --device-mem 1MiB -- --device-mem 1MiB
case_run np4 4 --executable --
case_run np4-budget 4 --device-mem 400KiB --rank all -- --device-mem 400KiB
grep -q "swap advisor: from --plan" "$TMP/np4-budget.out" && echo "ok   np4-budget: the swap plan came from the file" \
    || { echo "FAIL np4-budget: the banner does not say the swap plan came from the file"; fail=1; }

# Plans made for another run are refused, naming the difference.
P4="$TMP/np4.json"
expect other-batch 1 "--plan $P4 was made for batch 24; this run has batch 32" -- \
    mpirun --oversubscribe -np 4 "$TRAIN" --model "cnn:channels=4,hidden=16" --batch 32 "${RUN[@]}" --plan "$P4"
expect other-devices 1 "was made for devices 4; this run has devices 2" -- \
    mpirun --oversubscribe -np 2 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$P4"
expect other-model 1 "was made for model cnn:channels=4,hidden=16; this run has model cnn:channels=8,hidden=16" -- \
    mpirun --oversubscribe -np 4 "$TRAIN" --model "cnn:channels=8,hidden=16" --batch 24 "${RUN[@]}" --plan "$P4"
expect other-budget 1 "was made for no --device-mem; this run has --device-mem 400 KiB" -- \
    mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --device-mem 400KiB --plan "$P4"
"$PLAN" "${MODEL[@]}" --devices 4 --device-mem 400KiB --rank 1 --format json -o "$TMP/rank1.json" >/dev/null
expect missing-rank 1 "has no swap plan for rank 0; make it with tessera-plan ... --device-mem 400 KiB --rank all" -- \
    mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --device-mem 400KiB --plan "$TMP/rank1.json"
"$PLAN" "${MODEL[@]}" --devices 4 --format json -o "$TMP/search.json" >/dev/null
expect not-executable 1 "is not a plan tessera-train can run; make it with tessera-plan --executable" -- \
    mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$TMP/search.json"
# An edited layout is named, not an internal error (exit 3) in lowering.
"$PLAN" --model mlp:layers=2,hidden=16,input=20,classes=4 --batch 24 --devices 2 --executable --format json \
    -o "$TMP/mlp2.json" >/dev/null
python3 - "$TMP/mlp2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
w = next(t for t in p["tensors"] if t["tensor"] == "fc1.w")
w["layout"] = ["split(0)"] if w["layout"] != ["split(0)"] else ["split(1)"]
json.dump(p, open(sys.argv[1], "w"))
PY
expect edited-layout 1 "the given partition plan lays out 'fc1.w' as split(" -- \
    mpirun --oversubscribe -np 2 "$TRAIN" --model mlp:layers=2,hidden=16,input=20,classes=4 --batch 24 "${RUN[@]}" \
    --plan "$TMP/mlp2.json"
# A training swap plan copied over the evaluation's is refused: it once
# updated the weights on the test set and exited 0.
"$PLAN" "${MODEL[@]}" --devices 1 --device-mem 1MiB --format json -o "$TMP/swap1.json" >/dev/null
python3 - "$TMP/swap1.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["swap_ranks"][0]["forward"] = p["swap_ranks"][0]["train"]
json.dump(p, open(sys.argv[1], "w"))
PY
expect forward-runs-training 1 "--plan: the evaluation's swap plan runs '" -- \
    "$TRAIN" "${MODEL[@]}" --data synthetic --synthetic-size 480 --steps 2 --progress none --device-mem 1MiB \
    --plan "$TMP/swap1.json"
# Swap ranks out of range, or none at all, are named (4294967296 once read as
# rank 0, and an empty list silently planned again).
for edit in "rank=4294967296" "rank=-1" "empty"; do
  python3 - "$TMP/swap1.json" "$TMP/edit.json" "$edit" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
if sys.argv[3] == "empty": p["swap_ranks"] = []
else: p["swap_ranks"][0]["rank"] = int(sys.argv[3].split("=")[1])
json.dump(p, open(sys.argv[2], "w"))
PY
  want="is for rank ${edit#rank=}; the plan has ranks 0 to 0"
  [ "$edit" = empty ] && want='"swap_ranks" must be a non-empty list'
  expect "swap-ranks-$edit" 1 "$want" -- "$TRAIN" "${MODEL[@]}" --data synthetic --synthetic-size 480 --steps 2 \
    --progress none --device-mem 1MiB --plan "$TMP/edit.json"
done
expect missing-file 1 "cannot read the --plan file '$TMP/nope.json'" -- "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$TMP/nope.json"
echo '{"run": ' > "$TMP/bad.json"
expect not-json 1 "bad.json: not valid JSON" -- "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$TMP/bad.json"
echo '{"model": "mlp"}' > "$TMP/norun.json"
expect no-run 1 "has no \"run\" object" -- "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$TMP/norun.json"
expect bad-rank 1 "--rank: 'two' is not a rank (0, 1, ...) or 'all'" -- \
    "$PLAN" "${MODEL[@]}" --devices 4 --device-mem 400KiB --rank two
exit $fail
