#!/usr/bin/env bash
# User-facing behaviour of tessera-plan --ops: outputs, exit codes and error
# messages. Usage: plan_cli_test.sh PATH/TO/tessera-plan
set -uo pipefail
PLAN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

expect table 0 "matmul[transpose_a=0,transpose_b=0]" -- "$PLAN" --ops
expect table-reduce 0 "split k (reduction)" -- "$PLAN" --ops
expect json 0 '"strategies"' -- "$PLAN" --ops --format json
expect bad-format 2 "--format: xml not in {table,json}" -- "$PLAN" --ops --format xml
expect nothing-to-do 2 "nothing to show; use --ops" -- "$PLAN"
expect unwritable 1 "cannot write" -- "$PLAN" --ops -o "$TMP/missing-dir/ops.txt"
if ls "$TMP"/missing-dir 2>/dev/null | grep -q .; then echo "FAIL unwritable left a file"; fail=1; fi

# The JSON is a list of objects, each with "name" and a list "strategies".
"$PLAN" --ops --format json -o "$TMP/ops.json" || fail=1
python3 - "$TMP/ops.json" <<'PY' || fail=1
import json, sys
ops = json.load(open(sys.argv[1]))
assert isinstance(ops, list) and ops, "not a non-empty list"
for o in ops:
    assert isinstance(o["name"], str) and isinstance(o["strategies"], list), o
names = {o["name"] for o in ops}
assert "matmul" in names, names
mm = next(o for o in ops if o["name"] == "matmul")
assert sorted(s["var"] for s in mm["strategies"]) == ["k", "m", "n"], mm
print("ok   json-shape", len(ops), "operators")
PY
[ ! -e "$TMP/ops.json.tmp" ] || { echo "FAIL temporary file left behind"; fail=1; }
exit $fail
