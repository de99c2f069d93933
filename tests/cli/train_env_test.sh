#!/usr/bin/env bash
# tessera-train --version and --env (both exit 0 and need no GPU), and the
# thread budget's flag and variables: their effect and their errors.
# Usage: train_env_test.sh PATH/TO/tessera-train
set -uo pipefail
TRAIN="$1"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

SMALL=(--model mlp:layers=2,hidden=32,input=20,classes=4 --data synthetic --synthetic-size 64 --batch 32 --steps 1
       --no-eval --progress none --device cpu)

# ---- --version ------------------------------------------------------------------
expect version 0 "tessera-train " -- "$TRAIN" --version
out="$("$TRAIN" --version 2>&1)"
grep -qE "^tessera-train [0-9]+\.[0-9]+\.[0-9]+ \(git [^ )]+\)$" <<<"$out" || { echo "FAIL version-format: '$out'"; fail=1; }

# ---- --env: one line per component; no GPU needed --------------------------------
expect env 0 "openblas: " -- "$TRAIN" --env
out="$(CUDA_VISIBLE_DEVICES= "$TRAIN" --env 2>&1)"
rc=$?
[ $rc = 0 ] || { echo "FAIL env-without-gpu: exit $rc: $out"; fail=1; }
for line in "^tessera: [0-9]+\.[0-9]+\.[0-9]+ \(git .+ when configured, .* build\)$" \
            "^compiler: .+" \
            "^halide: 14[0-9.]*; CPU kernels for [a-z0-9_]+-[a-z0-9_]+-.+ \(the first this CPU runs of TESSERA_HALIDE_TARGET=.+\)$" \
            "^openblas: OpenBLAS [0-9]+\.[0-9]+" \
            "^mpi: (Open MPI v[0-9.]+|MPICH|.*not in this build)" \
            "^cuda: (runtime [0-9.]+, driver ([0-9.]+|none)|not in this build .*)$" \
            "^nccl: ([0-9]+\.[0-9]+\.[0-9]+|not in this build .*)$" \
            "^gpus: none \(.+\)$" \
            "^cpus: [0-9]+ online, [0-9]+ in this process's affinity mask$" \
            "^threads: [0-9]+ each for OpenBLAS and Halide \(.+\) for a process alone$" \
            "^launcher: none \(this process runs alone\)$"; do
  grep -qE "$line" <<<"$out" || { echo "FAIL env-line: no line matches '$line' in:"; echo "$out"; fail=1; }
done
[ $fail = 0 ] && echo "ok   env-lines"
out="$(OMP_NUM_THREADS=3 "$TRAIN" --env 2>&1)"
grep -qxF "threads: 3 each for OpenBLAS and Halide (OMP_NUM_THREADS) for a process alone" <<<"$out" ||
  { echo "FAIL env-omp: $out"; fail=1; }
out="$(OMP_NUM_THREADS=3 "$TRAIN" --env --threads 2 2>&1)"
grep -qxF "threads: 2 each for OpenBLAS and Halide (--threads) for a process alone" <<<"$out" ||
  { echo "FAIL env-flag: $out"; fail=1; }
out="$(SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=1 "$TRAIN" --env 2>&1)"
grep -qxF "launcher: srun, 4 processes (SLURM_STEP_NUM_TASKS=4, SLURM_PROCID=1)" <<<"$out" ||
  { echo "FAIL env-launcher: $out"; fail=1; }

# ---- the thread budget --------------------------------------------------------------
expect threads-run 0 "summary:" -- "$TRAIN" "${SMALL[@]}" --threads 2
expect threads-zero 2 "--threads" -- "$TRAIN" "${SMALL[@]}" --threads 0
expect threads-word 2 "--threads" -- "$TRAIN" "${SMALL[@]}" --threads many
expect omp-threads-run 0 "summary:" -- env OMP_NUM_THREADS=2,1 "$TRAIN" "${SMALL[@]}"
expect bad-omp-threads 1 "OMP_NUM_THREADS='lots' is not a number of threads (a whole number from 1 to 1024); set it to one, or unset it to give each rank its share of the host's cores" -- \
  env OMP_NUM_THREADS=lots "$TRAIN" "${SMALL[@]}"
expect bad-openblas-threads 1 "OPENBLAS_NUM_THREADS='0' is not a number of threads" -- \
  env OPENBLAS_NUM_THREADS=0 "$TRAIN" "${SMALL[@]}"
expect bad-halide-threads 1 "HL_NUM_THREADS='-2' is not a number of threads" -- \
  env HL_NUM_THREADS=-2 "$TRAIN" "${SMALL[@]}"
# --threads decides, so a malformed variable is not read.
expect flag-beats-variable 0 "summary:" -- env OMP_NUM_THREADS=lots "$TRAIN" "${SMALL[@]}" --threads 1

# ---- a launcher's variable that is not a number ----------------------------------
expect bad-launcher-variable 1 "environment variable SLURM_STEP_NUM_TASKS='two' is not an integer >= 1; launchers (mpirun, srun) set it, so start the job with one or unset it" -- \
  env SLURM_STEP_NUM_TASKS=two "$TRAIN" "${SMALL[@]}"
exit $fail
