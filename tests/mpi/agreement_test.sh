#!/usr/bin/env bash
# Ranks started with different arguments (an MPMD launch) are stopped before
# any other exchange, every rank with the same message naming what differs;
# the same model spelled two ways is one model.
#   agreement_test.sh TESSERA_TRAIN
set -uo pipefail
train=$1
source "$(dirname "${BASH_SOURCE[0]}")/../cli/expect.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--data synthetic --synthetic-size 256 --batch 16 --steps 2 --progress none --no-eval --comm-timeout 20)
# Before, the ranks met in collectives of different sizes and one segfaulted inside OpenMPI.
expect models-differ 1 "the ranks disagree on their arguments: rank 0 has '--model mlp:classes=10,hidden=64,input=784,layers=3' but rank 1 has '--model mlp:classes=10,hidden=32,input=784,layers=3'; start every rank with the same arguments" -- \
  timeout 120 mpirun --oversubscribe -np 1 "$train" --model mlp:hidden=64 "${common[@]}" : \
                                     -np 1 "$train" --model mlp:hidden=32 "${common[@]}"
out="$(timeout 120 mpirun --oversubscribe -np 1 "$train" --model mlp:hidden=64 "${common[@]}" : \
                                         -np 1 "$train" --model mlp:hidden=32 "${common[@]}" 2>&1)"
[ "$(grep -c "the ranks disagree on their arguments" <<<"$out")" -ge 2 ] && echo "ok   models-differ-every-rank" ||
  { echo "FAIL models-differ-every-rank: $out"; fail=1; }
expect seeds-differ 1 "rank 0 has '--seed 1' but rank 2 has '--seed 2'" -- \
  timeout 120 mpirun --oversubscribe -np 2 "$train" --model mlp:hidden=64 "${common[@]}" : \
                                     -np 1 "$train" --model mlp:hidden=64 --seed 2 "${common[@]}"
expect same-model-two-spellings 0 "summary:" -- \
  timeout 120 mpirun --oversubscribe -np 1 "$train" --model mlp:hidden=64 "${common[@]}" : \
                                     -np 1 "$train" --model mlp:layers=3,hidden=64 "${common[@]}"
exit $fail
