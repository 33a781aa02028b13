#!/usr/bin/env bash
# run-graph --parallel context (ring attention over the prompt) under mpirun
# against the single-process run (tests/CMakeLists.txt registers one test per
# group, with -DGGMLITE_MPI=ON):
#
#   test_mpi_ring.sh GROUP RUN_GRAPH MPI_CHECK MPIEXEC FIXTURES
#
#   mha     random weights, T not divisible by P: causal and not, rope and a
#           window (chunks wholly outside every query's window skipped), sinks and
#           ALiBi; a fixture's mapped weights: P = 1 bitwise, P = 2, 3, 4 within 1e-6
#           of the largest output (mpi_check.c), 2 runs bitwise alike; a wrong
#           reference must fail; --json (mha, llama)
#   gqa     G < H (G = 2, 1), rope, softcap, window; a PyTorch fixture
#   llama   the LLaMA layer on PyTorch fixtures (tests/fixtures/layers: GQA, biases,
#           sinks, softcap, window), and random weights; B > 1
#   zigzag  the load-balanced layout (--zigzag): mha, gqa, llama, a torch fixture
#   faults  a truncated weights file on one rank: every rank exits non-zero naming
#           that rank and the cause, no hang; more ranks than rows; usage errors
#
# Every mpirun is oversubscribed (P may exceed the cores) and, as root, allowed
# to run as root; each has a time limit, so a hang fails instead of waiting.
set -uo pipefail
group=$1 rg=$2 check=$3 mpiexec=$4 fx=$5
# shellcheck source=mpi_lib.sh
source "$(dirname "$0")/mpi_lib.sh"
refuse_timeout=60

# run P OUT ARGS...: mpirun -np P run-graph ARGS --parallel context --output OUT (log in $tmp/log)
run() {
    local np=$1 out=$2
    shift 2
    timeout 60 "${mpi[@]}" -np "$np" "$rg" "$@" --threads 1 --output "$out" --parallel context >"$tmp/log" 2>&1
}

# same NAME WANT.npy TOL P ARGS...: run, then mpi_check against WANT (P = 1 against
# the single process: must be bitwise).
same() {
    local name=$1 want=$2 tol=$3 np=$4
    shift 4
    checks=$((checks + 1))
    local got=$tmp/$name.p$np.npy
    if ! run "$np" "$got" "$@"; then
        fail "$name P=$np: run-graph failed"
        tail -n 20 "$tmp/log"
        return
    fi
    local r
    r=$("$check" "$got" "$want" "$tol" 2>&1) || {
        fail "$name P=$np: $r"
        return
    }
    if [[ $np == 1 && $want == "$tmp"/*.ref.npy && $r != bitwise* ]]; then
        fail "$name P=1: not bitwise equal to the single process: $r"
        return
    fi
    echo "ok $name P=$np: $(sed -n 2p "$tmp/log" | sed 's/^parallel context over //; s/, K\/V ring.*//'); $r"
}

# ref NAME ARGS...: the single-process output of run-graph ARGS into $tmp/NAME.ref.npy.
ref() {
    local name=$1 a args=()
    shift
    for a in "$@"; do [[ $a == --zigzag ]] || args+=("$a"); done # one layout in one process
    "$rg" "${args[@]}" --output "$tmp/$name.ref.npy" >/dev/null || fail "$name: the single-process run failed"
}

# at NAME "P..." ARGS...: the single-process reference, then each P of the list (1e-6).
at() {
    local name=$1 nps=$2
    shift 2
    ref "$name" "$@"
    local np
    for np in $nps; do same "$name" "$tmp/$name.ref.npy" 1e-6 "$np" "$@"; done
}

# again NAME P ARGS...: two runs at P give the same bits (the merge order is fixed,
# whatever order the chunks arrive in).
again() {
    local name=$1 np=$2
    shift 2
    checks=$((checks + 1))
    run "$np" "$tmp/a.npy" "$@" && run "$np" "$tmp/b.npy" "$@" || {
        fail "$name P=$np: run-graph failed"
        return
    }
    local r
    r=$("$check" "$tmp/a.npy" "$tmp/b.npy" 0 2>&1)
    [[ $r == bitwise* ]] && echo "ok $name P=$np twice: $r" || fail "$name P=$np twice: $r"
}

# differs NAME WANT P ARGS...: the check must catch a wrong answer (the test can fail).
differs() {
    local name=$1 want=$2 np=$3
    shift 3
    checks=$((checks + 1))
    run "$np" "$tmp/d.npy" "$@" || {
        fail "$name: run-graph failed"
        return
    }
    if "$check" "$tmp/d.npy" "$want" 1e-6 >/dev/null 2>&1; then
        fail "$name: matched a reference it must not match"
    else
        echo "ok $name: told apart"
    fi
}

L=$fx/layers
case $group in
mha)
    at mha_causal "1 2 3 4" mha --seq 13 --d-model 96 --heads 8 --causal
    at mha_full 3 mha --seq 10 --d-model 64 --heads 4
    json_report "mha --json, P=2" context 2 "${mpi[@]}" -np 2 "$rg" mha --seq 13 --d-model 96 --heads 8 \
        --causal --threads 1 --parallel context
    json_report "llama --json, P=2" context 2 "${mpi[@]}" -np 2 "$rg" llama --seq 7 --d-model 128 --heads 8 \
        --kv-heads 2 --threads 1 --parallel context
    # rank 3's rows 15..20 cannot see chunk 0 (rows 0..4) through a window of 5: skipped
    at mha_rope_window 4 mha --batch 1 --seq 21 --d-model 64 --heads 4 --rope --window 5
    at mha_sinks_alibi 4 mha --seq 11 --d-model 64 --heads 4 --sinks --alibi
    at mha_alibi_causal 3 mha --seq 11 --d-model 64 --heads 4 --alibi --causal --rope
    differs "ALiBi against a reference without it" "$tmp/mha_full.ref.npy" 2 mha --seq 10 --d-model 64 \
        --heads 4 --alibi
    # mapped weights and an input file (a PyTorch fixture: also within its tolerance of torch)
    file=(mha --heads 4 --causal --weights "$fx/mha_bias_causal/weights.safetensors"
          --input "$fx/mha_bias_causal/x.npy")
    at mha_file 3 "${file[@]}"
    same mha_file_vs_torch "$fx/mha_bias_causal/out.npy" 1e-5 4 "${file[@]}"
    ;;
gqa)
    at gqa_g2 "1 2 3 4" gqa --seq 17 --d-model 128 --heads 8 --kv-heads 2 --causal --rope --softcap 20
    again gqa_g2 4 gqa --seq 17 --d-model 128 --heads 8 --kv-heads 2 --causal --rope --softcap 20
    at gqa_mqa_window 4 gqa --batch 1 --seq 21 --d-model 96 --heads 12 --kv-heads 1 --window 3
    at gqa_file "1 3" gqa --heads 16 --kv-heads 4 --weights "$fx/gqa_seed_small/weights.safetensors" \
        --input "$fx/gqa_seed_small/x.npy"
    ;;
llama)
    # PyTorch fixtures (tests/fixtures/layers): GQA, q/k/v/o biases with 5 heads, sinks,
    # softcap, a window
    for c in "llama_gqa:1 2 4:3" "llama_mha_bias:3:2" "llama_sinks:4:4" "llama_softcap:2:2" \
        "llama_window:3:4"; do
        IFS=: read -r name nps torch_np <<<"$c"
        read -ra args <"$L/$name/args"
        args=("${args[@]//weights.safetensors/$L/$name/weights.safetensors}")
        args=("${args[@]//x.npy/$L/$name/x.npy}")
        at "$name" "$nps" "${args[@]}"
        same "${name}_vs_torch" "$L/$name/out.npy" 1e-5 "$torch_np" "${args[@]}"
    done
    at llama_random "1 3" llama --batch 2 --seq 11 --d-model 128 --heads 8 --kv-heads 2

    ;;
zigzag)
    # the load-balanced layout (rank r: segments r and 2P-1-r of 2P): causal, a window
    # skipping segment pairs with ALiBi and sinks, GQA, the LLaMA layer (and torch's)
    at mha_zigzag "2 4" mha --seq 13 --d-model 96 --heads 8 --causal --zigzag
    again mha_zigzag 3 mha --seq 13 --d-model 96 --heads 8 --causal --zigzag
    at mha_zigzag_window 3 mha --batch 1 --seq 21 --d-model 64 --heads 4 --rope --window 5 --alibi --sinks --zigzag
    at gqa_zigzag 3 gqa --seq 17 --d-model 128 --heads 8 --kv-heads 2 --causal --rope --softcap 20 --zigzag
    at llama_zigzag 4 llama --batch 2 --seq 11 --d-model 128 --heads 8 --kv-heads 2 --zigzag
    read -ra args <"$L/llama_gqa/args"
    args=("${args[@]//weights.safetensors/$L/llama_gqa/weights.safetensors}")
    same llama_gqa_zigzag_vs_torch "$L/llama_gqa/out.npy" 1e-5 2 "${args[@]//x.npy/$L/llama_gqa/x.npy}" --zigzag
    ;;
faults)
    w=$L/llama_gqa/weights.safetensors
    head -c 3000 "$w" >"$tmp/truncated.safetensors"
    refuse "truncated file on rank 1, P=3" nz "rank 1: .*truncated.safetensors: .*end past" \
        env GGMLITE_MPI_TEST_FAULT="1:$tmp/truncated.safetensors" "${mpi[@]}" -np 3 "$rg" llama \
        --heads 6 --weights "$w" --threads 1 --parallel context
    checks=$((checks + 1))
    if grep -c "rank 1: .*truncated.safetensors" "$tmp/log" | grep -qx 3; then
        echo "ok every one of the 3 ranks says so"
    else
        fail "not every rank printed the cause:"
        cat "$tmp/log"
    fi
    refuse "another model's weights on rank 2" nz "rank 2: .*llama weights: missing input_layernorm.weight" \
        env GGMLITE_MPI_TEST_FAULT="2:$fx/mha_bias_causal/weights.safetensors" "${mpi[@]}" -np 3 "$rg" llama \
        --heads 6 --weights "$w" --threads 1 --parallel context
    refuse "more ranks than rows" nz "rank 0 \(and 3 more\): context_parallel: 3 rows of the sequence cannot be split over 4 ranks" \
        "${mpi[@]}" -np 4 "$rg" mha --seq 3 --d-model 32 --heads 2 --threads 1 --parallel context
    refuse "zigzag: more ranks than half the rows" nz "cannot be split over 3 ranks in zigzag segments" \
        "${mpi[@]}" -np 3 "$rg" mha --seq 5 --d-model 32 --heads 2 --threads 1 --zigzag --parallel context
    refuse "--zigzag in heads mode" 2 "--zigzag: not a flag of --parallel heads" "$rg" mha --zigzag --parallel heads
    refuse "the block's own check (odd head size)" nz "rank 0 \(and 1 more\): llama: head_dim 9 .*must be even" \
        "${mpi[@]}" -np 2 "$rg" llama --seq 8 --d-model 36 --heads 4 --threads 1 --parallel context
    refuse "--sinks without the weight" nz "--sinks needs the weight 'sinks'" "${mpi[@]}" -np 2 "$rg" mha \
        --heads 4 --causal --sinks --weights "$fx/mha_bias_causal/weights.safetensors" --threads 1 --parallel context
    "$rg" mha --seq 6 --d-model 32 --heads 4 --causal --sinks --save-inputs "$tmp/sk" >/dev/null ||
        fail "mha --sinks --save-inputs failed"
    refuse "a file's sinks without --sinks (strict, as the single process)" nz \
        "rank 0 .*: .*1 tensor not used by mha: 'sinks'" "${mpi[@]}" -np 2 "$rg" mha --heads 4 --causal \
        --weights "$tmp/sk/weights.safetensors" --input "$tmp/sk/x.npy" --threads 1 --parallel context
    refuse "a missing input file (rank 0)" 1 "rank 0: .*no-such.npy" "$rg" mha \
        --input "$tmp/no-such.npy" --threads 1 --parallel context
    refuse "--alibi for llama" 2 "--alibi is for mha and gqa" "$rg" llama --alibi --parallel context
    refuse "--alibi in heads mode" 2 "--alibi: not a flag of --parallel heads" "$rg" mha --alibi --parallel heads
    refuse "--decode of llama" 2 "--parallel context --decode runs mha or gqa" "$rg" llama --decode 4 --parallel context
    refuse "no model" 2 "--parallel context: give the MODEL" "$rg" --parallel context
    ;;
*)
    echo "test_mpi_ring.sh: unknown group '$group'" >&2
    exit 2
    ;;
esac
finish
