#!/usr/bin/env bash
# --partition auto under mpirun -np 2: rank 0 prints every strategy's
# predicted step and the per-weight search's, and trains with the least;
# every rank takes that pick, and
# the run's losses are bit-identical to a run that names the same strategy.
# Under a budget no strategy can work under, the job stops with each reason.
#   partition_auto_test.sh TESSERA_TRAIN
set -uo pipefail
TRAIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUN=(--model mlp:layers=3,hidden=64,input=32,classes=4 --data synthetic --synthetic-size 256 --batch 32 --steps 4
     --lr-schedule constant --progress none --no-eval)
fail=0
mpirun --oversubscribe -np 2 "$TRAIN" "${RUN[@]}" --partition auto --metrics "$TMP/auto.jsonl" > "$TMP/auto.out" 2>&1 \
    || { echo "FAIL auto run"; cat "$TMP/auto.out"; exit 1; }
line=$(grep "^partition auto: predicted step" "$TMP/auto.out") || { echo "FAIL no 'partition auto:' line"; cat "$TMP/auto.out"; exit 1; }
echo "$line"
# The pick is the least of the printed predictions (the four strategies and
# the per-weight search's), and the plan is its: a strategy, or tofu with the
# per-weight search's --weights.
picked=$(python3 - "$line" <<'PY'
import re, sys
line = sys.argv[1]
units = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
rows = {n: float(v) * units[u]
        for n, v, u in re.findall(r" (tofu|data|owt|equalchop|per-weight) ([0-9.]+) (s|ms|us|ns)", line)}
assert len(rows) == 5, line
least = min(rows, key=rows.get)
if least == "per-weight":
    m = re.search(r"training with tofu --weights (\S+)$", line)
    assert m, line
    print("tofu --weights " + m.group(1))
else:
    assert line.endswith("training with " + least), (least, line)
    print(least)
PY
) || { echo "FAIL the pick is not the least predicted step"; fail=1; }
strategy=${picked%% *}
grep -q "^partition $strategy over 2 ranks" "$TMP/auto.out" || { echo "FAIL the run did not train with $strategy"; fail=1; }
# shellcheck disable=SC2086  # "tofu --weights LIST" is two words of arguments
mpirun --oversubscribe -np 2 "$TRAIN" "${RUN[@]}" --partition $picked --metrics "$TMP/named.jsonl" > "$TMP/named.out" 2>&1 \
    || { echo "FAIL --partition $picked run"; cat "$TMP/named.out"; exit 1; }
python3 - "$TMP/auto.jsonl" "$TMP/named.jsonl" <<'PY' || { echo "FAIL losses differ from --partition $picked"; fail=1; }
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"step"' in l] for p in sys.argv[1:3])
assert a == b and len(a) == 4, (a, b)
PY
[ $fail -eq 0 ] && echo "ok   partition auto picked $picked, bit-identical to --partition $picked"
# A budget no strategy can work under: every rank stops, exit 1, each reason named.
timeout 120 mpirun --oversubscribe -np 2 "$TRAIN" "${RUN[@]}" --partition auto --device-mem 4KiB > "$TMP/none.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "no strategy can work on 2 devices under 4.00 KiB; tofu: cannot work" "$TMP/none.out"; then
    echo "ok   partition auto under an impossible budget: exit 1, each strategy's reason"
else
    echo "FAIL partition auto under an impossible budget: exit $rc"; cat "$TMP/none.out"; fail=1
fi
exit $fail
