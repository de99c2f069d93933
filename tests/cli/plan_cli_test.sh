#!/usr/bin/env bash
# User-facing behaviour of tessera-plan: --ops, model plans in every format,
# --compare, determinism, exit codes and error messages.
# Usage: plan_cli_test.sh PATH/TO/tessera-plan
set -uo pipefail
PLAN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# ---- --ops: the operator table ----
expect table 0 "matmul[transpose_a=0,transpose_b=0]" -- "$PLAN" --ops
expect table-reduce 0 "split k (reduction)" -- "$PLAN" --ops
expect json 0 '"strategies"' -- "$PLAN" --ops --format json
expect bad-format 2 "--format: xml not in {table,json,dot,html}" -- "$PLAN" --ops --format xml
expect ops-dot 2 "--format dot applies to model plans; --ops prints table or json" -- "$PLAN" --ops --format dot
expect nothing-to-do 2 "nothing to show; use --ops" -- "$PLAN"
expect ops-and-model 2 "--ops and --model show different things" -- "$PLAN" --ops --model mlp --devices 2
expect unwritable 1 "cannot write" -- "$PLAN" --ops -o "$TMP/missing-dir/ops.txt"
# An ONNX file is a model like any other (docs/onnx.md); a missing one is named.
expect onnx-missing 1 "ONNX model '$TMP/none.onnx'" -- "$PLAN" --model "$TMP/none.onnx" --devices 2
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

# ---- model plans: every format ----
expect plan-table 0 "level 1 (2-way over device)" -- "$PLAN" --model mlp --devices 4
expect plan-table-ops 0 "fc1.matmul" -- "$PLAN" --model mlp --devices 4
expect plan-table-comm 0 "largest communication steps" -- "$PLAN" --model mlp --devices 4
expect plan-table-memory 0 "memory per device" -- "$PLAN" --model mlp --devices 4
expect plan-json 0 '"format": "tessera-plan"' -- "$PLAN" --model mlp --devices 4 --format json
expect plan-dot 0 "digraph plan {" -- "$PLAN" --model mlp --devices 4 --format dot
expect plan-html 0 "<!DOCTYPE html>" -- "$PLAN" --model mlp --devices 4 --format html
expect plan-adam 0 "adam" -- "$PLAN" --model mlp --devices 2 --optimizer adam
expect plan-brute 0 "strategy     brute" -- "$PLAN" --model mlp:layers=1,hidden=16 --batch 4 --devices 2 --strategy brute
expect brute-too-large 1 "brute force would try over 9.2e18 layout assignments" -- \
    "$PLAN" --model wresnet:depth=18 --devices 2 --strategy brute
expect plan-no-coarsen 0 "26 ops -> 26 groups" -- "$PLAN" --model mlp --devices 2 --no-coarsen

# A batch of 32 split 7 ways is uneven: blocks of 5,5,5,5,4,4,4 (the local
# shape is the longest), and the estimate (2,045,808 bytes) is exact, as lowered.
expect plan-odd-devices 0 "input            data        f32    [32, 784]     split(0)    [5, 784]" -- \
    "$PLAN" --model mlp --batch 32 --devices 7 --strategy data
expect plan-odd-lowered 0 "comm bytes   1.95 MiB per iteration (2,045,808 bytes, as lowered)" -- \
    "$PLAN" --model mlp --batch 32 --devices 7 --executable
expect plan-odd-search 0 "the search counted 2,045,808; level 1 1.95 MiB" -- \
    "$PLAN" --model mlp --batch 32 --devices 7 --executable
# Over two cuts the search's count is an estimate; an executable plan reports
# what lowering sends, and the estimate beside it.
expect plan-two-cuts-lowered 0 "comm bytes   2.15 MiB per iteration (2,251,528 bytes, as lowered)" -- \
    "$PLAN" --model mlp --batch 64 --devices 4 --executable
expect plan-two-cuts-search 0 "the search counted 1,596,168; level 1 776 KiB, level 2 783 KiB" -- \
    "$PLAN" --model mlp --batch 64 --devices 4 --executable

# A machine file: two nodes of four GPUs; --devices may repeat its count.
cat >"$TMP/machine.json" <<'EOF'
{"name": "two-boxes", "levels": [
  {"name": "node", "count": 2, "bandwidth_gbps": 12.5, "latency_us": 10},
  {"name": "gpu", "count": 4, "bandwidth_gbps": 300, "latency_us": 2}]}
EOF
expect machine 0 "2 nodes x 4 gpus (8 devices)" -- "$PLAN" --model mlp --machine "$TMP/machine.json"
expect machine-cuts 0 "2 over node, then 2 over gpu, then 2 over gpu" -- "$PLAN" --model mlp --machine "$TMP/machine.json"
expect machine-devices-agree 0 "devices      8" -- "$PLAN" --model mlp --machine "$TMP/machine.json" --devices 8

# The JSON holds the documented keys, with consistent values.
"$PLAN" --model mlp --devices 4 --format json -o "$TMP/plan.json" || { echo "FAIL plan json"; fail=1; }
[ ! -e "$TMP/plan.json.tmp" ] || { echo "FAIL temporary file left behind"; fail=1; }
python3 - "$TMP/plan.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
for key in ["format", "version", "model", "strategy", "devices", "machine", "cuts", "comm_bytes", "search_bytes",
            "level_bytes",
            "per_device_peak_bytes", "single_device_peak_bytes", "predicted_comm_time_s", "search_time_s",
            "ops_before_coarsening", "ops_after_coarsening", "tensors_before_coarsening",
            "tensors_after_coarsening", "memory", "ops", "tensors", "comm", "notes"]:
    assert key in p, key
assert p["format"] == "tessera-plan" and p["version"] == 1, p["format"]
assert p["model"] == "mlp" and p["strategy"] == "tofu" and p["devices"] == 4, (p["model"], p["devices"])
assert [c["k"] for c in p["cuts"]] == [2, 2], p["cuts"]
for key in ["comm_bytes", "per_device_peak_bytes", "ops_before_coarsening", "ops_after_coarsening"]:
    assert isinstance(p[key], int) and p[key] > 0, (key, p[key])
assert isinstance(p["predicted_comm_time_s"], float) and p["predicted_comm_time_s"] > 0
assert isinstance(p["search_time_s"], float) and p["search_time_s"] >= 0
assert p["ops_after_coarsening"] < p["ops_before_coarsening"] == len(p["ops"]), "coarsening counts"
assert p["tensors_before_coarsening"] == len(p["tensors"])
# The total is summed over all devices, level by level, and the steps add up to it.
# (Not made to run, the plan reports the search's count.)
assert p["comm_bytes"] == p["search_bytes"] == sum(p["level_bytes"]) == sum(s["bytes"] for s in p["comm"]), "comm bytes"
m = p["memory"]
assert m["total"] == sum(m[k] for k in ["weights", "gradients", "optimizer_state", "activations", "comm_buffers"])
assert p["per_device_peak_bytes"] < p["single_device_peak_bytes"], "4 devices need less than one"
print("ok   plan-json-keys")
PY

# The same input gives the same JSON, apart from the search time.
"$PLAN" --model mlp --devices 4 --format json -o "$TMP/plan2.json" || fail=1
python3 - "$TMP/plan.json" "$TMP/plan2.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
del a["search_time_s"], b["search_time_s"]
assert a == b, "two runs differ"
print("ok   plan-deterministic")
PY

# DOT is accepted by Graphviz when it is installed.
if command -v dot >/dev/null; then
    "$PLAN" --model mlp --devices 4 --format dot -o "$TMP/plan.dot" && dot -Tsvg "$TMP/plan.dot" -o /dev/null \
        && echo "ok   plan-dot-parses" || { echo "FAIL plan-dot-parses"; fail=1; }
fi

# HTML: one page that fetches nothing.
"$PLAN" --model mlp --devices 4 --format html -o "$TMP/plan.html" || fail=1
python3 - "$TMP/plan.html" <<'PY' || fail=1
import re, sys
h = open(sys.argv[1]).read()
assert h.startswith("<!DOCTYPE html>"), h[:40]
assert h.rstrip().endswith("</html>")
assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', h, re.I), "external reference"
assert "http" not in h, "a URL in the page"
assert "<script" not in h.lower() and "<link" not in h.lower(), "scripts or stylesheets"
for text in ["fc1.matmul", "Memory per device", "Communication", "Operators", "Notes"]:
    assert text in h, text
print("ok   plan-html-self-contained")
PY

# ---- --compare ----
expect compare-table 0 "vs tofu" -- "$PLAN" --model mlp --devices 4 --compare tofu,data,owt
"$PLAN" --model mlp --devices 4 --compare tofu,data,owt --format json -o "$TMP/compare.json" || fail=1
python3 - "$TMP/compare.json" <<'PY' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))
rows = {r["strategy"]: r for r in c["plans"]}
assert [r["strategy"] for r in c["plans"]] == ["tofu", "data", "owt"], list(rows)
for s in ["data", "owt"]:
    assert rows["tofu"]["comm_bytes"] <= rows[s]["comm_bytes"], (s, rows["tofu"]["comm_bytes"], rows[s]["comm_bytes"])
    assert abs(rows[s]["comm_ratio"] - rows[s]["comm_bytes"] / rows["tofu"]["comm_bytes"]) < 1e-12
for r in c["plans"]:
    for key in ["predicted_comm_time_s", "per_device_peak_bytes", "search_time_s", "memory"]:
        assert key in r, key
print("ok   compare-json tofu", rows["tofu"]["comm_bytes"], "data", rows["data"]["comm_bytes"],
      "owt", rows["owt"]["comm_bytes"])
PY
# The table shows all three.
out="$("$PLAN" --model mlp --devices 4 --compare tofu,data,owt)"
for s in tofu data owt; do
    grep -q "^$s " <<<"$out" || { echo "FAIL compare-table lacks $s: $out"; fail=1; }
done

# ---- user errors (exit 1) and usage errors (exit 2) ----
expect unknown-model 1 "unknown model 'nosuch'" -- "$PLAN" --model nosuch --devices 4
expect unknown-strategy 1 "--strategy: unknown partition strategy 'magic' (valid: tofu, data, ddp, fsdp, owt, equalchop, brute)" -- \
    "$PLAN" --model mlp --devices 4 --strategy magic
expect unknown-compare 1 "--compare: unknown partition strategy 'nope'" -- "$PLAN" --model mlp --devices 4 --compare tofu,nope
expect unknown-optimizer 1 "unknown optimizer 'rmsprop'" -- "$PLAN" --model mlp --devices 4 --optimizer rmsprop
# bf16: the working copies are cast nodes, and each tensor shows its dtype.
expect plan-bf16 0 "fc1.w.bf16       activation  bf16   [784, 1024]" -- "$PLAN" --model mlp --devices 2 --precision bf16
expect plan-bf16-copies 0 "working copies" -- "$PLAN" --model mlp --devices 2 --precision bf16
expect unknown-grad-reduce 1 "--grad-reduce-dtype: unknown --grad-reduce-dtype 'f32'; valid: fp32" -- \
  "$PLAN" --model mlp --devices 2 --precision bf16 --grad-reduce-dtype f32
expect unknown-precision 1 "--precision: unknown precision 'half'; valid: fp32|tf32|bf16|fp16" -- \
  "$PLAN" --model mlp --devices 2 --precision half
expect devices-zero 1 "--devices must be in [1, 4096], got 0" -- "$PLAN" --model mlp --devices 0
expect batch-zero 1 "--batch must be at least 1, got 0" -- "$PLAN" --model mlp --devices 2 --batch 0
expect devices-machine 2 "--devices 4 disagrees with --machine $TMP/machine.json, which has 8 devices" -- \
    "$PLAN" --model mlp --devices 4 --machine "$TMP/machine.json"
echo '{"levels": [{"name": "gpu", "count": 4' >"$TMP/broken.json"
expect machine-malformed 1 "$TMP/broken.json: not valid JSON" -- "$PLAN" --model mlp --machine "$TMP/broken.json"
echo '{"levels": [{"name": "gpu", "count": "four", "bandwidth_gbps": 10}]}' >"$TMP/badcount.json"
expect machine-bad-field 1 "'count' must be an integer" -- "$PLAN" --model mlp --machine "$TMP/badcount.json"
expect machine-missing 1 "cannot read the machine description '$TMP/absent.json'" -- \
    "$PLAN" --model mlp --machine "$TMP/absent.json"
expect plan-unwritable 1 "cannot write '$TMP/missing-dir/plan.json'" -- \
    "$PLAN" --model mlp --devices 4 --format json -o "$TMP/missing-dir/plan.json"
if [ -e "$TMP/missing-dir" ]; then echo "FAIL plan-unwritable left a file"; fail=1; fi
# An error after the output was named leaves no file, not even an empty one.
expect error-no-output 1 "unknown model" -- "$PLAN" --model nosuch --devices 4 -o "$TMP/never.json"
if ls "$TMP" | grep -q "^never"; then echo "FAIL error-no-output left a file"; fail=1; fi
expect plan-bad-format 2 "--format: xml not in {table,json,dot,html}" -- "$PLAN" --model mlp --devices 4 --format xml
# Without --format, -o's extension chooses it; with it, they must agree.
"$PLAN" --model mlp --devices 2 -o "$TMP/by-ext.json" && python3 -c "import json,sys; json.load(open(sys.argv[1]))" \
    "$TMP/by-ext.json" && echo "ok   format-from-json-extension" || { echo "FAIL format-from-json-extension"; fail=1; }
"$PLAN" --model mlp --devices 2 -o "$TMP/by-ext.html" && grep -q "<html" "$TMP/by-ext.html" &&
    echo "ok   format-from-html-extension" || { echo "FAIL format-from-html-extension"; fail=1; }
"$PLAN" --model mlp --devices 2 -o "$TMP/by-ext.plan" && ! grep -q "^[{<]" "$TMP/by-ext.plan" &&
    echo "ok   format-table-for-other-extensions" || { echo "FAIL format-table-for-other-extensions"; fail=1; }
expect format-extension-mismatch 2 \
    "-o $TMP/mismatch.json names json by its extension, but --format is table; drop --format or make them agree" \
    -- "$PLAN" --model mlp --devices 2 --format table -o "$TMP/mismatch.json"
[ ! -e "$TMP/mismatch.json" ] || { echo "FAIL format-extension-mismatch left a file"; fail=1; }
expect model-needs-devices 2 "--model needs --devices N or --machine FILE" -- "$PLAN" --model mlp
expect compare-and-strategy 2 "excludes" -- "$PLAN" --model mlp --devices 4 --compare tofu,data --strategy owt
expect compare-html 2 "--compare prints a table or json, not --format html" -- \
    "$PLAN" --model mlp --devices 4 --compare tofu,data --format html
expect unknown-flag 2 "--frobnicate" -- "$PLAN" --model mlp --devices 4 --frobnicate

# TESSERA_LOG=partition prints the table to stderr as well; stdout keeps the JSON.
TESSERA_LOG=partition "$PLAN" --model mlp --devices 2 --format json >"$TMP/out.json" 2>"$TMP/err.txt" || fail=1
grep -q "^---- partition ----" "$TMP/err.txt" && grep -q "memory per device" "$TMP/err.txt" \
    && python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/out.json" \
    && echo "ok   log-partition" || { echo "FAIL log-partition"; fail=1; }
expect log-unknown-stage 1 "TESSERA_LOG: unknown stage 'partiton'; valid: model, precision, graph, partition" -- \
    env TESSERA_LOG=partiton "$PLAN" --model mlp --devices 2
# Progress goes to a terminal only: none here, where stderr is a file.
"$PLAN" --model mlp --devices 2 >/dev/null 2>"$TMP/err2.txt" || fail=1
[ ! -s "$TMP/err2.txt" ] && echo "ok   no-progress-off-terminal" || { echo "FAIL progress printed: $(cat "$TMP/err2.txt")"; fail=1; }

# ---- swapping: --device-mem and its flags ----
# mlp at batch 32 needs 21.6 MiB unswapped; its largest operator (fc2's
# update: weight, gradient, momentum) needs 12 MiB.
SW=(--model mlp --batch 32 --devices 1 --swap-generations 10)
expect swap-table 0 "21.6 MiB without swapping (plan_memory, default order); budget 16.0 MiB: 1.35x the budget" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB
expect swap-after 0 "after         arena 16.0 MiB = the budget" -- "$PLAN" "${SW[@]}" --device-mem 16MiB
expect swap-device-h100 0 "h100 roofline: 60 TFLOP/s, 3.35 TB/s memory; host link 25 GB/s" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --device h100
expect swap-host-bandwidth 0 "host link 1.5 GB/s" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --host-bandwidth 1.5GB/s
# --swap-time-limit bounds the training step's search; the evaluation pass's
# plan gets a quarter of it (searches ended by the time limit alone).
"$PLAN" --model mlp --batch 32 --devices 1 --device-mem 16MiB --swap-time-limit 2 --swap-patience 0 \
  --swap-generations 10000000 --format json -o "$TMP/limit.json" 2>/dev/null || fail=1
python3 - "$TMP/limit.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))["swap_ranks"][0]
train, fwd = r["train"], r["forward"]
assert train["stopped_by"] == "time limit" and fwd["stopped_by"] == "time limit", (train["stopped_by"], fwd["stopped_by"])
assert 2.0 <= train["search_s"] < 3.0, train["search_s"]
assert 0.5 <= fwd["search_s"] < 1.5, fwd["search_s"]
print("ok   swap-time-limit-quarter", train["search_s"], fwd["search_s"])
PY
# The bound no plan can beat, against the plan: its share of ideal is at least the plan's.
out="$("$PLAN" "${SW[@]}" --device-mem 16MiB --host-updates auto 2>&1)"
bound=$(sed -n 's/^bound  *no plan can beat [0-9.]* ms (\([0-9.]*\)% of ideal), set by .*/\1/p' <<<"$out")
plan=$(sed -n 's/^predicted .* (\([0-9.]*\)% of ideal)$/\1/p' <<<"$out")
if [ -n "$bound" ] && [ -n "$plan" ] && awk -v b="$bound" -v p="$plan" 'BEGIN { exit !(b + 0.05 >= p) }'; then
  echo "ok   swap-bound $bound% >= plan $plan%"
else
  echo "FAIL swap-bound: bound '$bound'%, plan '$plan'%"; echo "$out" | head -20; fail=1
fi
# Host-side updates: every update on the host, per tensor; the
# update that could not fit on the device (12 MiB) fits the host at 8 MiB.
expect swap-host-updates 0 "updated on the host by fc2.w.update" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --host-updates all
expect swap-host-updates-small 0 "optimizer updates on the host" -- "$PLAN" "${SW[@]}" --device-mem 8MiB --host-updates auto
expect swap-host-updates-off 1 "operator 'fc2.w.update' needs" -- "$PLAN" "${SW[@]}" --device-mem 8MiB --host-updates off
# With host updates off, a budget that only the host's updates make work says
# so, with the budget they need; that budget works with them, and the error
# with them on carries no such hint.
hint="; with the optimizer's updates on the host (--host-updates auto) it needs 4.25 MiB (4456512 bytes)"
expect swap-host-updates-hint 1 "$hint" -- "$PLAN" "${SW[@]}" --device-mem 8MiB
expect swap-host-updates-hint-works 0 "optimizer updates on the host" -- \
    "$PLAN" "${SW[@]}" --device-mem 4456512 --host-updates auto
out=$("$PLAN" "${SW[@]}" --device-mem 4456511 --host-updates auto 2>&1)
if grep -q "the smallest budget that can is 4.25 MiB (4456512 bytes)$" <<<"$out"; then
  echo "ok   swap-host-updates-no-hint"
else
  echo "FAIL swap-host-updates-no-hint: $out"; fail=1
fi
expect bad-host-updates 2 "--host-updates" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --host-updates sometimes
expect bad-recompute 2 "--recompute" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --recompute always
expect swap-none-fits 0 "no swapping needed (--swap none)" -- "$PLAN" "${SW[@]}" --device-mem 1GiB --swap none
expect swap-ranks 0 "rank 0 of 4 (its lowered graph" -- "$PLAN" --model mlp --devices 4 --device-mem 8MiB --generations 5
expect swap-rank-3 0 "rank 3 of 4" -- "$PLAN" --model mlp --devices 4 --device-mem 8MiB --generations 5 --rank 3
out="$("$PLAN" "${SW[@]}" --device-mem 16MiB --swap-compare)"
for s in ideal lru vdnn advisor; do
    grep -q "^$s " <<<"$out" || { echo "FAIL swap-compare-table lacks $s: $out"; fail=1; }
done

# Errors: a policy, a size, a bandwidth, a device, search settings, a rank.
expect swap-unknown-policy 1 "--swap: unknown swap policy 'fifo'; valid: advisor, lru, vdnn, ideal or none" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --swap fifo
expect swap-bad-size 1 "--device-mem: 'lots' is not a size; use e.g. 512MiB or 2GiB" -- \
    "$PLAN" "${SW[@]}" --device-mem lots
expect swap-zero-size 1 "--device-mem: '0' is zero bytes" -- "$PLAN" "${SW[@]}" --device-mem 0
expect swap-bad-bandwidth 1 "--host-bandwidth: cannot read 'fast' as bytes per second; write e.g. 25GB/s" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --host-bandwidth fast
expect swap-bad-device 1 "--device: unknown roofline device 'tpu'; valid: cpu, h100" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --device tpu
expect swap-population 2 "--swap-population" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --population 1
expect swap-generations 2 "--swap-generations" -- "$PLAN" --model mlp --devices 1 \
    --device-mem 16MiB --generations 0
expect swap-patience-negative 2 "--swap-patience" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --swap-patience -1
expect swap-time-limit 2 "--swap-time-limit" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --time-limit 0
expect swap-seed 2 "--seed" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --seed many
expect swap-bad-rank 1 "--rank 4 is not a rank of 4 devices; give 0 to 3" -- \
    "$PLAN" --model mlp --devices 4 --device-mem 8MiB --rank 4
expect swap-budget-too-small 1 "budget 2.00 MiB (2097152 bytes) cannot work: operator 'fc2.w.update' needs 12.0 MiB" -- \
    "$PLAN" "${SW[@]}" --device-mem 2MiB
expect swap-none-too-small 1 "mlp needs 21.6 MiB without swapping but --device-mem is 16.0 MiB; swap with --swap advisor" -- \
    "$PLAN" "${SW[@]}" --device-mem 16MiB --swap none
expect swap-needs-mem 2 "--swap plans swaps; give --device-mem BYTES too" -- "$PLAN" "${SW[@]}" --swap lru
expect swap-compare-needs-mem 2 "--swap-compare plans swaps; give --device-mem BYTES too" -- \
    "$PLAN" "${SW[@]}" --swap-compare
expect swap-device-needs-mem 2 "--roofline plans swaps; give --device-mem BYTES too" -- "$PLAN" "${SW[@]}" --device h100
expect swap-and-compare 2 "excludes" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --swap lru --swap-compare
expect swap-partition-compare 2 "--device-mem plans swaps for one partition plan; give --strategy, not --compare" -- \
    "$PLAN" --model mlp --devices 2 --device-mem 16MiB --compare tofu,data
expect swap-dot 2 "--format dot shows the partition only" -- "$PLAN" "${SW[@]}" --device-mem 16MiB --format dot
expect swap-ops 2 "--device-mem plans swaps for a model; give --model, not --ops" -- "$PLAN" --ops --device-mem 16MiB

# JSON: the partition plan gains "swap" (the swap plan, whole) and its context;
# the plan is consistent, and survives a JSON round trip unchanged.
for pol in advisor lru vdnn; do
    "$PLAN" "${SW[@]}" --device-mem 16MiB --swap $pol --format json -o "$TMP/swap-$pol.json" || fail=1
done
python3 - "$TMP" <<'PY' || fail=1
import json, sys
for pol in ["advisor", "lru", "vdnn"]:
    text = open(f"{sys.argv[1]}/swap-{pol}.json").read()
    p = json.loads(text)
    assert p["format"] == "tessera-plan" and "ops" in p, "the partition plan is still there"
    c, s = p["swap_context"], p["swap"]
    assert c["budget"] == 16 << 20 and c["footprint_bytes"] > c["budget"] and c["device"] == "cpu", c
    assert s["policy"] == pol and s["arena_bytes"] == 16 << 20, (pol, s["policy"], s["arena_bytes"])
    steps = s["steps"]
    computes = [st for st in steps if st["kind"] == "compute"]
    assert [st["node"] for st in computes] == s["order"], "compute steps follow the order"
    assert len(s["order"]) == len(p["ops"]), "every operator runs once"
    for i, st in enumerate(steps):
        assert all(0 <= a < i for a in st.get("after", [])), (i, st)
        assert st["end_s"] >= st["start_s"] >= 0, st
    for kind, key in [("swap-out", "swap_out_bytes"), ("swap-in", "swap_in_bytes")]:
        assert sum(st["bytes"] for st in steps if st["kind"] == kind) == s[key], (pol, kind)
    assert s["swap_in_bytes"] > 0, "16 MiB is below the footprint: something must move"
    assert abs(s["time_s"] - max(st["end_s"] for st in steps)) <= 1e-12 * s["time_s"], "time is the last end"
    assert s["time_s"] >= s["ideal_time_s"] > 0
    assert s["high_water"] <= s["arena_bytes"]
    assert json.loads(json.dumps(p)) == p
print("ok   swap-json consistent for advisor, lru, vdnn")
PY
"$PLAN" "${SW[@]}" --device-mem 16MiB --swap-compare --format json -o "$TMP/swap-compare.json" || fail=1
python3 - "$TMP/swap-compare.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
rows = p["swap_compare"]
assert [r["policy"] for r in rows] == ["ideal", "lru", "vdnn", "advisor"], rows
t = {r["policy"]: r["time_s"] for r in rows}
assert rows[0]["ratio_to_ideal"] == 1 and rows[0]["swap_in_bytes"] == 0
assert t["advisor"] <= t["lru"] and t["advisor"] <= t["vdnn"], t
assert p["swap"] == rows[-1]["plan"], "swap is the advisor's plan"
print("ok   swap-compare-json", {k: round(v * 1e3, 3) for k, v in t.items()})
PY
# The same seed gives the same plan (the search time aside).
"$PLAN" "${SW[@]}" --device-mem 16MiB --seed 7 --format json -o "$TMP/seed-a.json" || fail=1
"$PLAN" "${SW[@]}" --device-mem 16MiB --seed 7 --format json -o "$TMP/seed-b.json" || fail=1
python3 - "$TMP/seed-a.json" "$TMP/seed-b.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
def drop_times(x):  # search times are the one field that differs between runs
    if isinstance(x, dict):
        return {k: drop_times(v) for k, v in x.items() if k not in ("search_time_s", "search_s")}
    return [drop_times(v) for v in x] if isinstance(x, list) else x
a, b = drop_times(a), drop_times(b)
assert a["swap_ranks"][0]["train"] == a["swap"], "swap_ranks holds the same plan as swap"
assert a == b, "two runs with --seed 7 differ"
print("ok   swap-deterministic")
PY

# HTML: the page gains the timeline, still self-contained.
"$PLAN" "${SW[@]}" --device-mem 16MiB --format html -o "$TMP/swap.html" || fail=1
python3 - "$TMP/swap.html" <<'PY' || fail=1
import sys
h = open(sys.argv[1]).read()
assert h.rstrip().endswith("</html>") and h.count("</body>") == 1
for text in ["Memory before and after swapping", "Swapping (advisor)", "<svg", ">compute</text>", ">swap-out</text>",
             ">swap-in</text>", "<title>budget 16.0 MiB</title>", "fc1.matmul (matmul)"]:
    assert text in h, text
assert h.index("Operators") < h.index("Swapping (advisor)") < h.index("</body>")
assert "<script" not in h.lower() and "http" not in h.replace("http://www.w3.org/2000/svg", ""), "external content"
print("ok   swap-html")
PY

# Progress of a search that runs over a second (no patience: the limits end
# it); TESSERA_LOG=swap prints the plan.
expect swap-progress 0 "swap search (advisor): generation" -- "$PLAN" --model transformer --batch 32 --devices 1 \
    --device-mem 16MiB --swap-generations 100000 --swap-patience 0 --swap-time-limit 1.5
# The default search ends where it stops improving, and says so.
expect swap-patience 0 "(stopped by patience)" -- "$PLAN" --model mlp --batch 32 --devices 1 --device-mem 16MiB \
    --swap-generations 100000 --swap-patience 3
expect force-unknown-op 1 "--force 'nope=m': the training graph has no operator named 'nope'" -- "$PLAN" --model mlp --devices 2 --force nope=m
expect force-unknown-var 1 "--force 'loss=zz': softmax_xent 'loss' has no strategy 'zz'; valid: n, c, replicate" -- "$PLAN" --model mlp --devices 2 --force loss=zz
expect force-bad-entry 1 "--force: bad entry 'loss'; expected OPERATOR=VARIABLE" -- "$PLAN" --model mlp --devices 2 --force loss
expect force-staged 0 "split c (all-reduce inside)" -- "$PLAN" --model mlp --devices 2 --force loss=c --executable
expect weights-unknown 1 "--weights 'nope': the training graph has no weight named 'nope'" -- "$PLAN" --model mlp --devices 2 --weights nope=split
expect weights-bad-value 1 "--weights 'fc1.w=half': a weight is 'replicate' or 'split'" -- "$PLAN" --model mlp --devices 2 --weights fc1.w=half
expect weights-bad-entry 1 "--weights: bad entry 'fc1.w'; expected WEIGHT=replicate|split" -- "$PLAN" --model mlp --devices 2 --weights fc1.w
# The free search splits mlp's weights on 2 devices; fixed, they are whole.
expect weights-free-split 0 "fc2.w            param       f32    [1024, 1024]  split(0)" -- "$PLAN" --model mlp --devices 2
expect weights-replicate 0 "fc2.w            param       f32    [1024, 1024]  replicated" -- "$PLAN" --model mlp --devices 2 --weights 'fc*=replicate'
TESSERA_LOG=swap "$PLAN" "${SW[@]}" --device-mem 16MiB --format json >"$TMP/log.json" 2>"$TMP/log.txt" || fail=1
grep -q "^---- swap ----" "$TMP/log.txt" && grep -q "^(advisor)" "$TMP/log.txt" && python3 -c "import json,sys; json.load(open(sys.argv[1]))" \
    "$TMP/log.json" && echo "ok   log-swap" || { echo "FAIL log-swap: $(head -3 "$TMP/log.txt")"; fail=1; }

# ---- hostile and odd inputs and outputs ----
# A machine file nested 200,000 deep, or one that never ends, is refused with a message.
python3 -c "print('{\"name\": ' + '[' * 200000)" >"$TMP/deep.json"
expect machine-deep 1 "$TMP/deep.json: JSON nested deeper than 64 levels (at byte 72)" -- \
    "$PLAN" --model mlp --machine "$TMP/deep.json"
expect compare-twice 1 "--compare: 'tofu' is given twice; name each strategy once" -- \
    "$PLAN" --model mlp --devices 2 --compare tofu,data,tofu
expect time-limit-nan 2 "must be a finite number, got nan" -- "$PLAN" --model mlp --time-limit nan
expect machine-device 1 "cannot read the machine description '/dev/zero': it is a device, not a regular file" -- \
    "$PLAN" --model mlp --machine /dev/zero
# Values quoted in errors are cut short.
python3 -c "print('{\"name\": [' + ','.join(['1'] * 100000) + '], \"levels\": []}')" >"$TMP/long.json"
out="$("$PLAN" --model mlp --machine "$TMP/long.json" 2>&1)"
[ ${#out} -lt 300 ] && grep -qF "'name' must be a string, got [1, 1, 1" <<<"$out" \
    && echo "ok   machine-long-value" || { echo "FAIL machine-long-value: ${out:0:300}"; fail=1; }
expect compare-empty 2 "--compare: the value is empty" -- "$PLAN" --model mlp --devices 2 --compare ""
expect devices-too-many 1 "--devices must be in [1, 4096], got 100000" -- "$PLAN" --model mlp --devices 100000 --executable
# -o writes through a symbolic link (the link stays) and into a FIFO (it stays a FIFO).
echo old >"$TMP/target.txt"
ln -s target.txt "$TMP/link.txt"
expect out-symlink 0 "" -- "$PLAN" --model mlp --devices 2 -o "$TMP/link.txt"
[ -L "$TMP/link.txt" ] && grep -q "mlp" "$TMP/target.txt" && echo "ok   out-symlink-kept" ||
    { echo "FAIL out-symlink: the link was replaced or its file not written"; fail=1; }
mkfifo "$TMP/fifo"
cat "$TMP/fifo" >"$TMP/from-fifo.txt" &
reader=$!
expect out-fifo 0 "" -- "$PLAN" --model mlp --devices 2 -o "$TMP/fifo"
wait $reader
[ -p "$TMP/fifo" ] && grep -q "mlp" "$TMP/from-fifo.txt" && echo "ok   out-fifo-kept" ||
    { echo "FAIL out-fifo: the FIFO was replaced or nothing came through it"; fail=1; }
# A device stays a device: a null device of the test's own (mknod needs
# root), so that a regression replaces that one, never /dev/null.
if mknod "$TMP/null" c 1 3 2>/dev/null; then
  expect out-null 0 "" -- "$PLAN" --model mlp --devices 2 -o "$TMP/null"
  [ -c "$TMP/null" ] && echo "ok   out-null-kept" || { echo "FAIL out-null: the device was replaced"; fail=1; }
fi
# A full disk is an error naming the output, through -o or standard output.
ln -s /dev/full "$TMP/full"
expect out-full 1 "cannot write '$TMP/full': write failed: No space left on device" -- \
    "$PLAN" --model mlp --devices 2 --format json -o "$TMP/full"
out="$("$PLAN" --model mlp --devices 2 --format json 2>&1 >/dev/full)"; rc=$?
[ "$rc" = 1 ] && grep -qF "cannot write to standard output: No space left on device" <<<"$out" \
    && echo "ok   stdout-full" || { echo "FAIL stdout-full: exit $rc: $out"; fail=1; }
exit $fail
