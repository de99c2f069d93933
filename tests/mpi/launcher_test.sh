#!/usr/bin/env bash
# Ranks started by a launcher other than mpirun form one job (srun-style
# launch), and a process that the environment calls one of several but that
# cannot join them fails, promptly, saying why.
#   launcher_test.sh TESSERA_TRAIN
#
# The launch: mpirun starts the processes, but each one's environment is
# emptied (env -i) down to what `srun --mpi=pmix` gives an MPI program: the
# PMIx variables (PMIX_RANK, the server's address) and no OMPI_COMM_WORLD_*
# or other count. Open MPI 4's processes also need mpirun's daemon address,
# kept, to reach its PMIx server (under srun, Slurm's PMIx plugin serves).
# This machine's Open MPI 4.1 has no prterun.
set -uo pipefail
train=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model mlp:hidden=64 --data synthetic --synthetic-size 96 --batch 24 --steps 3 --no-eval --progress none
        --seed 3)
failed=0
fail() { echo "FAIL $*"; failed=1; }

# Runs TESSERA_TRAIN ARGS... with only the PMIx part of the environment mpirun gave it.
cat >"$work/pmix_only.sh" <<'EOF'
#!/usr/bin/env bash
keep=(PATH="$PATH" HOME="$HOME")
[ -n "${LD_LIBRARY_PATH:-}" ] && keep+=(LD_LIBRARY_PATH="$LD_LIBRARY_PATH")
while IFS='=' read -r name value; do
  case "$name" in PMIX_*|OMPI_MCA_orte_local_daemon_uri) keep+=("$name=$value") ;; esac
done < <(env)
exec env -i "${keep[@]}" "$@"
EOF
chmod +x "$work/pmix_only.sh"

# What the processes see: PMIX_RANK, and nothing that counts them.
timeout 60 mpirun --oversubscribe -np 2 "$work/pmix_only.sh" env >"$work/env.log" 2>&1
grep -q '^PMIX_RANK=1$' "$work/env.log" || fail "env: no PMIX_RANK=1 in the children's environment"
if grep -E '^(OMPI_COMM_WORLD|OMPI_UNIVERSE|OMPI_MCA_orte_ess_num_procs|PMI_SIZE|SLURM)' "$work/env.log"; then
  fail "env: a count survived in the children's environment"
fi

timeout 120 "$train" "${common[@]}" --metrics "$work/single.jsonl" >"$work/single.log" 2>&1 ||
  { fail "single-process run"; cat "$work/single.log"; }
for np in 2 3; do
  log=$work/srun$np.log
  timeout 120 mpirun --oversubscribe -np $np "$work/pmix_only.sh" "$train" "${common[@]}" \
    --metrics "$work/srun$np.jsonl" >"$log" 2>&1
  rc=$?
  [ $rc = 0 ] || { fail "np=$np: exit code $rc"; cat "$log"; continue; }
  grep -q "rank 0 of $np" "$log" || { fail "np=$np: no 'rank 0 of $np' in the output"; cat "$log"; }
  # One job: rank 0 alone wrote the metrics of a partitioned run that sent bytes, as planned.
  python3 - "$work/srun$np.jsonl" <<'PY' || fail "np=$np: the metrics are not those of a partitioned run"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
assert len(steps) == 3, f"{len(steps)} step lines"
for s in steps:
    assert "planned_comm_bytes" in s and s["comm_bytes"] > 0, s
PY
  python3 "$here/compare_runs.py" "$work/single.jsonl" "$work/srun$np.jsonl" >"$work/compare$np.log" 2>&1 ||
    { fail "np=$np: differs from the single-process run"; cat "$work/compare$np.log"; }
  [ $failed = 0 ] && echo "ok   np=$np under a PMIx-only launch: $(grep -m1 "rank 0 of" "$log")"
done

# A process that a launcher's variables call one of 2, started alone: MPI
# comes up with a world of 1, and the run must fail (exit 1) saying so and
# naming the fix, within the timeout (no hang waiting for peers).
expect_alone() {
  local name=$1 needle=$2
  shift 2
  local out rc
  out=$(timeout 60 env "$@" "$train" "${common[@]}" --metrics "$work/alone.jsonl" 2>&1)
  rc=$?
  if [ $rc != 1 ]; then fail "$name: exit code $rc, want 1: $out"; return; fi
  grep -qF -- "$needle" <<<"$out" || { fail "$name: output lacks '$needle': $out"; return; }
  grep -qF -- "srun --mpi=pmix" <<<"$out" || { fail "$name: no fix named: $out"; return; }
  [ ! -s "$work/alone.jsonl" ] || { fail "$name: wrote metrics"; return; }
  echo "ok   $name: $(grep -m1 -F -- "$needle" <<<"$out")"
}
expect_alone srun-without-pmi "srun started 2 processes (SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0), but MPI put this one in a job of 1: each process would train alone" \
  SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0
expect_alone foreign-pmi "a PMI launcher (MPICH's mpiexec, srun --mpi=pmi2) started 2 processes (PMI_SIZE=2, PMI_RANK=0), but MPI put this one in a job of 1" \
  PMI_SIZE=2 PMI_RANK=0
exit $failed
