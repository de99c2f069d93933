#!/usr/bin/env bash
# tessera-bench's HTML report in a real browser: headless Chromium (Debian's
# chromium package) loads the page of each mode, its DOM holds the plot (an
# SVG line per strategy or policy, a bar per row; measure's page a line
# measured and one predicted per budget), and its screenshot is a
# picture, not a blank page (many distinct pixel values, decoded here from the
# PNG with zlib). Skips (77) when Chromium is not installed.
# Usage: bench_report_browser_test.sh PATH/TO/tessera-bench
set -uo pipefail
BENCH="$1"
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "SKIP: no chromium (scripts/deps.sh installs Debian's)"; exit 77; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail=0
run_browser() {  # extra args..., file
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$TMP/profile" "$@" 2>/dev/null
}
check_page() {  # name, expected polylines, expected bars, tessera-bench args...
  local name=$1 lines=$2 bars=$3; shift 3
  "$BENCH" "$@" --format html -o "$TMP/$name.html" 2>/dev/null || { echo "FAIL $name: tessera-bench failed"; fail=1; return; }
  run_browser --dump-dom "file://$TMP/$name.html" >"$TMP/$name.dom"
  local got_lines got_bars
  got_lines=$(grep -o "<polyline" "$TMP/$name.dom" | wc -l)
  got_bars=$(grep -o "<rect" "$TMP/$name.dom" | wc -l)
  [ "$got_lines" = "$lines" ] || { echo "FAIL $name: $got_lines lines in the browser's DOM, want $lines"; fail=1; }
  [ "$got_bars" -ge "$bars" ] || { echo "FAIL $name: $got_bars bars in the browser's DOM, want at least $bars"; fail=1; }
  run_browser --screenshot="$TMP/$name.png" --window-size=1000,1200 "file://$TMP/$name.html" >/dev/null
  python3 - "$TMP/$name.png" <<'PY' || { echo "FAIL $name: the screenshot is not a picture of the report"; fail=1; }
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height = 8, b"", 0, 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR": width, height = struct.unpack(">II", body[:8])
    if kind == b"IDAT": idat += body
    pos += 12 + length
raw = zlib.decompress(idat)
assert (width, height) == (1000, 1200), (width, height)
# A blank or one-colour page has a handful of distinct bytes; text, lines and
# coloured bars give many.
assert len(set(raw)) > 64, len(set(raw))
PY
  [ $fail = 0 ] && echo "ok   $name"
}
# scaling: 4 strategies, 3 counts: 12 rows (4 legend squares + 12 bars)
check_page scaling 4 16 scaling --model mlp:layers=2,hidden=64 --batch 16 --devices 1,2,4
# budgets: 4 policies; 1 + 2x4 rows
check_page budgets 4 13 budgets --model mlp:layers=8,hidden=512 --batch 32 --ratios 2,4
# measure (real runs, one rank): per budget a measured and a predicted line; 3 legend squares + a bar
# of 3 parts per row
check_page measure 4 9 measure --model mlp:layers=6,hidden=64,input=64,classes=8 --batch 16 --steps 3 --devices 1 \
    --budgets none,1/4
exit $fail
