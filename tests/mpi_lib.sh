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
#   digest_of CMD...
#                   the XXH3 digest CMD's summary prints ("output ... xxh3 X")
#   json_report NAME MODE P CMD...
#                   CMD --json prints one line on stdout: a JSON object with
#                   the keys of every --json report (rg_json_head), ranks P,
#                   parallel MODE, and the digest of CMD without --json
#   nan_npy PATH B T D
#                   an f32 .npy [B, T, D] of NaNs
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

digest_of() {
    timeout 60 "$@" 2>/dev/null | sed -n 's/^output .* xxh3 \([0-9a-f]\{16\}\).*/\1/p'
}

json_report() {
    local name=$1 mode=$2 np=$3
    shift 3
    checks=$((checks + 1))
    local want
    want=$(digest_of "$@")
    if [[ -z $want ]]; then
        fail "$name: the run without --json printed no digest"
        return
    fi
    if ! timeout 60 "$@" --json >"$tmp/json" 2>"$tmp/json.err"; then
        fail "$name: the run with --json failed"
        tail -n 5 "$tmp/json.err"
        return
    fi
    if [[ $(wc -l <"$tmp/json") != 1 ]]; then
        fail "$name: --json printed $(wc -l <"$tmp/json") lines on stdout, expected 1 (rank 0's):"
        head -c 600 "$tmp/json"
        return
    fi
    local keys=(model sizes causal output_shape xxh3 threads isa runs median_ms min_ms flops gflops
                peak_bytes random_weights random_inputs)
    local r
    if command -v python3 >/dev/null; then
        r=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
bad = [k for k in sys.argv[5:] if k not in j]
if bad: sys.exit("keys missing: %s" % bad)
if j["ranks"] != int(sys.argv[2]) or j["parallel"] != sys.argv[3]:
    sys.exit("ranks %r parallel %r" % (j["ranks"], j["parallel"]))
if j["xxh3"] != sys.argv[4]: sys.exit("xxh3 %s, the summary says %s" % (j["xxh3"], sys.argv[4]))
print("ok")' "$tmp/json" "$np" "$mode" "$want" "${keys[@]}" 2>&1)
    else
        r=ok
        for k in "${keys[@]}"; do grep -q "\"$k\":" "$tmp/json" || r="key $k missing"; done
        grep -q "\"ranks\":$np,\|\"ranks\":$np}" "$tmp/json" || r="ranks is not $np"
        grep -q "\"parallel\":\"$mode\"" "$tmp/json" || r="parallel is not $mode"
        grep -q "\"xxh3\":\"$want\"" "$tmp/json" || r="xxh3 is not $want"
    fi
    if [[ $r == ok ]]; then
        echo "ok $name: one JSON object, xxh3 $want as the summary's"
    else
        fail "$name: $r"
        head -c 600 "$tmp/json"
    fi
}

nan_npy() {
    local hdr="{'descr': '<f4', 'fortran_order': False, 'shape': ($2, $3, $4), }"
    while (((10 + ${#hdr} + 1) % 64)); do hdr+=" "; done
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((${#hdr} + 1)))\\x00"
        printf '%s\n' "$hdr"
        head -c $(($2 * $3 * $4 * 4)) /dev/zero | tr '\0' '\377'
    } >"$1"
}

# The summary line and status every script ends with.
finish() {
    echo "$group: $checks checks, $fails failed"
    ((fails == 0))
}
