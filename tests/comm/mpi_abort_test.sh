#!/usr/bin/env bash
# mpi_abort() ends the whole job: rank 1 aborts with code 3 while ranks 0 and 2
# wait in a barrier that has no timeout. The job must end promptly, with code 3,
# and no rank may get past the barrier.
# Usage: mpi_abort_test.sh MPIEXEC COMM_MPI_TEST
set -u
mpiexec=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

start=$(date +%s)
timeout 60 "$mpiexec" --oversubscribe -np 3 "$prog" --abort-on-rank 1 >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))

fail() { echo "mpi_abort_test: $*"; echo "--- output ---"; cat "$out"; exit 1; }
[ "$rc" -ne 124 ] || fail "the job did not end within 60 s"
[ "$rc" -eq 3 ] || fail "exit code $rc, expected 3"
[ "$took" -le 30 ] || fail "the job took $took s to end"
grep -q "rank 1 aborts the job" "$out" || fail "rank 1 did not report why it aborted"
! grep -q "passed a barrier" "$out" || fail "a rank passed the barrier"
echo "mpi_abort_test: the job ended with code 3 after ${took} s"
