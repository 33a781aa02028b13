# The setup and checks the MPI test scripts share (test_mpi.sh: heads;
# test_mpi_ring.sh: context, the prompt; test_mpi_decode.sh: context with
# --decode), sourced after `group=$1 rg=$2 check=$3 mpiexec=$4 fx=$5`:
#
#   $tmp            a scratch directory, removed on exit
#   fails, checks   counters; fail MSG counts a failure and says it
#   mpi             mpirun oversubscribed (P may exceed the cores), allowed to run
#                   as root when root; a waiting rank gives its core away
#   refuse NAME STATUS PATTERN CMD...
#                   CMD must exit with STATUS (nz: any non-zero) within
#                   $refuse_timeout seconds (default 30; a hang fails) and print
#                   a line matching PATTERN (grep -E)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
mpi=("$mpiexec" --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

refuse() {
    local name=$1 status=$2 pattern=$3 limit=${refuse_timeout:-30}
    shift 3
    checks=$((checks + 1))
    timeout "$limit" "$@" >"$tmp/log" 2>&1
    local rc=$?
    if [[ $rc == 124 ]]; then
        fail "$name: still running after $limit s (a hang)"
    elif [[ $status == nz && $rc == 0 ]] || [[ $status != nz && $rc != "$status" ]]; then
        fail "$name: exit status $rc, expected $status"
        tail -n 5 "$tmp/log"
    elif ! grep -Eq -- "$pattern" "$tmp/log"; then
        fail "$name: the output lacks /$pattern/:"
        tail -n 5 "$tmp/log"
    else
        echo "ok $name: $(grep -E -m1 -- "$pattern" "$tmp/log")"
    fi
}

# The summary line and status every script ends with.
finish() {
    echo "$group: $checks checks, $fails failed"
    ((fails == 0))
}
