# Shared by the CLI tests (sourced): `expect NAME WANT_RC NEEDLE -- CMD...` runs
# CMD, and checks its exit code and that its output contains NEEDLE. Failures
# set fail=1.
fail=0

expect() {
    local name="$1" want="$2" needle="$3"
    shift 4
    local out rc
    out="$("$@" 2>&1)"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL $name: exit $rc, want $want; output: $out"; fail=1; return
    fi
    if ! grep -qF -- "$needle" <<<"$out"; then
        echo "FAIL $name: output lacks '$needle': $out"; fail=1; return
    fi
    echo "ok   $name"
}
