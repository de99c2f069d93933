#!/usr/bin/env bash
# A graceful stop: SIGTERM mid-epoch makes tessera-train write a
# checkpoint at the next step boundary and exit with 143 (128 + SIGTERM),
# naming the step; resuming from it gives the losses and final weights of an
# uninterrupted run bit for bit. Once as one process, once as every rank of
# mpirun -np 3 receiving the signal (as Slurm signals every task); and SIGINT
# without --checkpoint says that nothing was saved.
#   train_stop_test.sh PATH/TO/tessera-train
set -uo pipefail
TRAIN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail=0
RUN=(--model mlp:layers=3,hidden=128,input=64,classes=8 --data synthetic --synthetic-size 4096 --batch 24 --seed 3
     --optimizer adam --steps 400 --progress none --no-eval --lr-schedule cosine)

# Waits until the metrics file at $1 has $2 step lines (at most 60 s).
wait_for_steps() {
    for _ in $(seq 1 6000); do
        local n
        n=$(grep -c '"step"' "$1" 2>/dev/null)
        [ "${n:-0}" -ge "$2" ] && return 0
        sleep 0.01
    done
    return 1
}

# Losses of the stopped-and-resumed run ($2) equal the reference's ($1) at every step.
same_losses() { python3 "$(dirname "${BASH_SOURCE[0]}")/same_losses.py" "$1" "$2" 400; }

# check NAME LAUNCH...: the reference, then a run stopped by SIGTERM to every
# process running $TRAIN with this case's checkpoint, then its resume.
check() {
    local name=$1; shift
    local dir="$TMP/$name"
    mkdir -p "$dir"
    "$@" "$TRAIN" "${RUN[@]}" --metrics "$dir/ref.jsonl" --checkpoint "$dir/ref" >/dev/null 2>&1 \
        || { echo "FAIL $name: reference run"; fail=1; return; }
    "$@" "$TRAIN" "${RUN[@]}" --metrics "$dir/b.jsonl" --checkpoint "$dir/b" >"$dir/out" 2>&1 &
    local launcher=$!
    wait_for_steps "$dir/b.jsonl" 30 || { echo "FAIL $name: no steps logged"; fail=1; }
    # The ranks themselves, not mpirun: Slurm signals every task.
    pkill -TERM -f -- "^$TRAIN .*--checkpoint $dir/b"
    wait "$launcher"; local code=$?
    local stopped
    stopped=$(grep -o 'stopped by SIGTERM after step [0-9]* of 400' "$dir/out" | grep -o 'step [0-9]*' | cut -d' ' -f2)
    if [ "$code" != 143 ] || [ -z "$stopped" ]; then
        echo "FAIL $name: exit $code, expected 143 and the stop message:"; cat "$dir/out"; fail=1; return
    fi
    grep -q "checkpoint $dir/b/checkpoint.safetensors (continue with --resume)" "$dir/out" \
        || { echo "FAIL $name: the message does not name the checkpoint"; cat "$dir/out"; fail=1; }
    [ "$(grep -c '"step"' "$dir/b.jsonl")" = "$stopped" ] \
        || { echo "FAIL $name: logged $(grep -c '"step"' "$dir/b.jsonl") steps, stopped after $stopped"; fail=1; }
    [ "$stopped" -lt 400 ] || { echo "FAIL $name: the run was not stopped mid-run"; fail=1; }
    "$@" "$TRAIN" "${RUN[@]}" --metrics "$dir/b.jsonl" --checkpoint "$dir/b" --resume >"$dir/resume" 2>&1 \
        || { echo "FAIL $name: resume"; cat "$dir/resume"; fail=1; return; }
    grep -q "resumed from .* at step $stopped" "$dir/resume" || { echo "FAIL $name: did not resume at $stopped"; fail=1; }
    same_losses "$dir/ref.jsonl" "$dir/b.jsonl" || { echo "FAIL $name: resumed losses differ"; fail=1; }
    cmp -s "$dir/ref/checkpoint.safetensors" "$dir/b/checkpoint.safetensors" \
        || { echo "FAIL $name: final checkpoints differ"; fail=1; }
    echo "ok   $name (stopped after step $stopped of 400)"
}

check single env
if command -v mpirun >/dev/null; then
    check mpirun-3 mpirun -np 3 --oversubscribe
else
    echo "skip mpirun-3: no mpirun"
fi

# SIGINT (Ctrl-C) without --checkpoint: exit 130, saying nothing was saved.
"$TRAIN" "${RUN[@]}" --metrics "$TMP/c.jsonl" >"$TMP/c.out" 2>&1 &
pid=$!
wait_for_steps "$TMP/c.jsonl" 5
kill -INT "$pid"
wait "$pid"; code=$?
if [ "$code" = 130 ] && grep -q "stopped by SIGINT after step [0-9]* of 400; no --checkpoint was given, so nothing was saved" "$TMP/c.out"; then
    echo "ok   sigint-without-checkpoint"
else
    echo "FAIL sigint-without-checkpoint: exit $code"; cat "$TMP/c.out"; fail=1
fi
exit $fail
