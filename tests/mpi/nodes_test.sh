#!/usr/bin/env bash
# A job over several nodes plans on two levels, nodes x ranks per node, so the
# first cut falls on the slow links between the nodes; tested on one host by
# declaring pretend nodes (--nodes K groups consecutive ranks), with the
# default link speeds and with a machine file's. Each run trains the same 20
# steps as one process: losses within 1e-5 relative, weights within 1e-4, and
# every step sends the bytes its plan counted (compare_runs.py). A plan made
# for another machine shape is refused, and every bad --nodes or --machine is
# an error naming both numbers.
#   nodes_test.sh TESSERA_TRAIN TESSERA_PLAN SOURCE_DIR
set -uo pipefail
TRAIN=$1 PLAN=$2 SRC=$3
here=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$here/../cli/expect.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MODEL=(--model mlp:hidden=64 --batch 24)
RUN=(--data synthetic --synthetic-size 960 --steps 20 --lr-schedule constant --progress none --no-eval)
MACHINE=$SRC/configs/machines/2x2-cpu.json

"$TRAIN" "${MODEL[@]}" "${RUN[@]}" --metrics "$TMP/single.jsonl" --checkpoint "$TMP/single" >/dev/null ||
  { echo "FAIL single-process run"; exit 1; }

# run NAME NP WANT_CUTS TRAIN_FLAGS...: trains under mpirun, checks the banner's
# cuts (outermost first, each with its level) and the run against one process.
run() {
  local name=$1 np=$2 cuts=$3
  shift 3
  if ! mpirun --oversubscribe -np "$np" "$TRAIN" "${MODEL[@]}" "${RUN[@]}" "$@" --metrics "$TMP/$name.jsonl" \
      --checkpoint "$TMP/$name" >"$TMP/$name.out" 2>&1; then
    echo "FAIL $name: tessera-train failed:"; tail -5 "$TMP/$name.out"; fail=1; return
  fi
  grep -q "^machine " "$TMP/$name.out" && grep -q "(cuts $cuts)" "$TMP/$name.out" ||
    { echo "FAIL $name: the banner does not show cuts $cuts:"; head -6 "$TMP/$name.out"; fail=1; return; }
  local out
  if out=$(python3 "$here/compare_runs.py" "$TMP/single.jsonl" "$TMP/$name.jsonl" \
      --weights "$TMP/single/checkpoint.safetensors" "$TMP/$name/checkpoint.safetensors" 2>&1); then
    echo "ok   $name: $(grep '^machine ' "$TMP/$name.out" | cut -d'|' -f1)| cuts $cuts | $out"
  else
    echo "FAIL $name: $out"; fail=1
  fi
}

run nodes2 4 "2 over node, then 2 over device" --nodes 2
run nodes3 6 "3 over node, then 2 over device" --nodes 3
run machine 4 "2 over node, then 2 over cpu" --nodes 2 --machine "$MACHINE"
grep -q "links node 12.5 GB/s 10 us, cpu 50 GB/s 1 us" "$TMP/machine.out" && echo "ok   machine: the file's links" ||
  { echo "FAIL machine: the banner does not show the file's links"; head -6 "$TMP/machine.out"; fail=1; }

# tessera-plan --machine plans the same: its first cut is 2-way over the
# node level, and a run of its plan file sends the bytes it counted per rank
# with the losses of the searching run, bit for bit.
"$PLAN" "${MODEL[@]}" --machine "$MACHINE" --executable --format json -o "$TMP/plan.json" >/dev/null ||
  { echo "FAIL tessera-plan --machine"; fail=1; }
python3 - "$TMP/plan.json" <<'PY' && echo "ok   plan-json: first cut k=2 over level 0, the node level" ||
import json, sys
p = json.load(open(sys.argv[1]))
assert p["cuts"][0] == {"k": 2, "link": 0}, p["cuts"]
assert p["machine"]["levels"][0]["name"] == "node" and p["machine"]["levels"][0]["count"] == 2, p["machine"]
PY
  { echo "FAIL plan-json: the first cut is not 2 over the node level"; fail=1; }
if mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 2 --machine "$MACHINE" \
    --plan "$TMP/plan.json" --metrics "$TMP/file.jsonl" >"$TMP/file.out" 2>&1; then
  python3 "$here/compare_runs.py" "$TMP/machine.jsonl" "$TMP/file.jsonl" --plan "$TMP/plan.json" >/dev/null &&
    cmp -s <(grep -o '"loss":[^,]*' "$TMP/machine.jsonl") <(grep -o '"loss":[^,]*' "$TMP/file.jsonl") &&
    echo "ok   plan-file: the plan's run has the searching run's losses and the plan's bytes" ||
    { echo "FAIL plan-file: the plan's run differs from the searching run"; fail=1; }
else
  echo "FAIL plan-file: tessera-train --plan failed:"; tail -5 "$TMP/file.out"; fail=1
fi
expect plan-other-shape 1 "--plan $TMP/plan.json was made for machine 2 nodes x 2 cpus (4 devices); this run's machine is 4 devices" -- \
  mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --plan "$TMP/plan.json"

# Every bad declaration is an error naming both numbers.
expect nodes-one-rank 1 "--nodes 2: the job's 1 rank does not split into 2 nodes of the same size" -- \
  "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 2
expect nodes-not-dividing 1 "--nodes 3: the job's 4 ranks do not split into 3 nodes of the same size; give a --nodes that divides 4" -- \
  mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 3
expect nodes-zero 2 "--nodes" -- "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 0
expect machine-devices 1 "--machine $MACHINE describes 2 nodes x 2 cpus (4 devices), but this job has 2 ranks" -- \
  mpirun --oversubscribe -np 2 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 2 --machine "$MACHINE"
expect machine-one-host 1 "--machine $MACHINE describes 2 nodes x 2 cpus (4 devices): 2 at its outermost level, but this job runs on one node (4 ranks); to plan on its levels anyway (on one host too), group the ranks into nodes of consecutive ranks with --nodes 2" -- \
  mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --machine "$MACHINE"
expect machine-other-nodes 1 "--machine $MACHINE describes 2 nodes x 2 cpus (4 devices): 2 at its outermost level, but this job runs on 4 nodes of 1 rank (--nodes 4); describe its nodes as the outermost level" -- \
  mpirun --oversubscribe -np 4 "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --nodes 4 --machine "$MACHINE"
expect machine-missing 1 "cannot read the machine description '$TMP/none.json'" -- \
  "$TRAIN" "${MODEL[@]}" "${RUN[@]}" --machine "$TMP/none.json"
exit $fail
