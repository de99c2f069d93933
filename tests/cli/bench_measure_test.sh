#!/usr/bin/env bash
# tessera-bench measure: real runs of tessera-train (one rank alone, two under
# mpirun) beside the simulator's prediction. Checks the rows against the runs'
# own metrics files (medians over the steps after the first), the error and
# throughput arithmetic, budgets as fractions of the unconstrained footprint,
# a failing run as a row with its error, determinism of everything but the
# timed fields, and the user-facing errors with their exit codes.
# Usage: bench_measure_test.sh PATH/TO/tessera-bench (tessera-train beside it)
set -uo pipefail
BENCH="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }

# Three steps (medians over two), a small model, a short swap search: each run
# takes under a second. Six equal layers, so that 1/4 of the footprint still
# holds the largest operator (an Adam update: weight, gradient, two moments).
SPEC=mlp:layers=6,hidden=64,input=64,classes=8
MLP=(--model $SPEC --batch 16 --steps 3 --search-time 0.5)

# ---- rows, against the runs' own metrics ----
# 1/1000 of the footprint is below what the largest operator needs: that run
# fails, and is a row saying why.
"$BENCH" measure "${MLP[@]}" --devices 1,2 --budgets none,1/4,1/1000 --format json -o "$TMP/a.json" \
    --metrics-dir "$TMP/metrics" 2>"$TMP/a.err" || { echo "FAIL measure json: $(cat "$TMP/a.err")"; fail=1; }
grep -q "^tessera-bench: run 6: mlp:classes=8,hidden=64,input=64,layers=6 tofu N=2 budget 1/1000: failed:" "$TMP/a.err" &&
    echo "ok   progress-lines" || { echo "FAIL progress lines: $(cat "$TMP/a.err")"; fail=1; }
python3 - "$TMP/a.json" "$TMP/metrics" <<'PY' || fail=1
import json, statistics, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
got = [(r["strategy"], r["devices"], r["budget"]) for r in rows]
want = [(s, n, b) for s, n in (("single", 1), ("tofu", 2)) for b in ("none", "1/4", "1/1000")]
assert got == want, got
assert j["mode"] == "measure" and j["batch"] == 16 and j["steps"] == 3, j
footprint = {}
for r in rows:
    if r["budget"] == "none":
        footprint[r["devices"]] = r["footprint_bytes"]
    if r["budget"] == "1/1000":  # cannot work: a row with the run's error
        assert r["measured"] is None and r["error"].startswith("budget ") and "cannot work" in r["error"], r
        continue
    assert r["error"] == "", r
    m = r["measured"]
    assert m["step_s"] > 0 and m["predicted_step_s"] > 0, r
    lines = [json.loads(l) for l in open(f"{sys.argv[2]}/run-{r['run']:02d}.jsonl") if '"step"' in l]
    assert len(lines) == 3 and r["steps"] == 2, (r, len(lines))
    after_first = lines[1:]
    # The job's step: the slowest rank's, never below rank 0's own.
    assert m["step_s"] == statistics.median(l["job_step_time_s"] for l in after_first), r
    assert all(l["job_step_time_s"] >= l["step_time_s"] for l in lines), r
    assert m["predicted_step_s"] == statistics.median(l["simulated_step_time_s"] for l in after_first), r
    assert m["predicted_exposed_comm_s"] == statistics.median(l["simulated_exposed_comm_s"] for l in after_first), r
    assert abs(m["error_pct"] - (m["predicted_step_s"] - m["step_s"]) / m["step_s"] * 100) < 1e-9, r
    assert abs(m["samples_per_s"] - 16 / m["step_s"]) <= 1e-9 * m["samples_per_s"], r
    assert abs(m["predicted_samples_per_s"] - 16 / m["predicted_step_s"]) <= 1e-9 * m["predicted_samples_per_s"], r
    assert r["footprint_bytes"] == lines[0]["footprint_bytes"] > 0 or r["budget"] != "none", r
    assert (r["comm_bytes"] > 0) == (r["devices"] == 2), r
for r in rows:
    if r["budget"] == "none":
        assert r["budget_bytes"] == 0, r
        continue
    frac = {"1/4": 4, "1/1000": 1000}[r["budget"]]
    assert r["footprint_bytes"] == footprint[r["devices"]], r
    assert r["budget_bytes"] == footprint[r["devices"]] // frac // 64 * 64, (r, footprint)
print("ok   measure-json-rows", len(rows), "rows")
PY

# Determinism: the same inputs give the same report but for the timed fields.
"$BENCH" measure "${MLP[@]}" --devices 1,2 --budgets none,1/4,1/1000 --format json >"$TMP/b.json" 2>/dev/null
python3 - "$TMP/a.json" "$TMP/b.json" <<'PY' && echo "ok   deterministic-but-measured" || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for j in (a, b):
    for r in j["rows"]:
        assert r["measured"] is None or r["measured"]["step_s"] > 0, r
        r.pop("measured")
assert a == b, (a, b)
PY

expect measure-table 0 "predicted: the whole-step simulator" -- "$BENCH" measure "${MLP[@]}" --devices 1,2
expect measure-html 0 "stroke-dasharray" -- "$BENCH" measure "${MLP[@]}" --devices 1 --format html
"$BENCH" measure "${MLP[@]}" --devices 1 --format html -o "$TMP/m.html" 2>/dev/null || { echo "FAIL html -o"; fail=1; }
[ "$(grep -o "<polyline" "$TMP/m.html" | wc -l)" = 2 ] && echo "ok   measure-html-lines" ||
    { echo "FAIL measure html: want a measured and a predicted line"; fail=1; }
ls -a "$TMP" | grep -q '\.tmp\.' && { echo "FAIL temporary file left behind"; fail=1; }

# An unwritable -o fails before anything is measured (it once ran every
# measurement, then threw them away).
out="$("$BENCH" measure "${MLP[@]}" --devices 1 -o "$TMP/no/such/dir/m.json" 2>&1)"
rc=$?
if [ $rc -eq 1 ] && grep -qF "cannot write" <<<"$out" && ! grep -q "run 1" <<<"$out"; then
  echo "ok   measure-output-checked-first"
else
  echo "FAIL measure-output-checked-first: exit $rc: $out"; fail=1
fi
# A budget that rounds below 64 bytes is a row saying so, not a run with no budget.
expect measure-budget-too-small 0 "not run: 1e-9 of the footprint" -- \
  "$BENCH" measure "${MLP[@]}" --devices 1 --budgets 1e-9 --format json

# A run past --timeout is ended (mpirun passes SIGTERM on to its ranks) and is a row saying so.
expect measure-timeout 0 "N=2 budget none: failed: the run took longer than 0.5 s (--timeout) and was ended" -- \
    "$BENCH" measure --model transformer:layers=4,d_model=128,heads=4,seq=32,vocab=256 --batch 32 --devices 1,2 \
    --timeout 0.5

# More ranks than cores only with --oversubscribe, and then with a warning.
over=$(($(nproc) + 1))
expect measure-oversubscribe 0 "warning: $over ranks on $(nproc) core" -- \
    "$BENCH" measure --model mlp:layers=2,hidden=32 --batch $((4 * over)) --steps 2 --devices $over --oversubscribe

# ---- errors ----
expect measure-no-model 2 "measure needs --model SPEC" -- "$BENCH" measure --devices 1
expect measure-other-flag 2 "--roofline" -- "$BENCH" measure "${MLP[@]}" --roofline h100
expect measure-one-step 2 "--steps" -- "$BENCH" measure "${MLP[@]}" --steps 1
expect measure-unknown-model 1 "unknown model 'nosuch'" -- "$BENCH" measure --model nosuch --devices 1
expect measure-bad-param 1 "wings" -- "$BENCH" measure --model mlp:wings=2 --devices 1
expect measure-zero-devices 1 "--devices: '0' is not a device count" -- "$BENCH" measure "${MLP[@]}" --devices 1,0
expect measure-too-many 1 "ranks need 4096 cores, one each" -- "$BENCH" measure "${MLP[@]}" --devices 4096
expect measure-bad-budget 1 "--budgets: '1/0' is not a budget" -- "$BENCH" measure "${MLP[@]}" --budgets none,1/0
expect measure-big-budget 1 "--budgets: '1.5' is not a budget" -- "$BENCH" measure "${MLP[@]}" --budgets 1.5
expect measure-brute 1 "--strategies: brute" -- "$BENCH" measure "${MLP[@]}" --strategies brute
expect measure-no-mpirun 1 "--devices 2 needs mpirun on PATH" -- env PATH="$TMP/nothing" "$BENCH" measure "${MLP[@]}"
mkdir "$TMP/alone" && cp "$BENCH" "$TMP/alone/"
expect measure-no-train 1 "tessera-train, which is not beside tessera-bench" -- \
    "$TMP/alone/tessera-bench" measure "${MLP[@]}" --devices 1
expect measure-unwritable 1 "cannot write" -- "$BENCH" measure "${MLP[@]}" --devices 1 -o "$TMP/missing-dir/out.txt"

exit $fail
