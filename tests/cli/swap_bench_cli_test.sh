#!/usr/bin/env bash
# tessera-bench-swap's flags: the roofline's host link set by --host-gbps, and
# the usage errors.
# Usage: swap_bench_cli_test.sh PATH/TO/tessera-bench-swap
set -uo pipefail
BENCH="$1"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

expect host-gbps-without-roofline 2 "--host-gbps sets a roofline's host link; without --roofline the link is measured" \
    -- "$BENCH" --ratios --host-gbps 50
expect host-gbps-zero 2 "--host-gbps needs a positive number, got '0'" -- "$BENCH" --ratios --roofline h100 --host-gbps 0
expect host-gbps-text 2 "--host-gbps needs a positive number, got 'fast'" \
    -- "$BENCH" --ratios --roofline h100 --host-gbps fast
expect unknown-flag 2 "unknown flag '--link'" -- "$BENCH" --link 50
# The link the rows are planned with: the preset's, or the one given.
expect preset-link 0 "host link 25.00 / 25.00 GB/s" -- "$BENCH" --ratios --quick --roofline h100 --models mlp
expect given-link 0 "host link 50.00 / 50.00 GB/s" \
    -- "$BENCH" --ratios --quick --roofline h100 --host-gbps 50 --models mlp
exit $fail
