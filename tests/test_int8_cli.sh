#!/usr/bin/env bash
# run-graph --weights-dtype q8_0 --compute int8 (docs/types.md, "Compute
# precision"; docs/numerics.md, "int8 compute") end to end: for mha, gqa,
# llama and bert the output differs from the same q8_0 weights in f32
# compute, by at most 2e-2 of the largest output (the bound numerics.md
# gives for a block or layer); its bits are the same at 1, 2, 3, 4 and 7
# threads and on every fast kernel set the CPU has (scalar, avx2, avx512,
# neon: each int8 kernel gives the definition's bits; the reference kernels
# of the other ops round otherwise, and test_int8_matmul holds the int8
# reference to the same bits); the unfused graph
# file it saves says compute=int8 on the weights' matmuls only (q k^T and
# p v stay f32) and gives the flag's bits; a packed in_proj_weight's q8_0
# row-block views take int8 too; gpt2's q8_0 Conv1D weights stay refused
# with their message.
# In the quick mode (GGMLITE_TEST_QUICK=1: CTest sets it under ASan+UBSan
# and qemu, tests/CMakeLists.txt) the bits are compared at 3 and 7 threads
# against 1 (the full list in the native builds).
# usage: test_int8_cli.sh RUN_GRAPH CLI_CHECK SOURCE_DIR
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") SRC=$(realpath "$3")
T=$(mktemp -d /tmp/test_int8_cli.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
source "$SRC/tests/cli_lib.sh"

# text_digest ARGS...: the xxh3 of the summary's output line, empty on failure.
text_digest() {
    "$RG" "$@" 2>"$T/d.err" | sed -n 's/^output .* xxh3 \([0-9a-f]*\)$/\1/p'
}

TOL=2e-2
THREADS="2 3 4 7"
[ "${GGMLITE_TEST_QUICK:-0}" != 0 ] && THREADS="3 7"
# the fast kernel sets this CPU has (asked once)
ISAS=""
for isa in scalar avx2 avx512 neon; do
    if "$RG" mha --seq 2 --d-model 32 --heads 2 --isa $isa >/dev/null 2>&1; then
        ISAS="$ISAS $isa"
    else
        echo "skipped --isa $isa: this CPU lacks it"
    fi
done
check "some fast kernel set runs (scalar at least)" test -n "$ISAS"
for m in "mha" "gqa --kv-heads 1" "llama --ffn 96" "bert --ffn 64"; do
    for D in 64 256; do
        args="$m --seq 9 --d-model $D --heads 2 --weights-dtype q8_0"
        name="${m%% *} D=$D"
        expect_ok "$name, q8_0 weights, f32 compute" $args --output "$T/f32.npy"
        expect_ok "$name --compute int8" $args --compute int8 --output "$T/int8.npy"
        check "$name --compute int8 differs from f32 compute" sh -c "! cmp -s $T/f32.npy $T/int8.npy"
        check "$name --compute int8 within $TOL of the largest output of f32 compute" \
            "$CHECK" near "$T/int8.npy" "$T/f32.npy" $TOL
        d=$(text_digest $args --compute int8 --threads 1)
        check "$name --compute int8 runs ($(cat "$T/d.err"))" test -n "$d"
        for th in $THREADS; do
            check "$name --compute int8 at $th threads" \
                test "$(text_digest $args --compute int8 --threads $th)" = "$d"
        done
        for isa in $ISAS; do
            check "$name --compute int8 --isa $isa" \
                test "$(text_digest $args --compute int8 --threads 3 --isa $isa)" = "$d"
        done
    done
done

# the unfused graph: the projections in int8, the attention's products in f32
expect_ok "f32 weights and input for the graph file" mha --seq 9 --d-model 64 --heads 2 --save-inputs "$T/in"
args="mha --weights $T/in/weights.safetensors --input $T/in/x.npy --heads 2 --weights-dtype q8_0"
expect_ok "mha --attn unfused --compute int8 --save-graph" $args --attn unfused --compute int8 \
    --save-graph "$T/mha.graph"
check "the graph file has 4 int8 matmuls (the projections)" \
    test "$(grep -c "compute=int8" "$T/mha.graph")" = 4
check "the graph file has 2 f32 matmuls (q k^T, p v)" \
    test "$(grep "matmul(" "$T/mha.graph" | grep -vc "compute=")" = 2
d=$(text_digest $args --attn unfused --compute int8 --threads 2)
check "mha --attn unfused --compute int8 runs" test -n "$d"
check "the graph file gives the flag's bits" test "$(text_digest "$T/mha.graph" \
    --weights "$T/in/weights.safetensors" --input "$T/in/x.npy" --heads 2 --weights-dtype q8_0 \
    --threads 3)" = "$d"

# nn.MultiheadAttention's packed in_proj_weight as q8_0: its q, k, v row
# blocks are views of one q8_0 leaf, multiplied in int8 as they are
MT="$SRC/tests/fixtures/mha_torch_native"
args="mha --heads 4 --weights $MT/weights.safetensors --input $MT/x.npy --weights-dtype q8_0"
expect_ok "in_proj_weight, f32 compute" $args --output "$T/pf.npy"
expect_ok "in_proj_weight --compute int8" $args --compute int8 --output "$T/pi.npy"
check "in_proj_weight --compute int8 within $TOL of f32 compute" "$CHECK" near "$T/pi.npy" "$T/pf.npy" $TOL
d=$(text_digest $args --compute int8 --threads 1)
check "in_proj_weight --compute int8 at 3 threads" test -n "$d" -a \
    "$(text_digest $args --compute int8 --threads 3)" = "$d"

# gpt2's Conv1D weights [in, out] take no q8_0 (their blocks would run along out)
run gpt2 --seq 5 --d-model 64 --heads 2 --weights-dtype q8_0 --compute int8
if [ "$rc" -eq 1 ] && grep -qF "Conv1D weights [in, out]" "$T/err"; then pass
else fail "gpt2 --weights-dtype q8_0 --compute int8: exit $rc, stderr: $(cat "$T/err")"; fi

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
