#!/usr/bin/env bash
# A rank that dies or hangs ends the whole job promptly, with a message naming
# it and a non-zero exit (the failure bar).
#   failure_test.sh TESSERA_TRAIN [--kill-only] [TRAIN FLAGS]
# --kill-only runs the first case alone (on GPUs through NCCL, which cannot
# say which peer is late, the hang cases' messages differ).
set -uo pipefail
train=$1
shift
kill_only=0
if [ "${1:-}" = --kill-only ]; then kill_only=1; shift; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model mlp:hidden=64 --data synthetic --synthetic-size 960 --batch 24 --steps 400 --lr-schedule constant
        --progress none --no-eval --partition tofu "$@")
failed=0

# 1. Rank 1 is SIGKILLed as step 5 starts. The hook prints the moment it dies.
start=$(date +%s.%N)
TESSERA_FAULT_KILL=1:5 timeout 120 mpirun --oversubscribe -np 3 "$train" "${common[@]}" >"$work/kill.log" 2>&1
rc=$?
end=$(date +%s.%N)
died=$(sed -n 's/.*TESSERA_FAULT_KILL: rank 1 kills itself at \([0-9.]*\).*/\1/p' "$work/kill.log" | head -1)
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then echo "FAIL kill: exit code $rc"; failed=1; fi
if [ -z "$died" ]; then echo "FAIL kill: the rank did not report its death"; cat "$work/kill.log"; failed=1; died=$start; fi
took=$(python3 -c "print(f'{$end - $died:.1f}')")
if python3 -c "import sys; sys.exit(0 if $end - $died < 10 else 1)"; then :; else echo "FAIL kill: took ${took}s after the kill"; failed=1; fi
if grep -qiE "rank 1\b|process rank 1 " "$work/kill.log"; then :; else echo "FAIL kill: no message names rank 1"; cat "$work/kill.log"; failed=1; fi
[ $failed = 0 ] && echo "ok   SIGKILL of rank 1: exit $rc ${took}s after the kill: $(grep -m1 -iE 'process rank 1 ' "$work/kill.log")"

[ $kill_only = 1 ] && exit $failed

# 2. Rank 2 hangs (alive, silent): the watchdog fails the job naming it.
start=$(date +%s.%N)
TESSERA_FAULT_HANG=2:5 timeout 120 mpirun --oversubscribe -np 3 "$train" "${common[@]}" --comm-timeout 2 \
  >"$work/hang.log" 2>&1
rc=$?
end=$(date +%s.%N)
took=$(python3 -c "print(f'{$end - $start:.1f}')")
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then echo "FAIL hang: exit code $rc after ${took}s"; failed=1; fi
if grep -qE "timed out after 2 s waiting for rank 2" "$work/hang.log"; then
  echo "ok   rank 2 hangs: exit $rc after ${took}s: $(grep -m1 'timed out' "$work/hang.log")"
else
  echo "FAIL hang: no watchdog message naming rank 2:"; cat "$work/hang.log"; failed=1
fi

# 3. Rank 0 hangs in a plan with no communication (every extent is below 3, so
# everything is replicated): the others wait under the watchdog, not in
# MPI_Finalize. They meet rank 0 at the next step boundary's stop agreement (a
# 4-byte all-gather, stop_request.h), or at the final barrier.
start=$(date +%s.%N)
TESSERA_FAULT_HANG=0:5 timeout 120 mpirun --oversubscribe -np 3 "$train" --model mlp:layers=1,input=2,classes=2 \
  --data synthetic --synthetic-size 64 --batch 2 --steps 20 --progress none --no-eval --comm-timeout 3 \
  >"$work/idle.log" 2>&1
rc=$?
end=$(date +%s.%N)
took=$(python3 -c "print(f'{$end - $start:.1f}')")
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then echo "FAIL idle hang: exit code $rc after ${took}s"; failed=1; fi
if grep -q " 0 collectives per step" "$work/idle.log" && grep -qE "(barrier|all_gather) over ranks \[0,1,2\] timed out after 3 s waiting for rank 0" "$work/idle.log"; then
  echo "ok   rank 0 hangs with no communication: exit $rc after ${took}s"
else
  echo "FAIL idle hang: no timeout naming rank 0 (or the plan communicates):"; cat "$work/idle.log"; failed=1
fi
exit $failed
