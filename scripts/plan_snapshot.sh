#!/bin/bash
# tessera-plan's JSON for the zoo models, to show that a change to the code
# leaves every plan as it was:
#   bash scripts/plan_snapshot.sh DIR [TESSERA_PLAN]   writes DIR/*.json
#   bash scripts/plan_snapshot.sh --compare OLD NEW    diffs two snapshots,
#       leaving out the search-time fields (the only ones a rerun changes)
# Each model at 1, 2 and 4 devices with tofu, ddp and fsdp; at one device under
# --device-mem 64MiB (swap plans; the wresnet's error); at 2 with --executable.
set -uo pipefail
if [ "${1:-}" = --compare ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --compare OLD NEW" >&2; exit 2; }
  strip() { grep -v 'search_time_s\|search_s\|swap search (' "$1"; }
  differ=0
  for f in "$2"/*.json; do
    b=$(basename "$f")
    if ! diff -q <(strip "$f") <(strip "$3/$b") >/dev/null 2>&1; then echo "differs: $b"; differ=1; fi
  done
  echo "compared $(ls "$2"/*.json | wc -l) plans"
  exit $differ
fi
[ $# -ge 1 ] || { echo "usage: $0 DIR [TESSERA_PLAN] | --compare OLD NEW" >&2; exit 2; }
out=$1
plan=${2:-build/launch/tessera-plan}
[ -x "$plan" ] || { echo "$0: $plan is not a program; build first" >&2; exit 1; }
mkdir -p "$out"
for m in mlp cnn wresnet lstm transformer; do
  for n in 1 2 4; do
    for s in tofu ddp fsdp; do
      "$plan" --model $m --devices $n --strategy $s --format json > "$out/$m-$n-$s.json" 2>/dev/null
    done
  done
  "$plan" --model $m --devices 1 --device-mem 64MiB --format json > "$out/$m-swap.json" 2>&1
  "$plan" --model $m --devices 2 --executable --format json > "$out/$m-exec2.json" 2>&1
done
echo "wrote $(ls "$out"/*.json | wc -l) plans to $out"
