#!/usr/bin/env bash
# The layer commands on real checkpoints' layouts, and what an index may not
# hide. The files are made here, at test time, from the PyTorch fixtures of
# tests/fixtures/layers (two-layer LLaMA, GPT-2 and BERT stacks) by
# loading_files:
#   - each stack as a two-shard checkpoint (model.safetensors.index.json):
#     the same output bytes as the single file, which is within tolerance of
#     Hugging Face's output (out.npy);
#   - a whole checkpoint (embeddings, final norm, lm_head beside the layers):
#     refused by strict loading, naming the extra tensors; with --non-strict
#     the same bytes as the layers alone, the extras listed on stderr;
#     --prefix naming the layers' list, also under a long wrapper prefix
#     (names over 63 bytes);
#   - an index and its shards disagreeing (a tensor a shard holds that
#     weight_map leaves out; a weight_map entry its shard lacks), and
#     \u0000 in an index's names and paths: errors naming both.
# usage: test_layer_checkpoints.sh RUN_GRAPH CLI_CHECK LOADING_FILES SOURCE_DIR
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") MK=$(realpath "$3") SRC=$(realpath "$4")
FIX=$SRC/tests/fixtures/layers
T=$(mktemp -d /tmp/test_layer_checkpoints.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2

# pass, fail, check, run, expect_ok
source "$SRC/tests/cli_lib.sh"
# ldigest ARGS...: the xxh3 the run prints (empty on failure; its stderr in $T/d.err)
ldigest() {
    if "$RG" "$@" >"$T/d.out" 2>"$T/d.err"; then
        sed -n 's/^output .* xxh3 \([0-9a-f]*\)$/\1/p' "$T/d.out"
    else
        echo "run-graph $* failed: $(cat "$T/d.err")" >&2
    fi
}
# same DESCRIPTION WANT ARGS...: the run's digest is WANT (not empty)
same() {
    local desc=$1 want=$2 got
    shift 2
    got=$(ldigest "$@")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then pass; else fail "$desc: '$got' vs '$want'"; fi
}
# expect_error STATUS SUBSTRING DESCRIPTION ARGS...: fails so, its last stderr
# line "run-graph: ..." holding SUBSTRING, nothing on stdout, no output file
expect_error() {
    local status=$1 sub=$2 desc=$3
    shift 3
    rm -f "$T/never.npy"
    run --output "$T/never.npy" "$@"
    if [ "$rc" -ne "$status" ]; then
        fail "$desc: exit $rc, expected $status: $(cat "$T/err")"
    elif ! tail -n 1 "$T/err" | grep -q '^run-graph: ' || ! tail -n 1 "$T/err" | grep -qF -- "$sub"; then
        fail "$desc: expected \"$sub\" in: $(cat "$T/err")"
    elif [ -s "$T/out" ] || [ -e "$T/never.npy" ]; then
        fail "$desc: printed to stdout or left an output file"
    else
        pass
    fi
}

# ---- two shards, each layer kind -----------------------------------------------------------

for c in llama_mqa_stack2 gpt2_stack2 bert_stack2; do
    read -r -a args <"$FIX/$c/args" # MODEL flags --weights weights.safetensors --input x.npy
    args=("${args[@]/#weights.safetensors/$FIX/$c/weights.safetensors}")
    args=("${args[@]/#x.npy/$FIX/$c/x.npy}")
    mkdir "$c"
    check "$c: the shards made" "$MK" st-shard "$FIX/$c/weights.safetensors" "$c" ""
    check "$c: two shards" test -s "$c/model-00002-of-00002.safetensors"
    ref=$(ldigest "${args[@]}" --output "$c/single.npy")
    check "$c: the single file runs" test -n "$ref"
    check "$c: ... as Hugging Face computes it" "$CHECK" close "$c/single.npy" "$FIX/$c/out.npy"
    sharded=("${args[@]/#*weights.safetensors/$c/model.safetensors.index.json}")
    same "$c: the sharded checkpoint gives the single file's bytes" "$ref" "${sharded[@]}" --output "$c/sharded.npy"
    check "$c: ... its output file too" "$CHECK" equal "$c/sharded.npy" "$c/single.npy"
    check "$c: ... named in the summary" grep -q "layer prefix" "$T/d.out"
done

# ---- a whole checkpoint: embeddings, final norm and lm_head beside the layers -----------------

L=$FIX/llama_mqa_stack2
A=(llama --heads 6 --kv-heads 1 --layers 2 --input "$L/x.npy")
ref=$(ldigest "${A[@]}" --weights "$L/weights.safetensors")
check "the llama stack runs" test -n "$ref"
"$MK" st-rename "$L/weights.safetensors" whole.safetensors "" extra=model.embed_tokens.weight \
    extra=model.norm.weight extra=lm_head.weight
mkdir whole
"$MK" st-shard whole.safetensors whole ""
expect_error 1 "whole/model.safetensors.index.json: 3 tensors not used by 2 llama layers: model.embed_tokens.weight, lm_head.weight, model.norm.weight" \
    "a whole checkpoint, strict" "${A[@]}" --weights whole/model.safetensors.index.json
check "... says --non-strict ignores them" grep -qF -- "--non-strict ignores them" "$T/err"
same "a whole checkpoint, --non-strict: the layers' bytes" "$ref" "${A[@]}" --weights whole/model.safetensors.index.json --non-strict
check "... the extras listed as ignored" grep -qF "run-graph: note: whole/model.safetensors.index.json: 3 tensors not used by 2 llama layers, ignored (--non-strict): model.embed_tokens.weight, lm_head.weight, model.norm.weight" "$T/d.err"
same "--prefix model.layers" "$ref" "${A[@]}" --weights whole/model.safetensors.index.json --non-strict --prefix model.layers
same "--prefix model.layers. (with the dot)" "$ref" "${A[@]}" --weights whole.safetensors --non-strict --prefix model.layers.
long=a_multimodal_wrapper_with_a_rather_long_name.language_model.
"$MK" st-rename whole.safetensors long.safetensors "$long"
expect_error 1 "long.safetensors: no llama layer 0: expected model.layers.0.input_layernorm.weight or layers.0.input_layernorm.weight; it holds '${long}model.layers.0.input_layernorm.weight'" \
    "a wrapper prefix, not detected" "${A[@]}" --weights long.safetensors
check "... says --prefix" grep -qF "(or give --prefix: the layers' list)" "$T/err"
same "--prefix under a wrapper (names over 63 bytes)" "$ref" "${A[@]}" --weights long.safetensors --non-strict --prefix "${long}model.layers"
expect_error 1 "no llama layer 0 under --prefix 'model.layers.0': expected model.layers.0.0.input_layernorm.weight (--prefix names the layers' list" \
    "--prefix naming a layer of a stack" "${A[@]}" --weights whole.safetensors --non-strict --prefix model.layers.0
# one layer: --prefix may name the layer itself; layer 1 is then unused
one=$(ldigest llama --heads 6 --kv-heads 1 --input "$L/x.npy" --weights whole.safetensors --non-strict)
check "layer 0 alone runs ($one)" test -n "$one" -a "$one" != "$ref"
same "--prefix naming the one layer" "$one" llama --heads 6 --kv-heads 1 --input "$L/x.npy" \
    --weights whole.safetensors --non-strict --prefix model.layers.0
expect_error 1 "whole.safetensors: 12 tensors not used by 1 llama layer: model.layers.1.input_layernorm.weight" \
    "a layer past --layers, strict" llama --heads 6 --kv-heads 1 --input "$L/x.npy" --weights whole.safetensors
G=$FIX/gpt2_stack2
"$MK" st-rename "$G/weights.safetensors" gpt2_whole.safetensors "" extra=transformer.wte.weight \
    extra=transformer.wpe.weight extra=transformer.ln_f.weight extra=transformer.ln_f.bias extra=lm_head.weight
mkdir gpt2_whole
"$MK" st-shard gpt2_whole.safetensors gpt2_whole ""
same "a whole GPT-2 checkpoint, sharded, --prefix transformer.h --non-strict" \
    "$(ldigest gpt2 --heads 5 --layers 2 --input "$G/x.npy" --weights "$G/weights.safetensors")" \
    gpt2 --heads 5 --layers 2 --input "$G/x.npy" --weights gpt2_whole/model.safetensors.index.json --non-strict --prefix transformer.h
expect_error 2 "--prefix is for --weights" "--prefix without --weights" llama --prefix model.layers
expect_error 2 "--non-strict is for --weights" "--non-strict without --weights" bert --non-strict

# ---- an index and its shards must agree --------------------------------------------------------

I=llama_mqa_stack2/model.safetensors.index.json
grep -v '"model.layers.1.mlp.up_proj.weight"' $I >llama_mqa_stack2/left_out.index.json
expect_error 1 "llama_mqa_stack2/left_out.index.json: weight_map leaves out 1 tensor its shards hold: 'model.layers.1.mlp.up_proj.weight' (in model-0000" \
    "a tensor the index leaves out: unexpected" "${A[@]}" --weights llama_mqa_stack2/left_out.index.json
run "${A[@]}" --weights llama_mqa_stack2/left_out.index.json --non-strict
check "... --non-strict ignores it, saying so" grep -qF "run-graph: note: llama_mqa_stack2/left_out.index.json: weight_map leaves out 1 tensor its shards hold, ignored (--non-strict): 'model.layers.1.mlp.up_proj.weight'" "$T/err"
check "... and the layer then misses it" grep -qF "llama weights: missing model.layers.1.mlp.up_proj.weight" "$T/err"
# mha: a bias the index leaves out was dropped, and the run gave another result
X0=$SRC/tests/fixtures/loading/builtin_seqfirst/x.npy
W0=$SRC/tests/fixtures/loading/builtin_seqfirst/weights.safetensors
mkdir mha
"$MK" st-shard "$W0" mha ""
grep -v '"layers.0.self_attn.out_proj.bias"' mha/model.safetensors.index.json >mha/left_out.index.json
expect_error 1 "mha/left_out.index.json: weight_map leaves out 1 tensor its shards hold: 'layers.0.self_attn.out_proj.bias' (in model-00002-of-00002.safetensors)" \
    "mha: a bias the index leaves out" mha --heads 4 --seq-first --input "$X0" --weights mha/left_out.index.json
sed 's/\("model.layers.0.input_layernorm.weight": "model-0000\)1/\12/' $I >llama_mqa_stack2/wrong.index.json
expect_error 1 "llama_mqa_stack2/wrong.index.json: weight_map puts 'model.layers.0.input_layernorm.weight' in model-00002-of-00002.safetensors, which does not hold it" \
    "an index naming a shard that lacks the tensor" "${A[@]}" --weights llama_mqa_stack2/wrong.index.json
# \u0000: cJSON read "name\u0000zz" as "name"
sed 's/"model.layers.0.self_attn.q_proj.weight"/"model.layers.0.self_attn.q_proj.weight\\u0000zz"/' $I >llama_mqa_stack2/nul.index.json
check "the NUL written" grep -qF 'q_proj.weight\u0000zz"' llama_mqa_stack2/nul.index.json
expect_error 1 "llama_mqa_stack2/nul.index.json: offset " "\\u0000 in a name" "${A[@]}" --weights llama_mqa_stack2/nul.index.json
check "... naming the key" grep -qF "key 'model.layers.0.self_attn.q_proj.weight\\x00zz' holds \\u0000" "$T/err"
sed 's/\("model.layers.0.input_layernorm.weight": "model-00001-of-00002.safetensors\)"/\1\\u0000.txt"/' $I >llama_mqa_stack2/nul_path.index.json
expect_error 1 "the value 'model-00001-of-00002.safetensors\\x00.txt' of key 'model.layers.0.input_layernorm.weight' holds \\u0000" \
    "\\u0000 in a shard path" "${A[@]}" --weights llama_mqa_stack2/nul_path.index.json

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
