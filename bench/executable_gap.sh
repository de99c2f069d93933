#!/usr/bin/env bash
# What tessera-train runs against what the search finds: tessera-plan's
# search_bytes (the search's own count) for each zoo model, unrestricted and as tessera-train runs it
# (--executable), and also with --no-staged-reductions (every operator that
# reduces inside itself kept whole along its reduction), with the ratios.
# A benchmark, not a test: it reports.
#   bench/executable_gap.sh [BUILD_DIR] [DEVICES] [BATCH]
set -euo pipefail
build=${1:-build} devices=${2:-8} batch=${3:-64}
plan=$build/launch/tessera-plan
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bytes() { "$plan" --devices "$devices" --batch "$batch" --format json -o "$work/p.json" "$@" >/dev/null &&
          python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["search_bytes"])' "$work/p.json"; }
printf "%-28s %14s %14s %7s %14s %7s\n" model search executable ratio "-no-staged" ratio
for m in "wresnet:depth=50" cnn lstm transformer mlp "wresnet:depth=50 --strategy data"; do
  read -r -a args <<<"$m"
  args=(--model "${args[@]}")
  s=$(bytes "${args[@]}")
  e=$(bytes "${args[@]}" --executable)
  st=$(bytes "${args[@]}" --executable --no-staged-reductions)
  python3 -c 'import sys; m, s, e, t = sys.argv[1], *map(int, sys.argv[2:])
print(f"{m:<28} {s:>14,} {e:>14,} {e / s:>7.3f} {t:>14,} {t / s:>7.3f}")' "$m" "$s" "$e" "$st"
done
