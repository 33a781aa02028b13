#!/usr/bin/env bash
# run-graph's flags in every mode and the messages of issue 26, on tiny shapes:
#   - the one parse: boolean flags (--json, --nan-trap, --causal) anywhere on a
#     layer command's line; a flag a mode cannot take refused naming the flag,
#     the mode and the modes that take it;
#   - the layers' --json (the keys of mha's, checked with cJSON) and --nan-trap;
#   - messages that name what is wrong: a layer norm weight of the wrong size,
#     GPT-2's Conv1D weight given in nn.Linear's layout, the heads and kv heads,
#     a graph file starting with a UTF-8 byte-order mark, a graph reading no
#     size symbol;
#   - --save-inputs: its replay line reproduces the digest (fused, unfused and
#     options that change the result);
#   - --weights-dtype f16 / bf16 of a weight past their range: an error naming
#     the tensor, the value and its index;
#   - the heatmap: masked cells drawn apart from weights that are 0.
# usage: test_cli_msgs.sh RUN_GRAPH CLI_CHECK SOURCE_DIR
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") SRC=$(realpath "$3")
T=$(mktemp -d /tmp/test_cli_msgs.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2

# pass, fail, check, run, expect_ok, digest
source "$SRC/tests/cli_lib.sh"
# expect_error STATUS SUBSTRING DESCRIPTION ARGS...: run-graph fails with that
# status and one line on stderr, "run-graph: ..." containing SUBSTRING, and
# prints nothing on stdout.
expect_error() {
    local status=$1 sub=$2 desc=$3
    shift 3
    run "$@"
    if [ "$rc" -ne "$status" ]; then
        fail "$desc: exit $rc, expected $status: $(cat "$T/err")"
    elif [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q '^run-graph: ' "$T/err"; then
        fail "$desc: stderr is not one 'run-graph: ' line: $(cat "$T/err")"
    elif ! grep -qF -- "$sub" "$T/err"; then
        fail "$desc: expected \"$sub\" in: $(cat "$T/err")"
    elif [ -s "$T/out" ]; then
        fail "$desc: printed to stdout: $(head -c 300 "$T/out")"
    else
        pass
    fi
}
# expect_out SUBSTRING DESCRIPTION ARGS...: run-graph succeeds and its stdout
# holds SUBSTRING.
expect_out() {
    local sub=$1 desc=$2
    shift 2
    run "$@"
    if [ "$rc" -ne 0 ]; then
        fail "$desc: exit $rc: $(cat "$T/err")"
    elif ! grep -qF -- "$sub" "$T/out"; then
        fail "$desc: expected \"$sub\" in: $(cat "$T/out")"
    else
        pass
    fi
}

TINY=(--batch 1 --seq 3 --d-model 16 --heads 2 --threads 1)

# ---- the parse: boolean flags anywhere, refusals that name the modes ----------------------
for layer in llama gpt2 bert; do
    for flag in --json --nan-trap; do
        # last (read as taking a value before) and first (refused as unknown before)
        expect_ok "$layer $flag last" "$layer" "${TINY[@]}" "$flag"
        expect_ok "$layer $flag first" "$layer" "$flag" "${TINY[@]}"
        expect_error 2 "$flag takes no value" "$layer $flag=1" "$layer" "${TINY[@]}" "$flag=1"
    done
done
# llama and gpt2 are causal always: --causal is accepted and changes nothing
for layer in llama gpt2; do
    a=$(digest "$layer" "${TINY[@]}")
    b=$(digest "$layer" --causal "${TINY[@]}")
    c=$(digest "$layer" "${TINY[@]}" --causal)
    check "$layer --causal: the digest without it ($a, $b, $c)" test -n "$a" -a "$a" = "$b" -a "$a" = "$c"
done
expect_error 2 "--causal does not apply to bert" "bert --causal" bert "${TINY[@]}" --causal
expect_error 2 "--seq: missing its value" "llama --seq last" llama --seq
expect_error 2 "--attn does not apply to llama (it applies to mha, gqa, relpos)" "llama --attn" \
    llama "${TINY[@]}" --attn fused
expect_error 2 "--layers does not apply to mha (it applies to llama, gpt2, bert)" "mha --layers" \
    mha "${TINY[@]}" --layers 2
expect_error 2 "--zigzag does not apply to gqa (it applies to --parallel context)" "gqa --zigzag" \
    gqa "${TINY[@]}" --zigzag
expect_error 2 "--causal does not apply to matmul (it applies to mha, gqa, relpos, graph files, llama, gpt2" \
    "matmul --causal" matmul --m 2 --n 2 --k 2 --causal
expect_error 2 "--bogus: unknown flag for gpt2" "gpt2 --bogus" gpt2 "${TINY[@]}" --bogus
# --json in every single-process mode (mha's object: model, sizes, xxh3, ...)
for args in "mha" "gqa --kv-heads 1" "relpos --max-rel 2" "llama --kv-heads 1" "gpt2" "bert --valid-lens 3"; do
    # shellcheck disable=SC2086 # the model and its flags
    if "$RG" $args "${TINY[@]}" --json >"$T/j.json" 2>"$T/j.err"; then
        check "$args --json: mha's keys" "$CHECK" json "$T/j.json" model sizes causal output_shape xxh3 threads \
            isa runs median_ms min_ms flops gflops peak_bytes random_weights random_inputs naive_bytes nodes \
            graph_digest
        # the digest --json gives is the summary's
        # shellcheck disable=SC2086
        h=$("$RG" $args "${TINY[@]}" | sed -n 's/.*xxh3 \([0-9a-f]*\).*/\1/p')
        check "$args --json: the summary's digest" test "$("$CHECK" json-get "$T/j.json" xxh3)" = "$h"
    else
        fail "$args --json: $(cat "$T/j.err")"
    fi
done
check "matmul --json" "$RG" matmul --m 2 --n 3 --k 4 --threads 1 --json

echo "test_cli_msgs: $n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
