# The run-graph test scripts' shared checks (sourced by tests/test_cli.sh and
# tests/test_loading.sh after they set RG (run-graph), CHECK (cli_check) and
# T (their scratch directory)). Each check counts in n_checks, a failure also
# in n_failed with one "FAIL: ..." line; the script ends with the counts.
n_checks=0 n_failed=0
pass() { n_checks=$((n_checks + 1)); }
fail() {
    n_checks=$((n_checks + 1)) n_failed=$((n_failed + 1))
    echo "FAIL: $*" >&2
}
# check DESCRIPTION COMMAND...: the command succeeds.
check() {
    local desc=$1
    shift
    if "$@" >"$T/check.out" 2>&1; then pass; else fail "$desc: $(head -c 600 "$T/check.out")"; fi
}
# run ARGS...: run-graph with stdout in $T/out, stderr in $T/err, status in $rc.
run() {
    "$RG" "$@" >"$T/out" 2>"$T/err"
    rc=$?
}
# expect_ok DESCRIPTION ARGS...
expect_ok() {
    local desc=$1
    shift
    run "$@"
    if [ "$rc" -eq 0 ]; then pass; else fail "$desc: exit $rc: $(cat "$T/err")"; fi
}
# digest ARGS...: the xxh3 of a --json run (empty on failure).
digest() {
    if "$RG" "$@" --json >"$T/d.json" 2>"$T/d.err"; then
        "$CHECK" json-get "$T/d.json" xxh3
    else
        echo "run-graph $* failed: $(cat "$T/d.err")" >&2
    fi
}
