#!/usr/bin/env bash
# The ranks agree on their weights (gml_mpi_weights_agree) before computing, in
# every --parallel mode, under mpirun (tests/CMakeLists.txt, label mpi):
#
#   test_mpi_weights.sh GROUP RUN_GRAPH MPI_CHECK MPIEXEC FIXTURES TEST_PROGRAM
#
#   lib      test_mpi_weights.c at P = 1, 2 and 7: names, dtype, shape, digest,
#            a strided view hashing as its contiguous copy, several ranks named
#   heads    --parallel heads: one rank reads the same layer with another FFN
#            size, or with one value one ulp up (mpi_check ffn / nudge), or
#            rank 0 is the odd one (every other rank differs from it)
#   context  --parallel context: the same
#   decode   --parallel context --decode: another value on one rank
#
# GGMLITE_MPI_TEST_FAULT="R:PATH" makes rank R read PATH instead of --weights.
# Every such run must exit non-zero on every rank, each rank printing the
# rank(s) and the tensor that differ and how; the same file on every rank
# still runs (and matches the single process).
set -uo pipefail
group=$1 rg=$2 check=$3 mpiexec=$4 fx=$5 prog=${6:-}
# shellcheck source=mpi_lib.sh
source "$(dirname "$0")/mpi_lib.sh"

# every NAME N PATTERN: N lines of $tmp/log match PATTERN (one per rank).
every() {
    checks=$((checks + 1))
    local n
    n=$(grep -Ec -- "$3" "$tmp/log")
    if [[ $n == "$2" ]]; then
        echo "ok $1: all $2 ranks say so"
    else
        fail "$1: $n of $2 ranks printed the cause:"
        cat "$tmp/log"
    fi
}

# differ NAME P RANK PATH PATTERN ARGS...: rank RANK reads PATH; every one of the P
# ranks exits non-zero with PATTERN.
differ() {
    local name=$1 np=$2 r=$3 path=$4 pattern=$5
    shift 5
    refuse "$name" nz "$pattern" env GGMLITE_MPI_TEST_FAULT="$r:$path" "${mpi[@]}" -np "$np" "$rg" "$@" \
        --threads 1
    every "$name" "$np" "$pattern"
}

# agree NAME P ARGS...: the same file on every rank runs and matches the single process.
agree() {
    local name=$1 np=$2
    shift 2
    checks=$((checks + 1))
    local single=("${@:1:$#-2}")
    if ! "$rg" "${single[@]}" --output "$tmp/$name.ref.npy" >/dev/null; then
        fail "$name: the single-process run failed"
        return
    fi
    if ! timeout 30 "${mpi[@]}" -np "$np" "$rg" "$@" --threads 1 --output "$tmp/$name.npy" >"$tmp/log" 2>&1; then
        fail "$name: the same file on every rank failed:"
        tail -n 5 "$tmp/log"
        return
    fi
    local r
    r=$("$check" "$tmp/$name.npy" "$tmp/$name.ref.npy" 1e-6 2>&1) || {
        fail "$name: $r"
        return
    }
    echo "ok $name: the same file on all $np ranks: $r"
}

L=$fx/layers/llama_gqa
hex='[0-9a-f]{16}'
if [[ $group == heads || $group == context ]]; then
    "$check" ffn "$L/weights.safetensors" "$tmp/ffn64.safetensors" 64 || fail "mpi_check ffn failed"
    "$check" nudge "$L/weights.safetensors" "$tmp/nudged.safetensors" mlp.down_proj.weight ||
        fail "mpi_check nudge failed"
    args=(llama --heads 6 --kv-heads 2 --weights "$L/weights.safetensors" --input "$L/x.npy")
fi
case $group in
lib)
    for np in 1 2 7; do
        refuse "gml_mpi_weights_agree at P=$np" 0 "checks, 0 failed" "${mpi[@]}" -np "$np" "$prog"
    done
    ;;
heads | context)
    differ "$group: another FFN size on rank 1 (P=3)" 3 1 "$tmp/ffn64.safetensors" \
        "the ranks' weights differ .*: rank 1: tensor 'mlp.gate_proj.weight' is f32 \[64,48\], rank 0's is f32 \[100,48\] \(shape\)" \
        "${args[@]}" --parallel "$group"
    differ "$group: one value one ulp up on rank 2 (P=3)" 3 2 "$tmp/nudged.safetensors" \
        "rank 2: tensor 'mlp.down_proj.weight' f32 \[48,100\] has XXH3 $hex, rank 0's $hex \(digest: same name and shape, other values\)" \
        "${args[@]}" --parallel "$group"
    differ "$group: rank 0 the odd one (P=3)" 3 0 "$tmp/ffn64.safetensors" \
        "rank 1: tensor 'mlp.gate_proj.weight' is f32 \[100,48\], rank 0's is f32 \[64,48\] \(shape\); rank 2: tensor 'mlp.gate_proj.weight' is f32 \[100,48\]" \
        "${args[@]}" --parallel "$group"
    differ "$group: another FFN size on rank 1 (P=2)" 2 1 "$tmp/ffn64.safetensors" \
        "rank 1: tensor 'mlp.gate_proj.weight' is f32 \[64,48\]" "${args[@]}" --parallel "$group"
    agree "${group}_same_file" 3 "${args[@]}" --parallel "$group"
    ;;
decode)
    M=$fx/mha_bias_causal
    "$check" nudge "$M/weights.safetensors" "$tmp/nudged.safetensors" w_o.weight ||
        fail "mpi_check nudge failed"
    dargs=(mha --heads 4 --weights "$M/weights.safetensors" --input "$M/x.npy" --decode 3)
    differ "decode: one value one ulp up on rank 1 (P=3)" 3 1 "$tmp/nudged.safetensors" \
        "rank 1: tensor 'w_o.weight' f32 \[[0-9]+,[0-9]+\] has XXH3 $hex, rank 0's $hex \(digest" \
        "${dargs[@]}" --parallel context
    agree "decode_same_file" 3 "${dargs[@]}" --parallel context
    ;;
*)
    echo "test_mpi_weights.sh: unknown group '$group'" >&2
    exit 2
    ;;
esac
finish
