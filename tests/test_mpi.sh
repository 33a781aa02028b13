#!/usr/bin/env bash
# run-graph --parallel heads under mpirun against the single-process run
# (tests/CMakeLists.txt registers one test per group, with -DGGMLITE_MPI=ON):
#
#   test_mpi.sh GROUP RUN_GRAPH MPI_CHECK MPIEXEC FIXTURES
#
#   mha     random weights, and a fixture's mapped weights and input: P = 1 bitwise,
#           P = 2, 3, 4 within 1e-6 of the largest output (mpi_check.c); sinks (--sinks,
#           random or a file's; a file's without it refused as unused); --json (also llama)
#   gqa     kv heads split (P divides G) and replicated (groups spanning ranks),
#           rope, window, softcap; a PyTorch fixture
#   llama   the LLaMA layer on PyTorch fixtures (tests/fixtures/layers): GQA, biases,
#           sinks; random weights with uneven MLP rows
#   faults  a truncated weights file or another model's weights on one rank: every
#           rank exits non-zero naming that rank and the cause, no hang; an extra
#           tensor (refused; --non-strict: ignored, heads and context); --nan-trap
#           naming the rank and the node; usage errors
#   off     (a build without MPI) --parallel heads and context say how to build it
#
# Every mpirun is oversubscribed (P may exceed the cores) and, as root, allowed
# to run as root; each has a time limit, so a hang fails instead of waiting.
set -uo pipefail
group=$1 rg=$2 check=$3 mpiexec=$4 fx=$5
# shellcheck source=mpi_lib.sh
source "$(dirname "$0")/mpi_lib.sh"

# same NAME WANT.npy TOL P ARGS...: mpirun -np P run-graph ARGS --parallel heads
# --output, then mpi_check against WANT (P = 1: must be bitwise).
same() {
    local name=$1 want=$2 tol=$3 np=$4
    shift 4
    checks=$((checks + 1))
    local got=$tmp/$name.p$np.npy
    if ! timeout 30 "${mpi[@]}" -np "$np" "$rg" "$@" --threads 1 --output "$got" --parallel heads \
        >"$tmp/log" 2>&1; then
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
    echo "ok $name P=$np: $(sed -n 2p "$tmp/log" | sed 's/^parallel heads over //'); $r"
}

# ref NAME ARGS...: the single-process output of run-graph ARGS into $tmp/NAME.ref.npy.
ref() {
    local name=$1
    shift
    "$rg" "$@" --output "$tmp/$name.ref.npy" >/dev/null || fail "$name: the single-process run failed"
}

# at NAME TOL "P..." ARGS...: the single-process reference, then each P of the list.
at() {
    local name=$1 tol=$2 nps=$3
    shift 3
    ref "$name" "$@"
    local np
    for np in $nps; do same "$name" "$tmp/$name.ref.npy" "$tol" "$np" "$@"; done
}

L=$fx/layers
case $group in
mha)
    at mha_random 1e-6 "1 2 3 4" mha --seq 13 --d-model 96 --heads 8 --causal
    json_report "mha --json, P=2" heads 2 "${mpi[@]}" -np 2 "$rg" mha --seq 13 --d-model 96 --heads 8 \
        --causal --threads 1 --parallel heads
    at mha_rope 1e-6 3 mha --batch 1 --seq 21 --d-model 64 --heads 4 --rope --window 5
    # mapped weights and an input file (a PyTorch fixture: also within its tolerance of torch)
    file=(mha --heads 4 --causal --weights "$fx/mha_bias_causal/weights.safetensors"
          --input "$fx/mha_bias_causal/x.npy")
    at mha_file 1e-6 3 "${file[@]}"
    same mha_file_vs_torch "$fx/mha_bias_causal/out.npy" 1e-5 4 "${file[@]}"
    # sinks: random, and from a file (the single process's --save-inputs); a file's
    # sinks without --sinks are an unused tensor, as in the single process
    at mha_sinks 1e-6 "1 3" mha --seq 9 --d-model 64 --heads 4 --causal --sinks
    "$rg" mha --seq 6 --d-model 32 --heads 4 --causal --sinks --save-inputs "$tmp/sk" >/dev/null ||
        fail "mha --sinks --save-inputs failed"
    sk=(mha --heads 4 --causal --weights "$tmp/sk/weights.safetensors" --input "$tmp/sk/x.npy")
    at mha_file_sinks 1e-6 "1 2" "${sk[@]}" --sinks
    refuse "a file's sinks without --sinks (strict)" nz "rank 0 .*: .*1 tensor not used by mha: 'sinks'" \
        "${mpi[@]}" -np 2 "$rg" "${sk[@]}" --threads 1 --parallel heads
    ;;
gqa)
    # G = 2: split at P = 2, replicated at P = 3 (rank 1's heads 2..4 read kv heads 0 and 1), 4
    at gqa_g2 1e-6 "1 2 3 4" gqa --seq 17 --d-model 128 --heads 8 --kv-heads 2 --causal --rope --softcap 20
    # G = 4, H = 12: at P = 3 (3 does not divide 4) each rank's 4 heads span two groups
    at gqa_g4 1e-6 3 gqa --batch 1 --seq 9 --d-model 96 --heads 12 --kv-heads 4 --window 3
    at gqa_file 1e-6 4 gqa --heads 16 --kv-heads 4 --weights "$fx/gqa_seed_small/weights.safetensors" \
        --input "$fx/gqa_seed_small/x.npy"
    ;;
llama)
    # PyTorch fixtures (tests/fixtures/layers): GQA, q/k/v/o biases with 5 heads, sinks
    for c in "llama_gqa:1 2 3 4:3" "llama_mha_bias:3:3" "llama_sinks:4:2"; do
        IFS=: read -r name nps torch_np <<<"$c"
        read -ra args <"$L/$name/args"
        args=("${args[@]//weights.safetensors/$L/$name/weights.safetensors}")
        args=("${args[@]//x.npy/$L/$name/x.npy}")
        at "$name" 1e-6 "$nps" "${args[@]}"
        same "${name}_vs_torch" "$L/$name/out.npy" 1e-5 "$torch_np" "${args[@]}"
    done
    # random weights: F = 352 rows split 117+117+118 at P = 3
    at llama_random 1e-6 3 llama --seq 7 --d-model 128 --heads 8 --kv-heads 2
    json_report "llama --json, P=2" heads 2 "${mpi[@]}" -np 2 "$rg" llama --seq 7 --d-model 128 --heads 8 \
        --kv-heads 2 --threads 1 --parallel heads
    ;;
faults)
    w=$L/llama_gqa/weights.safetensors
    head -c 3000 "$w" >"$tmp/truncated.safetensors"
    refuse "truncated file on rank 1, P=3" nz "rank 1: .*truncated.safetensors: .*end past" \
        env GGMLITE_MPI_TEST_FAULT="1:$tmp/truncated.safetensors" "${mpi[@]}" -np 3 "$rg" llama \
        --heads 6 --weights "$w" --threads 1 --parallel heads
    refuse "another model's weights on rank 2 (tensors missing)" nz \
        "rank 2: .*llama weights: missing input_layernorm.weight" \
        env GGMLITE_MPI_TEST_FAULT="2:$fx/mha_bias_causal/weights.safetensors" "${mpi[@]}" -np 3 "$rg" llama \
        --heads 6 --weights "$w" --threads 1 --parallel heads
    checks=$((checks + 1))
    if grep -c "rank 2: .*llama weights: missing" "$tmp/log" | grep -qx 3; then
        echo "ok every one of the 3 ranks says so"
    else
        fail "not every rank printed the cause:"
        cat "$tmp/log"
    fi
    # strict, as the single process: a tensor the block does not bind is an error
    mk=$(dirname "$check")/loading_files
    if [[ -x $mk ]] && "$mk" st-rename "$fx/mha_bias_causal/weights.safetensors" "$tmp/extra.safetensors" "" \
        extra=out_proj.bais; then
        refuse "an extra tensor (strict)" nz "rank 0 .*: .*1 tensor not used by mha: 'out_proj.bais'" \
            "${mpi[@]}" -np 2 "$rg" mha --weights "$tmp/extra.safetensors" --heads 4 --threads 1 --parallel heads
        # --non-strict lets it pass, as in the single process: the output is the file's without it
        for mode in heads context; do
            checks=$((checks + 1))
            a=$(digest_of "${mpi[@]}" -np 2 "$rg" mha --weights "$tmp/extra.safetensors" --heads 4 --threads 1 \
                --non-strict --parallel $mode)
            b=$(digest_of "${mpi[@]}" -np 2 "$rg" mha --weights "$fx/mha_bias_causal/weights.safetensors" \
                --heads 4 --threads 1 --parallel $mode)
            if [[ -n $a && $a == "$b" ]]; then
                echo "ok --non-strict, --parallel $mode: the extra tensor ignored (xxh3 $a as without it)"
            else
                fail "--non-strict, --parallel $mode: xxh3 '$a', without the extra tensor '$b'"
            fi
        done
    else
        fail "loading_files (built beside mpi_check) could not add a tensor"
    fi
    # (without mpirun: a singleton MPI job of one rank)
    refuse "a missing input file (rank 0)" 1 "rank 0: .*no-such.npy" "$rg" mha \
        --input "$tmp/no-such.npy" --threads 1 --parallel heads
    refuse "more ranks than heads" nz "heads 4 cannot be split over 5 ranks" "${mpi[@]}" -np 5 "$rg" mha \
        --heads 4 --threads 1 --parallel heads
    # --nan-trap: each rank traps in its own graphs; every rank names the rank and the node
    nan_npy "$tmp/nan.npy" 1 5 32
    refuse "--nan-trap, P=2" 1 "rank 0 \(and 1 more\): compute failed: nan trap: node .*\(matmul\)" \
        "${mpi[@]}" -np 2 "$rg" mha --heads 4 --input "$tmp/nan.npy" --threads 1 --nan-trap --parallel heads
    checks=$((checks + 1))
    if grep -c "rank 0 (and 1 more): compute failed: nan trap" "$tmp/log" | grep -qx 2; then
        echo "ok both ranks say so"
    else
        fail "not every rank printed the trap:"
        cat "$tmp/log"
    fi
    refuse "--nan-trap, llama P=2 (the layer's first node)" 1 "nan trap: node 0 'attn_norm'" \
        "${mpi[@]}" -np 2 "$rg" llama --heads 4 --input "$tmp/nan.npy" --threads 1 --nan-trap --parallel heads
    refuse "--nan-trap in context mode (the ring runner has no trap)" 2 "--nan-trap: not a flag of --parallel context" \
        "$rg" mha --nan-trap --parallel context
    refuse "--non-strict without --weights" 2 "--non-strict is for --weights" "$rg" mha --non-strict \
        --parallel heads
    refuse "--prefix (the block's names only)" 2 "--prefix: not a flag of --parallel heads" "$rg" mha \
        --prefix a. --weights "$fx/mha_bias_causal/weights.safetensors" --parallel heads
    refuse "ALiBi refused" 2 "not a flag of --parallel heads" "$rg" mha --alibi --parallel heads
    refuse "--parallel context --decode of llama" 2 "--parallel context --decode runs mha or gqa, not 'llama'" \
        "$rg" llama --decode 2 --parallel context
    refuse "no model" 2 "give the MODEL: mha, gqa or llama" "$rg" --parallel heads
    refuse "bert" 2 "runs mha, gqa or llama, not 'bert'" "$rg" bert --parallel heads
    ;;
off)
    refuse "--parallel heads without MPI" 2 "built without MPI.*-DGGMLITE_MPI=ON" "$rg" mha --parallel heads
    refuse "--parallel context without MPI" 2 "context: this run-graph was built without MPI.*-DGGMLITE_MPI=ON" \
        "$rg" mha --parallel context
    refuse "--parallel bogus" 2 "'ring' is not heads or context" "$rg" mha --parallel=ring
    ;;
*)
    echo "test_mpi.sh: unknown group '$group'" >&2
    exit 2
    ;;
esac
finish
