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

le64() { local n=$1 i; for i in 0 1 2 3 4 5 6 7; do printf '\\x%02x' $(((n >> (8 * i)) & 255)); done; }
# mkst FILE JSON DATA_BYTES: a safetensors file of zeros
mkst() {
    printf "$(le64 ${#2})" >"$1"
    printf '%s' "$2" >>"$1"
    head -c "$3" /dev/zero >>"$1"
}
# mkst_f32 FILE NAME:SHAPE...: a safetensors file of f32 zeros, the tensors
# in the order given ("w:8,24"), their data one after the other.
mkst_f32() {
    local f=$1 json="{" sep="" off=0 spec n
    shift
    for spec in "$@"; do
        n=$((4 * $(echo "${spec#*:}" | tr ',' '*')))
        json+="$sep\"${spec%%:*}\": {\"dtype\": \"F32\", \"shape\": [${spec#*:}], \"data_offsets\": [$off, $((off + n))]}"
        off=$((off + n)) sep=", "
    done
    mkst "$f" "$json}" "$off"
}
# poke FILE OFFSET BYTES: overwrites the bytes (printf's '\x00\x24...', little-endian) at OFFSET
# of a safetensors file's data
poke() {
    local hl
    hl=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    printf "$3" | dd of="$1" bs=1 seek=$((8 + hl + $2)) conv=notrunc status=none
}
# mknpy FILE DESCR SHAPE DATA_BYTES [FILL_BYTE]: a .npy v1.0 file
mknpy() {
    local hdr="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    local pad=$((((10 + ${#hdr} + 1 + 63) / 64) * 64 - 10 - ${#hdr} - 1))
    hdr="$hdr$(printf '%*s' "$pad" '')"
    local len=$((${#hdr} + 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
        printf '%s\n' "$hdr"
        head -c "$4" /dev/zero | tr '\0' "${5:-\0}"
    } >"$1"
}

# ---- the parse: boolean flags anywhere, refusals that name the modes ----------------------
for layer in llama gpt2 bert; do
    for flag in --json --nan-trap; do
        # last (read as taking a value before) and first (refused as unknown before)
        expect_ok "$layer $flag last" "$layer" "${TINY[@]}" "$flag"
        expect_ok "$layer $flag first" "$layer" "$flag" "${TINY[@]}"
        expect_error 2 "$flag takes no value" "$layer $flag=1" "$layer" "${TINY[@]}" "$flag=1"
    done
done
# --print-graph: the graph's nodes (the layer's named ones among them), on stderr with --json
expect_out "ln_1" "gpt2 --print-graph" gpt2 "${TINY[@]}" --print-graph
run gpt2 "${TINY[@]}" --print-graph --json
check "gpt2 --print-graph --json: the nodes on stderr, one JSON object on stdout" \
    test "$rc" = 0 -a "$(wc -l <"$T/out")" = 1 -a -n "$(grep ln_1 "$T/err")"
# --causal: llama and gpt2 are causal always (refused, as --parallel refuses it for llama), bert
# an encoder; first or last, the message says so
for layer in llama gpt2; do
    expect_error 2 "--causal does not apply to $layer: it is causal always" "$layer --causal last" \
        "$layer" "${TINY[@]}" --causal
    expect_error 2 "--causal does not apply to $layer: it is causal always" "$layer --causal first" \
        "$layer" --causal "${TINY[@]}"
done
expect_error 2 "--causal does not apply to bert: an encoder" "bert --causal" bert "${TINY[@]}" --causal
expect_error 2 "--seq: missing its value" "llama --seq last" llama --seq
expect_error 2 "--attn does not apply to llama (it applies to mha, gqa, relpos)" "llama --attn" \
    llama "${TINY[@]}" --attn fused
expect_error 2 "--layers does not apply to mha (it applies to llama, gpt2, bert)" "mha --layers" \
    mha "${TINY[@]}" --layers 2
expect_error 2 "--zigzag does not apply to gqa (it applies to --parallel context)" "gqa --zigzag" \
    gqa "${TINY[@]}" --zigzag
expect_error 2 "--causal does not apply to matmul (it applies to mha, gqa, relpos, graph files, --parallel heads" \
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

# --nan-trap in a layer: the node that makes the first NaN, by name
mknpy nan.npy '<f4' '(1, 3, 16)' 192 '\377'
for layer in llama gpt2 bert; do
    expect_error 1 "nan trap: node" "$layer --nan-trap names the node" $layer --heads 2 --input nan.npy --nan-trap
    expect_error 1 "(--nan-trap names the first node" "$layer without --nan-trap says it" $layer --heads 2 --input nan.npy
done

# ---- messages that name what is wrong ------------------------------------------------------
mknpy x8.npy '<f4' '(1, 2, 8)' 64
LLAMA8=(self_attn.q_proj.weight:8,8 self_attn.k_proj.weight:8,8 self_attn.v_proj.weight:8,8
    self_attn.o_proj.weight:8,8 post_attention_layernorm.weight:8 mlp.gate_proj.weight:16,8
    mlp.up_proj.weight:16,8 mlp.down_proj.weight:8,16)
mkst_f32 ln47.safetensors input_layernorm.weight:7 "${LLAMA8[@]}"
expect_error 1 "ln47.safetensors: input_layernorm.weight is [7], but the input x8.npy [1,2,8] implies d_model 8" \
    "llama: an input_layernorm of the wrong size is named" llama --heads 2 --weights ln47.safetensors --input x8.npy
mkst_f32 llama8.safetensors input_layernorm.weight:8 "${LLAMA8[@]}"
check "llama8.safetensors runs" "$RG" llama --heads 2 --weights llama8.safetensors --input x8.npy --threads 1
GPT2_8=(ln_1.weight:8 ln_1.bias:8 attn.c_attn.weight:8,24 attn.c_attn.bias:24 attn.c_proj.weight:8,8
    attn.c_proj.bias:8 ln_2.weight:8 ln_2.bias:8)
mkst_f32 linear_fc.safetensors "${GPT2_8[@]}" mlp.c_fc.weight:32,8 mlp.c_fc.bias:32 mlp.c_proj.weight:32,8 \
    mlp.c_proj.bias:8
expect_error 1 "mlp.c_fc.weight is [32,8], expected [8,32] ([D, F], Conv1D [in, out]): it looks transposed" \
    "gpt2: c_fc in nn.Linear's layout" gpt2 --heads 2 --weights linear_fc.safetensors --input x8.npy
grep -qF "GPT-2's Conv1D stores [in, out]" "$T/err" && pass || fail "gpt2 c_fc: the layout is not said: $(cat "$T/err")"
mkst_f32 gpt2_8.safetensors "${GPT2_8[@]}" mlp.c_fc.weight:8,32 mlp.c_fc.bias:32 mlp.c_proj.weight:32,8 \
    mlp.c_proj.bias:8
check "gpt2_8.safetensors runs" "$RG" gpt2 --heads 2 --weights gpt2_8.safetensors --input x8.npy --threads 1
expect_error 2 "llama: heads 3 do not divide d_model 16 (each head takes d_model / heads of it)" \
    "llama: heads not dividing d_model" llama --d-model 16 --heads 3
expect_error 2 "llama: kv heads 3 do not divide heads 4 (each kv head serves heads / kv heads query heads)" \
    "llama: kv heads not dividing heads" llama --d-model 16 --heads 4 --kv-heads 3
# a graph file starting with a UTF-8 byte-order mark: skipped, the same digest
{ printf '\xef\xbb\xbf'; cat "$SRC/tools/graphs/mha.graph"; } >bom.graph
a=$(digest "$SRC/tools/graphs/mha.graph" "${TINY[@]}")
b=$(digest bom.graph "${TINY[@]}")
check "a graph file with a byte-order mark: mha.graph's digest ($a vs $b)" test -n "$a" -a "$a" = "$b"
# a graph reading no size symbol: the summary lists no empty sizes
printf 'input u f32 [2, 3]\noutput tanh(u)\n' >nosyms.graph
expect_out "nosyms.graph: random" "a graph without sizes: its summary" nosyms.graph --threads 1
grep -qF ": ," "$T/out" && fail "a graph without sizes: an empty list: $(head -n 1 "$T/out")" || pass

# ---- --save-inputs: its args line runs the same case (the same digest) ----------------------
n_si=0
for a in "mha --attn unfused" "mha --attn-weights $T/aw.npy" "mha --attn fused --causal" "mha --seq-first" \
    "gqa --kv-heads 2 --kv-seq 5 --causal-top-left --seq-first" "gqa --kv-heads 2 --attn unfused --window 2 --softcap 3" \
    "mha --attn unfused --valid-lens 2,3 --alibi" "mha --attn unfused --add-zero-attn --rope --rope-theta 100" \
    "relpos --max-rel 1" "$SRC/tools/graphs/mha.graph --causal --seq-first"; do
    n_si=$((n_si + 1))
    # shellcheck disable=SC2086 # the case's flags
    d=$(digest $a --batch 2 --seq 3 --d-model 8 --heads 2 --threads 1 --save-inputs "$T/si$n_si")
    r=$(cd "$T/si$n_si" && digest $(cat args) --threads 1)
    check "--save-inputs of $a, then its args ($d vs $r: $(cat "$T/si$n_si/args" 2>/dev/null))" test -n "$d" -a "$d" = "$r"
done

# ---- --weights-dtype: a finite weight past the type's range is named, not made inf ----------
mkst_f32 big.safetensors w_q.weight:32,32 w_k.weight:32,32 w_v.weight:32,32 w_o.weight:32,32
poke big.safetensors $((4096 + 4 * 35)) '\x00\x24\x74\x49' # w_k.weight[1,3] = 1e6
for dt in f32 bf16 q8_0; do
    check "1e6 fits --weights-dtype $dt" "$RG" mha --heads 2 --seq 3 --threads 1 --weights big.safetensors --weights-dtype $dt
done
expect_error 1 "--weights-dtype f16: 'w_k.weight' [32,32] holds 1e+06 at [1,3], past the range of f16 (f16's largest finite value is 65504)" \
    "mha --weights-dtype f16 of 1e6" mha --heads 2 --seq 3 --weights big.safetensors --weights-dtype f16
mkst_f32 llama_big.safetensors input_layernorm.weight:8 "${LLAMA8[@]}"
poke llama_big.safetensors $((32 + 4 * 9)) '\x00\x24\x74\x49' # q_proj[1,1] = 1e6
expect_error 1 "--weights-dtype f16: 'self_attn.q_proj.weight' [8,8] holds 1e+06 at [1,1]" \
    "llama --weights-dtype f16 of 1e6" llama --heads 2 --weights llama_big.safetensors --input x8.npy --weights-dtype f16
poke big.safetensors $((8192 + 4 * 69)) '\x80\x96\x18\x4b' # w_v.weight[2,5] = 1e7: q8_0's f16 scale 78740
expect_error 1 "--weights-dtype q8_0: 'w_v.weight' [32,32] holds 1e+07 at [2,5]" \
    "mha --weights-dtype q8_0 of 1e7" mha --heads 2 --seq 3 --weights big.safetensors --weights-dtype q8_0
poke big.safetensors $((12288 + 4 * 1023)) '\xff\xff\x7f\x7f' # w_o.weight[31,31] = FLT_MAX
expect_error 1 "--weights-dtype bf16: 'w_o.weight' [32,32] holds 3.40282e+38 at [31,31], past the range of bf16" \
    "mha --weights-dtype bf16 of FLT_MAX" mha --heads 2 --seq 3 --weights big.safetensors --weights-dtype bf16

# ---- the heatmap: masked cells hatched, a weight of 0 that no mask made coloured as 0 ---------
# m.npy [3, 3] float: 0, except [0,1] = -1e4 (a weight of exactly 0, not masked) and
# [0,2] = -inf (masked)
mknpy m.npy '<f4' '(3, 3)' 36
hl=$((10 + $(od -An -tu2 -j8 -N2 m.npy | tr -d ' ')))
printf '\x00\x40\x1c\xc6\x00\x00\x80\xff' | dd of=m.npy bs=1 seek=$((hl + 4)) conv=notrunc status=none
expect_ok "a heatmap with a mask" mha --seq 3 --d-model 8 --heads 2 --threads 1 --attn-mask m.npy --attn-svg h.svg
check "the heatmap is well-formed" xmllint --noout h.svg
check "the masked cell is hatched" grep -qE 'fill="url\(#masked\)"><title>query 0, key 2: masked' h.svg
check "the weight 0 without a mask is coloured as 0" grep -qE 'fill="#440154"><title>query 0, key 1: 0.0000' h.svg
check "no masked cell but (0, 2)" test "$(grep -c ': masked</title>' h.svg)" = 2 # one a head
check "the legend names the hatching" grep -q '<g id="legend-masked">.*masked</text>' h.svg
# causal, a window, valid lengths: what they mask is hatched (5 cells a head: (0,1), (0,2),
# (1,2) causal, (2,0) out of the window of 2, (2,2) past batch 1's length 2)
expect_ok "a heatmap of causal, window and valid lengths" mha --seq 3 --d-model 8 --heads 2 --threads 1 \
    --causal --window 2 --valid-lens 3,2 --attn-svg hc.svg --attn-batch 1
check "causal, window, valid lengths: 5 masked cells a head" test "$(grep -c ': masked</title>' hc.svg)" = 10
check "key 2 of batch 1, past its length, is hatched" grep -q 'query 2, key 2: masked' hc.svg
expect_ok "a heatmap without masks" mha --seq 3 --d-model 8 --heads 2 --threads 1 --attn-svg hn.svg
check "without masks: no hatching, no legend" test "$(grep -c 'masked' hn.svg)" = 0

echo "test_cli_msgs: $n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
