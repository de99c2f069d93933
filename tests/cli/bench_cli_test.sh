#!/usr/bin/env bash
# User-facing behaviour of tessera-bench: its modes as table and JSON, the
# rows' arithmetic (speed-up of one device is 1, efficiency = speed-up / N),
# determinism, atomic -o, exit codes and error messages.
# Usage: bench_cli_test.sh PATH/TO/tessera-bench SOURCE_DIR
set -uo pipefail
BENCH="$1"
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

MLP=(--model mlp:layers=2,hidden=64 --batch 16)

# ---- scaling ----
# A FIFO in place of an input file is refused at once, not waited on.
mkfifo "$TMP/fifo.onnx" "$TMP/fifo.json"
expect fifo-onnx 1 "cannot read the ONNX model '$TMP/fifo.onnx': it is a FIFO, not a regular file" -- \
  timeout 20 "$BENCH" scaling --model "$TMP/fifo.onnx" --devices 2
expect fifo-machine 1 "cannot read the machine description '$TMP/fifo.json': it is a FIFO" -- \
  timeout 20 "$BENCH" scaling "${MLP[@]}" --devices 2 --machine "$TMP/fifo.json"
expect scaling-table 0 "tessera-bench scaling: mlp:hidden=64,layers=2, batch 16" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 1,2,4
expect scaling-table-note 0 "not measurements" -- "$BENCH" scaling "${MLP[@]}" --devices 1,2
expect scaling-json 0 '"format": "tessera-bench"' -- "$BENCH" scaling "${MLP[@]}" --devices 1,2,4 --format json

"$BENCH" scaling "${MLP[@]}" --devices 1,2,4 --format json -o "$TMP/scaling.json" || { echo "FAIL scaling -o"; fail=1; }
[ ! -e "$TMP/scaling.json.tmp" ] || { echo "FAIL temporary file left behind"; fail=1; }
python3 - "$TMP/scaling.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
strategies = ["tofu", "data", "owt", "equalchop"]
for n in (1, 2, 4):
    got = sorted(r["strategy"] for r in rows if r["devices"] == n)
    assert got == sorted(strategies), (n, got)
for r in rows:
    assert r["step_s"] > 0 and r["throughput"] > 0, r
    assert abs(r["throughput"] - 16 / r["step_s"]) <= 1e-9 * r["throughput"], r
    assert abs(r["efficiency"] - r["speedup"] / r["devices"]) <= 1e-12, r
    parts = r["compute_s"] + r["exposed_comm_s"] + r["exposed_swap_s"] + r["idle_s"]
    assert abs(parts - r["step_s"]) <= 1e-9 * r["step_s"] + 1e-12, r
    if r["devices"] == 1:
        assert r["speedup"] == 1 and r["comm_bytes"] == 0, r
    else:
        assert r["comm_bytes"] > 0, r
single = [r for r in rows if r["devices"] == 1][0]
for r in rows:
    assert abs(r["speedup"] - single["step_s"] / r["step_s"]) <= 1e-9 * r["speedup"], r
# Data parallelism replicates every weight and all-reduces its gradient (a
# ring: each rank sends 2 (N-1)/N of it), and the loss's few bytes; nothing else.
data = {r["devices"]: r for r in rows if r["strategy"] == "data"}
params = 784 * 64 + 64 + 64 * 10 + 10  # mlp:layers=2,hidden=64 is 784-64-10
for n in (2, 4):
    want = 2 * (n - 1) * params * 4
    assert want < data[n]["comm_bytes"] <= want + 16 * n * n, (n, data[n]["comm_bytes"], want)
print("ok   scaling-json-rows", len(rows), "rows")
PY

# Determinism: the same inputs give the same bytes, in both formats.
"$BENCH" scaling "${MLP[@]}" --devices 1,2,4 --format json >"$TMP/a.json" 2>/dev/null
"$BENCH" scaling "${MLP[@]}" --devices 1,2,4 --format json >"$TMP/b.json" 2>/dev/null
cmp -s "$TMP/a.json" "$TMP/b.json" && echo "ok   deterministic-json" || { echo "FAIL json differs between runs"; fail=1; }
"$BENCH" scaling "${MLP[@]}" --devices 1,2,4 >"$TMP/a.txt" 2>/dev/null
"$BENCH" scaling "${MLP[@]}" --devices 1,2,4 >"$TMP/b.txt" 2>/dev/null
cmp -s "$TMP/a.txt" "$TMP/b.txt" && echo "ok   deterministic-table" || { echo "FAIL table differs between runs"; fail=1; }

# A machine file: its speeds, its counts scaled to each --devices count.
expect scaling-machine 0 "2 nodes x 8 gpus (16 devices)" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2,16 --machine "$SRC/configs/machines/2x8-nvlink.json" --strategies tofu
expect scaling-machine-only 0 "8 gpus (8 devices) (gpu 360 GB/s 3 us)" -- \
    "$BENCH" scaling "${MLP[@]}" --machine "$SRC/configs/machines/8-nvlink.json" --strategies data
expect scaling-h100 0 "roofline  h100" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --roofline h100
# bf16 weight gradients reduced in f32 (the default) send twice the bytes of bf16 ones.
expect grad-reduce-fp32 0 "398 KiB" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --strategies data --precision bf16
expect grad-reduce-bf16 0 "199 KiB" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --strategies data --precision bf16 --grad-reduce-dtype bf16
expect grad-reduce-unknown 1 "--grad-reduce-dtype: unknown --grad-reduce-dtype 'f8'" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --grad-reduce-dtype f8
# Under a per-device budget: ranks over it swap, and the header says so.
expect scaling-budget 0 "memory    300 KiB per device; a rank over it swaps" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 1,2 --device-mem 300KiB --search-time 0.2
expect scaling-budget-too-small 0 "budget 1.00 KiB (1024 bytes) cannot work" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --device-mem 1KiB --search-time 0.2
expect scaling-budget-bad 1 "--device-mem" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --device-mem lots
# The per-weight search's row, after the strategies, at each count above one.
expect scaling-per-weight 0 "      2 per-weight" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 1,2 --device-mem 300KiB --search-time 0.2 --per-weight 5
expect scaling-per-weight-bad 2 "--per-weight" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --per-weight -1

# ---- models: a tiny variant of each family ----
expect models-wresnet 0 "Tofu over the best alternative" -- \
    "$BENCH" models --family wresnet:depth=18,base=8 --sizes 1,2 --batch 8 --devices 2
expect models-rnn 0 "lstm:embed=32,hidden=32,layers=2,seq=4,vocab=50" -- \
    "$BENCH" models --family rnn:seq=4,vocab=50,embed=32 --sizes 1x32,2x32 --batch 8 --devices 2
"$BENCH" models --family rnn:seq=4,vocab=50 --sizes 1x32,2x32 --batch 8 --devices 2 --format json \
    -o "$TMP/models.json" || { echo "FAIL models -o"; fail=1; }
python3 - "$TMP/models.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
models = sorted({r["model"] for r in rows})
assert len(models) == 2, models
for m in models:
    mine = {r["strategy"]: r for r in rows if r["model"] == m}
    assert sorted(mine) == ["data", "owt", "single", "tofu"], mine.keys()
    assert mine["single"]["devices"] == 1 and mine["single"]["speedup"] == 1, mine["single"]
    assert all(mine[s]["devices"] == 2 for s in ("tofu", "data", "owt"))
    adv = [a for a in j["tofu_over_best"] if a["model"] == m][0]
    best = min(("data", "owt"), key=lambda s: mine[s]["step_s"])
    assert adv["best_alternative"] == best, (adv, best)
    assert abs(adv["tofu_over_best"] - mine[best]["step_s"] / mine["tofu"]["step_s"]) < 1e-12, adv
print("ok   models-json-rows", len(rows), "rows")
PY

# ---- errors ----
expect no-mode 2 "A subcommand is required" -- "$BENCH"
expect unknown-mode 2 "unknown mode 'measured'; give scaling, models, budgets or measure" -- "$BENCH" measured --model mlp
expect unknown-flag 2 "--bogus" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --bogus
expect bad-format 2 "--format: xml not in {table,json,html}" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --format xml
expect no-model 2 "scaling needs --model SPEC" -- "$BENCH" scaling --devices 2
expect no-devices 2 "scaling needs --devices N,N,... or --machine FILE" -- "$BENCH" scaling --model mlp
expect family-in-scaling 2 "--family and --sizes belong to the models mode" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --family wresnet
expect no-family 2 "models needs --family wresnet or rnn" -- "$BENCH" models --devices 2
expect model-in-models 2 "--model belongs to the scaling mode" -- "$BENCH" models --family rnn --model mlp --devices 2
expect unknown-model 1 "unknown model 'nosuch'" -- "$BENCH" scaling --model nosuch --devices 2
expect unknown-family 1 "--family: unknown family 'vgg'; give wresnet or rnn" -- "$BENCH" models --family vgg --devices 2
expect unknown-strategy 1 "--strategies: unknown" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --strategies tofu,magic
expect brute-strategy 1 "--strategies: brute tries every assignment" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --strategies brute
expect ratio-not-a-count 1 "--ratios: '0.5' is not a budget ratio (a positive integer up to 65536)" -- \
    "$BENCH" budgets --model mlp:hidden=16 --ratios 0.5
expect sizes-zero 1 "--sizes: '0' is not a WResNet width" -- \
    "$BENCH" models --family wresnet --sizes 0 --devices 2
expect search-time-nan 2 "--search-time: must be a finite number, got nan" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 2 --search-time nan
expect threads-zero 2 "--threads: must be above 0, got 0" -- "$BENCH" measure "${MLP[@]}" --devices 1 --threads 0
expect zero-devices 1 "--devices: '0' is not a device count (a positive integer up to 65536)" -- \
    "$BENCH" scaling "${MLP[@]}" --devices 1,0
expect word-devices 1 "--devices: 'two' is not a device count" -- "$BENCH" scaling "${MLP[@]}" --devices two
expect empty-devices 1 "--devices: '' is not a device count" -- "$BENCH" scaling "${MLP[@]}" --devices 1,,2
expect models-device-list 1 "--devices: '2,4' is not a device count" -- \
    "$BENCH" models --family rnn --sizes 1x32 --devices 2,4
expect bad-sizes 1 "--sizes: '32' is not LAYERSxHIDDEN (e.g. 6x4096)" -- \
    "$BENCH" models --family rnn --sizes 32 --devices 2
expect machine-disagrees 2 "--devices 8 disagrees with --machine" -- \
    "$BENCH" models --family rnn --devices 8 --machine "$SRC/configs/machines/2x8-nvlink.json"
expect missing-machine 1 "$TMP/none.json" -- "$BENCH" scaling "${MLP[@]}" --machine "$TMP/none.json"
echo '{"levels": []}' >"$TMP/bad-machine.json"
expect bad-machine 1 "'levels' must be a non-empty list" -- "$BENCH" scaling "${MLP[@]}" --machine "$TMP/bad-machine.json"
expect bad-roofline 1 "--roofline:" -- "$BENCH" scaling "${MLP[@]}" --devices 2 --roofline tpu
expect unwritable 1 "cannot write" -- "$BENCH" scaling "${MLP[@]}" --devices 2 -o "$TMP/missing-dir/out.txt"
[ ! -e "$TMP/missing-dir" ] || { echo "FAIL unwritable left a file"; fail=1; }

# ---- budgets ----
# One device against its budget: the unlimited row first (speed-up 1), then
# every policy at every ratio; the ideal policy swaps for free, so it keeps the
# unlimited step; a budget below the largest operator's is a row saying so.
BIG=(--model mlp:layers=8,hidden=512 --batch 32)
expect budgets-table 0 "the share of the unlimited step's throughput" -- "$BENCH" budgets "${BIG[@]}" --ratios 2,4
expect budgets-html 0 "<polyline" -- "$BENCH" budgets "${BIG[@]}" --ratios 2,4 --format html
"$BENCH" budgets "${BIG[@]}" --ratios 1,2,4,1000 --format json -o "$TMP/budgets.json" || { echo "FAIL budgets json"; fail=1; }
python3 - "$TMP/budgets.json" <<'PY' || { echo "FAIL budgets rows"; fail=1; }
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert rows[0]["strategy"] == "unlimited" and rows[0]["speedup"] == 1, rows[0]
unlimited = rows[0]
policies = ["advisor", "lru", "vdnn", "ideal"]
assert [r["strategy"] for r in rows[1:]] == policies * 4, [r["strategy"] for r in rows]
budgets = sorted({r["memory_bytes"] for r in rows[1:]}, reverse=True)
assert len(budgets) == 4 and budgets[0] == unlimited["memory_bytes"] // 64 * 64, budgets
for r in rows[1:]:
    if r["memory_bytes"] == budgets[-1]:  # 1/1000 of the footprint
        assert r["note"].startswith("budget ") and " cannot work" in r["note"] and r["step_s"] == 0, r
        continue
    assert r["note"] == "" and r["step_s"] > 0, r
    assert abs(r["speedup"] - unlimited["step_s"] / r["step_s"]) <= 1e-12, r
    if r["strategy"] == "ideal":
        assert abs(r["step_s"] - unlimited["step_s"]) <= 1e-9 * unlimited["step_s"], r
    if r["memory_bytes"] < budgets[0] and r["strategy"] != "ideal":
        assert r["comm_bytes"] > 0 and r["step_s"] >= unlimited["step_s"], r
PY
echo "ok   budgets-rows"
expect budgets-policy 1 "unknown swap policy 'fifo'; valid: advisor, lru, vdnn, ideal" -- \
    "$BENCH" budgets "${BIG[@]}" --policies advisor,fifo
expect budgets-devices 2 "budgets runs one device" -- "$BENCH" budgets "${BIG[@]}" --devices 2
expect budgets-model 2 "budgets needs --model SPEC" -- "$BENCH" budgets --ratios 2
expect budgets-ratio 1 "--ratios" -- "$BENCH" budgets "${BIG[@]}" --ratios 2,0

exit $fail
