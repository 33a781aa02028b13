#!/usr/bin/env bash
# run-graph --decode N --parallel context (the KV cache sharded by position over
# the ranks) under mpirun against the single-process run-graph --decode N
# (tests/CMakeLists.txt registers one test per group, with -DGGMLITE_MPI=ON):
#
#   test_mpi_decode.sh GROUP RUN_GRAPH MPI_CHECK MPIEXEC FIXTURES
#
#   mha     random weights at P = 1, 2, 4 (causal; rope; ALiBi + window + softcap),
#           a PyTorch fixture's mapped weights and input: within 1e-6 of the
#           largest output (mpi_check.c); P = 1 bitwise when the single
#           process's prompt is a decode-sized step (T H / G <= 8); --json (gqa, P = 2)
#   gqa     G = 2 with rope and sinks, B = 3; f16 and bf16 shards (--cache-dtype);
#           a fixture's weights (H 16, G 4)
#   long    a context longer than one rank's cache: prompt 40 + 24 tokens with
#           --cache-per-rank 20 at P = 4 (shards 20+20+20+4), 22 at P = 3
#           (22+22+20), against the single process's one cache of 64
#   faults  an over-full context (T + N > P C): every rank exits non-zero saying
#           so; a truncated weights file on rank 1; a missing input on rank 0;
#           usage errors (--max-len, --print-graph, a bad --cache-per-rank, llama)
#   off     (a build without MPI) --parallel context --decode says how to build it
#
# Every mpirun is oversubscribed and, as root, allowed to run as root; each has
# a time limit, so a hang fails instead of waiting.
set -uo pipefail
group=$1 rg=$2 check=$3 mpiexec=$4 fx=$5
# shellcheck source=mpi_lib.sh
source "$(dirname "$0")/mpi_lib.sh"

# same NAME TOL P ARGS...: mpirun -np P run-graph ARGS --parallel context --output,
# then mpi_check against the single-process $tmp/NAME.ref.npy.
same() {
    local name=$1 tol=$2 np=$3
    shift 3
    checks=$((checks + 1))
    local got=$tmp/$name.p$np.npy
    if ! timeout 30 "${mpi[@]}" -np "$np" "$rg" "$@" --threads 1 --output "$got" --parallel context \
        >"$tmp/log" 2>&1; then
        fail "$name P=$np: run-graph failed"
        tail -n 20 "$tmp/log"
        return
    fi
    local r
    r=$("$check" "$got" "$tmp/$name.ref.npy" "$tol" 2>&1) || {
        fail "$name P=$np: $r"
        return
    }
    if [[ $np == 1 && $bitwise == 1 && $r != bitwise* ]]; then
        fail "$name P=1: not bitwise equal to the single process: $r"
        return
    fi
    echo "ok $name P=$np: $(grep '^shards' "$tmp/log" | sed 's/ (K and V.*holding/, holding/'); $r"
}

# at NAME TOL "P..." ARGS...: the single-process run-graph ARGS --output (the reference),
# then each P of the list, with the extra flags in the array per_rank (--cache-per-rank).
per_rank=() bitwise=0
at() {
    local name=$1 tol=$2 nps=$3
    shift 3
    "$rg" "$@" --threads 1 --output "$tmp/$name.ref.npy" >/dev/null || {
        fail "$name: the single-process run failed"
        return
    }
    local np
    for np in $nps; do same "$name" "$tol" "$np" "$@" "${per_rank[@]}"; done
}

# every NAME N PATTERN: the last refuse's output holds PATTERN on N lines (one per rank).
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

case $group in
mha)
    at mha_random 1e-6 "1 2 4" mha --batch 2 --seq 13 --d-model 64 --heads 4 --decode 7
    json_report "gqa --json, P=2" context 2 "${mpi[@]}" -np 2 "$rg" gqa --seq 5 --d-model 64 --heads 4 \
        --kv-heads 2 --decode 3 --threads 1 --parallel context
    # P = 1 is bitwise the single process when its prompt step is a decode step too (at most
    # 8 query rows per kv head: the same flash_attn kernels over the same keys)
    bitwise=1
    at mha_t1_bitwise 1e-6 "1 2" mha --batch 2 --seq 1 --d-model 64 --heads 4 --decode 9
    bitwise=0
    at mha_rope 1e-6 "3" mha --batch 1 --seq 21 --d-model 64 --heads 8 --decode 11 --rope --rope-theta 500
    at mha_alibi 1e-6 "2" mha --seq 11 --d-model 48 --heads 6 --decode 9 --alibi --window 6 --softcap 3
    # mapped weights and an input file (a PyTorch fixture: biases)
    at mha_file 1e-6 "3" mha --heads 4 --decode 6 --weights "$fx/mha_bias_causal/weights.safetensors" \
        --input "$fx/mha_bias_causal/x.npy"
    ;;
gqa)
    at gqa_sinks 1e-6 "2 4" gqa --batch 3 --seq 9 --d-model 48 --heads 6 --kv-heads 3 --decode 5 \
        --sinks --rope --rope-theta 500
    bitwise=1
    at gqa_t3_bitwise 1e-6 "1 3" gqa --seq 3 --d-model 64 --heads 8 --kv-heads 4 --decode 9 --rope --sinks
    bitwise=0
    at gqa_g2 1e-6 "3" gqa --batch 2 --seq 17 --d-model 128 --heads 8 --kv-heads 2 --decode 10 --rope --window 7
    # f16 and bf16 shards against the single process's f16 and bf16 cache (P = 1 bitwise: the same
    # rounded K and V, the same kernels, when the prompt is decode-sized)
    bitwise=1
    at gqa_f16 1e-6 "1 2" gqa --seq 2 --d-model 64 --heads 8 --kv-heads 4 --decode 12 --rope --cache-dtype f16
    bitwise=0
    at mha_bf16 1e-6 "2" mha --batch 2 --seq 15 --d-model 48 --heads 4 --decode 9 --cache-dtype bf16
    at gqa_file 1e-6 "4" gqa --heads 16 --kv-heads 4 --decode 8 \
        --weights "$fx/gqa_seed_small/weights.safetensors" --input "$fx/gqa_seed_small/x.npy"
    ;;
long)
    # 64 positions, no rank holds more than 20 (22): the single process holds them in one cache
    per_rank=(--cache-per-rank 20)
    at long_c20 1e-6 "4" gqa --batch 1 --seq 40 --d-model 64 --heads 4 --kv-heads 2 --decode 24 --rope
    grep -q "holding 20+20+20+4 of the 64 positions" "$tmp/log" || fail "long_c20: not the shards 20+20+20+4"
    per_rank=(--cache-per-rank 22)
    at long_c22 1e-6 "3" mha --batch 2 --seq 40 --d-model 48 --heads 4 --decode 24 --rope --window 30
    grep -q "holding 22+22+20 of the 64 positions" "$tmp/log" || fail "long_c22: not the shards 22+22+20"
    ;;
faults)
    "$rg" mha --seq 5 --d-model 16 --heads 4 --causal --sinks --save-inputs "$tmp/sk" >/dev/null ||
        fail "mha --sinks --save-inputs failed"
    refuse "a file's sinks without --sinks (strict, as the single process)" nz \
        "1 tensor under the prefix '' is not used by mha: 'sinks'" "${mpi[@]}" -np 2 "$rg" mha --heads 4 \
        --weights "$tmp/sk/weights.safetensors" --input "$tmp/sk/x.npy" --decode 2 --threads 1 --parallel context
    refuse "an over-full context (64 positions > 4 x 15)" nz \
        "needs 64 cache positions, but the sharded cache holds 4 ranks x 15 .* = 60" \
        "${mpi[@]}" -np 4 "$rg" gqa --seq 40 --d-model 64 --heads 4 --kv-heads 2 --decode 24 \
        --cache-per-rank 15 --threads 1 --parallel context
    every "the over-full context" 4 "needs 64 cache positions"
    w=$fx/mha_bias_causal/weights.safetensors
    head -c 3000 "$w" >"$tmp/truncated.safetensors"
    refuse "truncated weights on rank 1, P=3" nz "rank 1: .*truncated.safetensors: .*end past" \
        env GGMLITE_MPI_TEST_FAULT="1:$tmp/truncated.safetensors" "${mpi[@]}" -np 3 "$rg" mha \
        --heads 4 --weights "$w" --decode 4 --threads 1 --parallel context
    every "the truncated file" 3 "rank 1: .*truncated.safetensors"
    refuse "a missing input file (rank 0)" nz "rank 0: .*no-such.npy" "${mpi[@]}" -np 2 "$rg" mha \
        --input "$tmp/no-such.npy" --decode 4 --threads 1 --parallel context
    refuse "--max-len" 2 "--max-len: with --parallel context the cache is sharded: give --cache-per-rank" \
        "$rg" mha --decode 4 --max-len 100 --parallel context
    refuse "--print-graph (was ignored)" 2 "--print-graph does not apply to --parallel context --decode" \
        "$rg" mha --decode 4 --print-graph --parallel context
    refuse "--cache-per-rank 0" 2 "--cache-per-rank: '0' is not a whole number" "$rg" mha --decode 4 \
        --cache-per-rank 0 --parallel context
    refuse "llama" 2 "--parallel context --decode runs mha or gqa, not 'llama'" "$rg" llama --decode 4 \
        --parallel=context
    ;;
off)
    refuse "--parallel context --decode without MPI" 2 "--parallel context: this run-graph was built without MPI" \
        "$rg" mha --decode 4 --parallel context
    ;;
*)
    echo "test_mpi_decode.sh: unknown group '$group'" >&2
    exit 2
    ;;
esac
finish
