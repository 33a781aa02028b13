#!/usr/bin/env bash
# run-graph --compute (docs/types.md, "Compute precision"): the flag reaches
# the matmuls of matmul, mha, gqa, llama, gpt2 and bert, and their fused
# attention (flash_attn in bf16); matmul stores b in
# bf16; the results are the same at every thread count and, in the chain
# order, on the reference, scalar and AVX2 kernels; a graph file's
# compute=bf16 gives what the flag gives; the weights of the blocks, the
# layers and a graph file's params are packed for the bf16 and int8 products
# (--json packed_bytes: at least the bytes per element the packed layouts
# hold), also when --save-inputs and --save-graph write them as weights and
# params in the same run, and counted in peak_bytes; matmul's b, an input, is
# not packed (a graph file's param b is); the pairings the kernels do not
# take (int8 without q8_0 weights, bf16 with q8_0, int8 for matmul, any
# with --decode) are usage errors saying what is supported.
# usage: test_compute_cli.sh RUN_GRAPH CLI_CHECK SOURCE_DIR
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") SRC=$(realpath "$3")
T=$(mktemp -d /tmp/test_compute_cli.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
source "$SRC/tests/cli_lib.sh"

# expect_usage DESCRIPTION MESSAGE ARGS...: exit status 2, MESSAGE in stderr.
expect_usage() {
    local desc=$1 msg=$2
    shift 2
    run "$@"
    if [ "$rc" -eq 2 ] && grep -qF -- "$msg" "$T/err"; then pass
    else fail "$desc: exit $rc, stderr: $(cat "$T/err")"; fi
}

# text_digest ARGS...: the xxh3 of the summary's output line (the layers
# have no --json), empty on failure.
text_digest() {
    "$RG" "$@" 2>"$T/d.err" | sed -n 's/^output .* xxh3 \([0-9a-f]*\)$/\1/p'
}

# ---- matmul: a and b rounded to bf16, the same bits at every thread count ----
MM="matmul --m 37 --n 29 --k 65"
f32=$(digest $MM --threads 2)
b1=$(digest $MM --compute bf16 --threads 1)
check "matmul --compute bf16 runs" test -n "$b1"
check "matmul --compute bf16 differs from f32" test "$b1" != "$f32"
check "matmul --compute f32 is the default" test "$(digest $MM --compute f32 --threads 2)" = "$f32"
for th in 2 3 4 7; do
    check "matmul --compute bf16 at $th threads" test "$(digest $MM --compute bf16 --threads $th)" = "$b1"
done
# the chain order: the reference kernels, scalar and AVX2 agree bitwise
ref=$(digest $MM --compute bf16 --threads 3 --isa reference)
for isa in scalar avx2; do
    if "$RG" $MM --isa $isa >/dev/null 2>&1; then
        check "matmul --compute bf16 --isa $isa is the reference's" \
            test "$(digest $MM --compute bf16 --threads 3 --isa $isa)" = "$ref"
    else
        echo "skipped --isa $isa: this CPU lacks it"
    fi
done
# the stored graph says bf16 and reads back to the same bits; the saved
# inputs hold the rounded values
expect_ok "matmul --compute bf16 --save-graph" $MM --compute bf16 --save-graph "$T/mm.graph" \
    --save-inputs "$T/in"
check "the graph file holds compute=bf16" grep -q "matmul(a, b, compute=bf16)" "$T/mm.graph"
check "the graph file gives the flag's bits" test "$(digest "$T/mm.graph" --bind a="$T/in/a.npy" \
    --bind b="$T/in/b.npy" --threads 2)" = "$b1"
check "the saved inputs are the rounded ones: --compute f32 on them is not the f32 digest" \
    test "$(digest matmul --bind a="$T/in/a.npy" --bind b="$T/in/b.npy" --threads 2)" != "$f32"
expect_ok "the f32 inputs" $MM --save-inputs "$T/in32"
# --bind'ed inputs are rounded: the f32 inputs bound give what the random ones gave
check "matmul --compute bf16 with --bind" test "$(digest matmul --bind a="$T/in32/a.npy" \
    --bind b="$T/in32/b.npy" --compute bf16 --threads 2)" = "$b1"
# a graph file of its own saying compute=bf16 on the f32 inputs gives the same bits (rounded by the product)
printf 'input a f32 [37, 65]\ninput b f32 [65, 29]\nout = matmul(a, b, compute=bf16)\noutput out\n' >"$T/own.graph"
check "a graph file's compute=bf16 gives the flag's bits" test "$(digest "$T/own.graph" \
    --bind a="$T/in32/a.npy" --bind b="$T/in32/b.npy" --threads 3)" = "$b1"

# ---- the blocks and layers: the flag changes their matmuls, not the thread-invariance
for m in mha gqa llama gpt2 bert; do
    args="$m --seq 5 --d-model 64 --heads 4"
    f=$(text_digest $args --threads 2)
    b=$(text_digest $args --compute bf16 --threads 1)
    check "$m --compute bf16 runs ($(cat "$T/d.err"))" test -n "$b"
    check "$m --compute bf16 differs from f32" test "$b" != "$f"
    check "$m --compute bf16 at 3 threads" test "$(text_digest $args --compute bf16 --threads 3)" = "$b"
done
expect_ok "mha --weights-dtype bf16 --compute bf16" mha --seq 5 --d-model 64 --heads 4 --weights-dtype bf16 --compute bf16
expect_ok "mha --attn unfused --compute bf16 --save-graph" mha --seq 5 --d-model 64 --heads 4 \
    --attn unfused --compute bf16 --save-graph "$T/mha.graph"
check "mha's graph file: its matmuls in bf16" grep -q "compute=bf16" "$T/mha.graph"

# ---- the fused attention (the default --attn) computes in bf16 too: its
# flash_attn node says so (graph, kernel), its bits are the same at every
# thread count, and differ from the fused attention in f32 with bf16 matmuls
for m in mha gqa llama gpt2 bert; do
    args="$m --seq 7 --d-model 64 --heads 4"
    check "$m --compute bf16: its flash_attn in bf16" \
        sh -c "'$RG' $args --compute bf16 --print-graph 2>&1 | grep -q 'flash_attn(.*compute=bf16'"
    check "$m --compute f32: its flash_attn in f32" \
        sh -c "! '$RG' $args --print-graph 2>&1 | grep -q 'flash_attn(.*compute='"
done
for m in mha gqa; do
    args="$m --seq 37 --d-model 80 --heads 5"
    check "$m --compute bf16: the bf16 flash_attn kernel ran" \
        sh -c "'$RG' $args --compute bf16 --profile 2>&1 | grep 'flash_attn ' | grep -q 'compute bf16'"
    for isa in reference scalar avx2 avx512; do
        "$RG" $args --isa $isa >/dev/null 2>&1 || { echo "skipped --isa $isa: this CPU lacks it"; continue; }
        b1=$(text_digest $args --compute bf16 --isa $isa --threads 1)
        for th in 2 3 7; do
            check "$m --compute bf16 --isa $isa at $th threads" \
                test "$(text_digest $args --compute bf16 --isa $isa --threads $th)" = "$b1"
        done
    done
done
expect_ok "mha --compute bf16 --save-graph (fused)" mha --seq 5 --d-model 64 --heads 4 --compute bf16 \
    --save-graph "$T/mhaf.graph"
check "mha's graph file: its flash_attn in bf16" grep -q "flash_attn(.*compute=bf16" "$T/mhaf.graph"

# ---- packed weights: a graph's bf16 and int8 products pack its weights once and
# keep them (memory-and-threads.md): per weight element at least 1.25 bytes for
# q8_0 panels (int8 values, f32 scale and correction per block of 32) and 2 for
# bf16 pairs (4 in a rounded f32 copy). mha's 4 projections hold 4 D^2 elements;
# gqa's with one kv head of d_k = D/H: 2 D^2 + 2 D d_k. 40 tokens (80 rows):
# more rows than a bf16 weight is read in place against.
# packed ARGS...: --json's packed_bytes (empty on failure).
packed() {
    if "$RG" "$@" --json >"$T/p.json" 2>"$T/p.err"; then
        "$CHECK" json-get "$T/p.json" packed_bytes
    else
        echo "run-graph $* failed: $(cat "$T/p.err")" >&2
    fi
}
D=64
for c in "mha --compute bf16:$((4 * D * D * 2))" "mha --weights-dtype bf16 --compute bf16:$((4 * D * D * 2))" \
    "mha --weights-dtype q8_0 --compute int8:$((4 * D * D * 5 / 4))" \
    "gqa --kv-heads 1 --weights-dtype q8_0 --compute int8:$(((2 * D * D + 2 * D * D / 2) * 5 / 4))" \
    "gqa --kv-heads 1 --compute bf16:$(((2 * D * D + 2 * D * D / 2) * 2))"; do
    args=${c%:*} least=${c##*:}
    p=$(packed $args --seq 40 --d-model $D --heads 2 --threads 2)
    check "$args: packed_bytes $p >= $least" test "${p:-0}" -ge "$least"
done
check "mha --compute f32: nothing packed" test "$(packed mha --seq 40 --d-model $D --heads 2)" = 0
check "llama --compute bf16: its weights packed" test "$(packed llama --seq 40 --d-model $D --heads 2)" = 0 -a \
    "$(packed llama --seq 40 --d-model $D --heads 2 --compute bf16)" -gt 0
# peak_bytes and naive_bytes count the packed copies (docs/cli.md): a bf16
# run's are the f32 run's (the same plan, inputs and weights) plus its
# packed_bytes; the summary names the packed part
for m in "mha --seq 40 --d-model $D --heads 2" "llama --seq 40 --d-model $D --heads 2"; do
    p=$(packed $m --compute bf16 --threads 2)
    cp "$T/p.json" "$T/bf.json"
    packed $m --threads 2 >/dev/null
    for k in peak_bytes naive_bytes; do
        f=$("$CHECK" json-get "$T/p.json" $k) b=$("$CHECK" json-get "$T/bf.json" $k)
        check "$m --compute bf16: $k $b = f32's $f + packed_bytes $p" test "${p:-0}" -gt 0 -a \
            "$b" = $((f + ${p:-0}))
    done
    check "$m --compute bf16: the summary names the packed weights" \
        grep -q "MiB without reuse; .* MiB of it packed weights)" <("$RG" $m --compute bf16)
    check "$m: no packed weights, none named" test "$("$RG" $m | grep -c "packed")" = 0
done
# matmul's b is an input, as a is: multiplied as it is at each compute, never
# packed; a graph file's param b is packed once, with the same bits
check "matmul --compute bf16: b (an input) is not packed" test "$(packed $MM --compute bf16)" = 0
mm=$("$CHECK" json-get "$T/p.json" xxh3)
printf 'input a f32 [37, 65]\nparam b f32 [65, 29]\nout = matmul(a, b, compute=bf16)\noutput out\n' \
    >"$T/param.graph"
p=$(packed "$T/param.graph" --bind a="$T/in32/a.npy" --bind b="$T/in32/b.npy" --threads 3)
check "a graph file's param b: packed_bytes $p >= $((65 * 29 * 2))" test "${p:-0}" -ge $((65 * 29 * 2))
check "a graph file's param b: the flag's bits" test -n "$mm" -a "$("$CHECK" json-get "$T/p.json" xxh3)" = "$mm"
# with --save-inputs and --save-graph in the same run: packed, and written as
# weights (weights.safetensors, no weight .npy) and params
args="mha --seq 40 --d-model $D --heads 2 --attn unfused --compute bf16"
p=$(packed $args --save-inputs "$T/pk" --save-graph "$T/pk.graph")
check "--save-inputs --save-graph: packed_bytes $p > 0" test "${p:-0}" -gt 0
check "--save-inputs: the weights in weights.safetensors" test -f "$T/pk/weights.safetensors"
check "--save-inputs: no weight as an input .npy" \
    test "$(ls "$T/pk" | grep -c '\.npy$')" = 1 -a -f "$T/pk/x.npy"
check "--save-graph: the weights are params" test "$(grep -c '^param ' "$T/pk.graph")" = 8
check "--save-graph: x is the one input" test "$(grep -c '^input ' "$T/pk.graph")" = 1
d=$(digest $args)
check "--save-inputs: DIR/args (with --compute) replays the run's digest" \
    test "$(cd "$T/pk" && digest $(cat args))" = "$d"
# the saved graph file's params: packed too, the flag's bits
p=$(packed "$T/pk.graph" --weights "$T/pk/weights.safetensors" --input "$T/pk/x.npy" --heads 2 --threads 3)
check "the saved graph file on its weights: packed_bytes $p >= $((4 * D * D * 2))" test "${p:-0}" -ge $((4 * D * D * 2))
check "the saved graph file on its weights: the flag's bits" test "$("$CHECK" json-get "$T/p.json" xxh3)" = "$d"

# ---- pairings ------------------------------------------------------------------
expect_usage "int8 needs q8_0 weights" "--compute int8 needs q8_0 weights, got f32" mha --compute int8
expect_usage "int8 with bf16 weights" "supported: --compute f32 with any --weights-dtype" \
    llama --compute int8 --weights-dtype bf16
expect_usage "bf16 takes no q8_0 weights" "--compute bf16 does not take q8_0 weights" \
    gqa --compute bf16 --weights-dtype q8_0
expect_usage "int8 is not for matmul" "supported for matmul: --compute f32 or bf16" matmul --compute int8
expect_usage "a bad precision" "--compute: 'f16' is not f32, bf16 or int8" mha --compute f16
expect_usage "not with --decode" "--compute bf16 does not apply with --decode" mha --decode 2 --compute bf16
expect_usage "not for relpos" "--compute does not apply to relpos" relpos --compute bf16

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
