#!/usr/bin/env bash
# run-graph --grad-output DY.npy --grads OUT.safetensors against PyTorch
# autograd (tests/fixtures/grads, written by tests/fixtures/gen_grads.py):
#   - every case (mha, gqa, relpos, matmul, graph files, llama, gpt2, bert;
#     fused and unfused, causal both ways, valid lengths, masks, window,
#     soft-capping, ALiBi, sinks, rope, cross-attention, --seq-first, stacked
#     layers, f16/bf16 weights, bias_k/bias_v and --add-zero-attn) run as its args say: every gradient under its
#     name within the bound of grads_check close, and the output within the
#     fixtures' tolerance; at 1, 2, 3, 4 and 7 threads the same bytes (the
#     best ISA); on every other ISA the CPU has, at 3 threads;
#   - the names of random weights' gradients (the block's and layers' own);
#   - the errors: --grads without --grad-output and the reverse, a DY of
#     another shape (both shapes named), q8_0 weights, --decode; nothing
#     written when a run fails.
# usage: test_grads_cli.sh RUN_GRAPH GRADS_CHECK CLI_CHECK SOURCE_DIR FIXTURES
set -u
RG=$(realpath "$1") GCHECK=$(realpath "$2") CHECK=$(realpath "$3") SRC=$(realpath "$4") FIX=$5
T=$(mktemp -d /tmp/test_grads_cli.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
# shellcheck source=tests/cli_lib.sh
. "$SRC/tests/cli_lib.sh"

if [ ! -f "$FIX/CASES" ]; then
    echo "FAIL: the fixtures $FIX are missing (tests/fixtures/gen_grads.py)" >&2
    exit 1
fi
# the ISAs the CPU has besides the best one (the default, run at every thread count)
best=$("$RG" matmul --m 2 --n 2 --k 2 --json | sed -E 's/.*"isa":"([a-z0-9]+)".*/\1/')
isas=()
for isa in reference scalar avx2 avx512; do
    [ "$isa" != "$best" ] && "$RG" matmul --m 2 --n 2 --k 2 --isa "$isa" >/dev/null 2>&1 && isas+=("$isa")
done
check "the best ISA is known ($best)" test -n "$best" 

# ---- every case against PyTorch, thread counts and ISAs --------------------------
n_cases=0
for name in $(cat "$FIX/CASES"); do
    dir=$FIX/$name
    n_cases=$((n_cases + 1))
    args=$(sed "s#@GRAPHS@#$SRC/tools/graphs#" "$dir/args")
    for th in 1 2 3 4 7; do
        # shellcheck disable=SC2086 # the args file is split into words, as a shell would
        (cd "$dir" && "$RG" $args --threads $th --grad-output dy.npy --grads "$T/g$th.safetensors" \
            --output "$T/o$th.npy" >"$T/out" 2>"$T/err")
        rc=$?
        if [ $rc -ne 0 ]; then
            fail "$name: run-graph $args --threads $th: exit $rc: $(cat "$T/err")"
            continue
        fi
        pass
        if [ $th = 1 ]; then
            check "$name: gradients against PyTorch" "$GCHECK" close "$T/g1.safetensors" "$dir/grads.safetensors"
            check "$name: output against PyTorch" "$CHECK" close "$T/o1.npy" "$dir/out.npy"
            grep -q "^grads   " "$T/out" && pass || fail "$name: no grads line in the summary: $(cat "$T/out")"
        else
            check "$name: gradients at $th threads the same bytes as at 1" cmp "$T/g1.safetensors" "$T/g$th.safetensors"
            check "$name: output at $th threads the same bytes as at 1" cmp "$T/o1.npy" "$T/o$th.npy"
        fi
    done
    for isa in "${isas[@]}"; do # the others (their thread counts: test_grad_ops, per op)
        # shellcheck disable=SC2086
        (cd "$dir" && "$RG" $args --isa "$isa" --threads 3 --grad-output dy.npy \
            --grads "$T/i.safetensors" >/dev/null 2>"$T/err") || fail "$name: --isa $isa: $(cat "$T/err")"
        check "$name --isa $isa: gradients against PyTorch" "$GCHECK" close "$T/i.safetensors" "$dir/grads.safetensors"
    done
done
check "cases run ($n_cases, want 21)" test "$n_cases" -ge 21

# ---- --json ----------------------------------------------------------------------
dir=$FIX/mha_causal_prefix
(cd "$dir" && "$RG" $(cat args) --grad-output dy.npy --grads "$T/j.safetensors" --json >"$T/j.json" 2>"$T/err")
check "--json with --grads: one object with grads" "$CHECK" json "$T/j.json" grads xxh3
check "--json grads counts the gradients (9)" test "$("$CHECK" json-get "$T/j.json" grads)" = 9
(cd "$FIX/llama_gqa_stack2" && "$RG" $(cat args) --grad-output dy.npy --grads "$T/j.safetensors" --json \
    >"$T/j.json" 2>"$T/err")
check "llama --json grads counts the gradients (19)" test "$("$CHECK" json-get "$T/j.json" grads)" = 19

# ---- random weights: the block's and the layers' own names -------------------------
cp "$FIX/mha_causal_prefix/dy.npy" "$T/dy_2_5_12.npy"    # [2, 5, 12]
run mha --seq 5 --d-model 12 --heads 3 --grad-output "$T/dy_2_5_12.npy" --grads "$T/r.safetensors"
check "mha, random weights: ok ($(cat "$T/err"))" test "$rc" -eq 0
"$GCHECK" names "$T/r.safetensors" | cut -d' ' -f1 | sort >"$T/names"
printf '%s\n' input w_k.bias w_k.weight w_o.bias w_o.weight w_q.bias w_q.weight w_v.bias w_v.weight >"$T/want"
check "mha, random weights: the gradients' names ($(tr '\n' ' ' <"$T/names"))" cmp "$T/names" "$T/want"
run gqa --seq 5 --d-model 12 --heads 3 --kv-heads 1 --sinks --grad-output "$T/dy_2_5_12.npy" --grads "$T/r.safetensors"
check "gqa --sinks, random weights: a gradient of sinks ($(cat "$T/err"))" \
    sh -c "'$GCHECK' names '$T/r.safetensors' | grep -q '^sinks f32 \[3\]$'"
cp "$FIX/gpt2_stack2/dy.npy" "$T/dy_2_6_12.npy"          # [2, 6, 12]
run llama --seq 6 --d-model 12 --heads 3 --kv-heads 1 --layers 2 --grad-output "$T/dy_2_6_12.npy" \
    --grads "$T/r.safetensors"
check "llama --layers 2, random weights: ok ($(cat "$T/err"))" test "$rc" -eq 0
"$GCHECK" names "$T/r.safetensors" | cut -d' ' -f1 >"$T/names"
check "llama --layers 2, random weights: 19 gradients" test "$(wc -l <"$T/names")" -eq 19
check "llama --layers 2, random weights: model.layers.1.mlp.down_proj.weight" grep -qx model.layers.1.mlp.down_proj.weight "$T/names"
run bert --seq 6 --d-model 12 --heads 3 --valid-lens 6,2 --grad-output "$T/dy_2_6_12.npy" --grads "$T/r.safetensors"
check "bert, random weights: output.LayerNorm.bias ($(cat "$T/err"))" \
    sh -c "'$GCHECK' names '$T/r.safetensors' | grep -q '^output.LayerNorm.bias f32 \[12\]$'"
# --weights-dtype f16: the gradients are f32 still
run gpt2 --seq 6 --d-model 12 --heads 3 --weights-dtype f16 --grad-output "$T/dy_2_6_12.npy" --grads "$T/r.safetensors"
check "gpt2 --weights-dtype f16: f32 gradients ($(cat "$T/err"))" \
    sh -c "'$GCHECK' names '$T/r.safetensors' | grep -q '^attn.c_attn.weight f32 \[12,36\]$'"

# ---- errors ---------------------------------------------------------------------------
# expect_fail DESCRIPTION STATUS TEXT ARGS...: exit STATUS, TEXT in the message
expect_fail() {
    local desc=$1 status=$2 text=$3
    shift 3
    run "$@"
    if [ "$rc" -eq "$status" ] && grep -qF -- "$text" "$T/err"; then pass; else
        fail "$desc: exit $rc (want $status), stderr: $(cat "$T/err") (want '$text')"
    fi
}
expect_fail "--grads without --grad-output" 2 "--grads needs --grad-output" \
    mha --seq 5 --d-model 12 --heads 3 --grads "$T/e.safetensors"
expect_fail "--grad-output without --grads" 2 "--grad-output is for --grads" \
    mha --seq 5 --d-model 12 --heads 3 --grad-output "$T/dy_2_5_12.npy"
expect_fail "llama: --grads without --grad-output" 2 "--grads needs --grad-output" \
    llama --seq 5 --d-model 12 --heads 3 --grads "$T/e.safetensors"
expect_fail "a DY of another shape names both" 1 "DY is f32 [2,6,12], but the output is f32 [2,5,12]" \
    mha --seq 5 --d-model 12 --heads 3 --grad-output "$T/dy_2_6_12.npy" --grads "$T/e.safetensors" --output "$T/e.npy"
check "a failed run writes no gradients" test ! -e "$T/e.safetensors"
check "a failed run writes no output" test ! -e "$T/e.npy"
expect_fail "llama: a DY of another shape names both" 1 "DY is f32 [2,5,12], but the output is f32 [2,6,12]" \
    llama --seq 6 --d-model 12 --heads 3 --grad-output "$T/dy_2_5_12.npy" --grads "$T/e.safetensors" --output "$T/e.npy"
check "llama: a failed run writes no gradients" test ! -e "$T/e.safetensors"
check "llama: a failed run writes no output" test ! -e "$T/e.npy"
expect_fail "--seq-first: DY is [T, B, D]" 1 "(--seq-first: [T, B, D])" \
    mha --seq 5 --d-model 12 --heads 3 --seq-first --grad-output "$T/dy_2_5_12.npy" --grads "$T/e.safetensors"
expect_fail "q8_0 weights are refused" 2 "q8_0 weights have no gradient" \
    mha --seq 5 --d-model 32 --heads 4 --weights-dtype q8_0 --grad-output "$T/dy_2_5_12.npy" --grads "$T/e.safetensors"
expect_fail "llama: q8_0 weights are refused" 2 "q8_0 weights have no gradient" \
    llama --seq 6 --d-model 32 --heads 4 --weights-dtype q8_0 --grad-output "$T/dy_2_6_12.npy" --grads "$T/e.safetensors"
expect_fail "--grads with --decode" 2 "--grads does not apply with --decode" \
    mha --seq 5 --d-model 12 --heads 3 --decode 2 --grad-output "$T/dy_2_5_12.npy" --grads "$T/e.safetensors"
expect_fail "--grads and --output the same file" 2 "given for two outputs" \
    mha --seq 5 --d-model 12 --heads 3 --grad-output "$T/dy_2_5_12.npy" --grads "$T/e.npy" --output "$T/e.npy"
expect_fail "--grads into a missing directory, before any work" 1 "--grads $T/none/g.safetensors: cannot create" \
    mha --seq 5 --d-model 12 --heads 3 --grad-output "$T/dy_2_5_12.npy" --grads "$T/none/g.safetensors" --output "$T/e.npy"
check "... and no output written" test ! -e "$T/e.npy"
check "no gradient file left" test ! -e "$T/e.safetensors"

echo "test_grads_cli: $n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
