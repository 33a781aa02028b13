#!/usr/bin/env bash
# run-graph's loading and inputs, each case one that used to give a wrong
# answer with exit 0, or to be refused:
#   - the PyTorch cases of tests/fixtures/loading (nn.MultiheadAttention:
#     batch_first=False, key padding masks with left padding, bool and float
#     attn_mask [T, S] and [B*H, T, S], a query with no key left, float64
#     inputs, the block's weights under a prefix beside other modules');
#   - weights mapped, with names of any length, unaligned data, sharded
#     (an index .json), under a prefix given (with or without the dot) or
#     detected; strict by default (extra tensors listed), --non-strict;
#     a torch.save file named as such;
#   - graph files: every input bound once a file is given, --bind names
#     checked, optional inputs without a default refused;
#   - .npy inputs in float64, float16, bool converted; other dtypes refused
#     with a hint; --max-rel 0.
# usage: test_loading.sh RUN_GRAPH CLI_CHECK LOADING_FILES SOURCE_DIR
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") MK=$(realpath "$3") SRC=$(realpath "$4")
GRAPHS=$SRC/tools/graphs FIX=$SRC/tests/fixtures/loading
T=$(mktemp -d /tmp/test_loading.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2

# pass, fail, check, run, expect_ok, digest
source "$SRC/tests/cli_lib.sh"
# same_digest DESCRIPTION WANT ARGS...: the run's digest is WANT
same_digest() {
    local desc=$1 want=$2 got
    shift 2
    got=$(digest "$@")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then pass; else fail "$desc: '$got' vs '$want'"; fi
}
# expect_error STATUS SUBSTRING DESCRIPTION ARGS...: fails so, its last stderr line
# "run-graph: ..." holding SUBSTRING, nothing on stdout, no output file
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

# ---- the PyTorch cases ----------------------------------------------------------------

n=0
for dir in "$FIX"/*/; do
    [ -f "$dir/args" ] || continue
    name=$(basename "$dir")
    n=$((n + 1))
    cp -r "$dir" "$T/$name"
    cd "$T/$name" || exit 2
    args=$(sed "s|GRAPHS/|$GRAPHS/|" args)
    # shellcheck disable=SC2086 # the args file is split into words
    check "case $name: run-graph $args" "$RG" $args
    check "case $name: output vs PyTorch" "$CHECK" close got_out.npy out.npy
    check "case $name: attention weights vs PyTorch" "$CHECK" close got_attn.npy attn.npy
    check "case $name: no NaN in the weights of a query with no key" "$CHECK" close got_attn.npy attn.npy
    case $args in
    */mha.graph*) # the fused graph file and the built-in block (fused and unfused) take the same masks
        fused=$(echo "$args" | sed "s|/mha.graph|/mha_fused.graph|; s| --attn-weights got_attn.npy||; s|got_out.npy|got_fused.npy|")
        # shellcheck disable=SC2086
        check "case $name: mha_fused.graph" "$RG" $fused
        check "case $name: mha_fused.graph output vs PyTorch" "$CHECK" close got_fused.npy out.npy
        block=$(echo "$args" | sed "s|[^ ]*/mha.graph|mha|; s|got_|block_|g")
        # shellcheck disable=SC2086
        check "case $name: the built-in block, unfused" "$RG" $block --attn unfused
        check "case $name: the block's output vs PyTorch" "$CHECK" close block_out.npy out.npy
        check "case $name: the block's weights vs PyTorch" "$CHECK" close block_attn.npy attn.npy
        block=$(echo "$block" | sed "s| --attn-weights block_attn.npy||; s|block_out|fused_out|")
        # shellcheck disable=SC2086
        check "case $name: the built-in block, fused" "$RG" $block
        check "case $name: the fused block's output vs PyTorch" "$CHECK" close fused_out.npy out.npy ;;
    esac
    cd "$T" || exit 2
done
check "cases run from $FIX ($n, want 4)" test "$n" -ge 4

# ---- weights ----------------------------------------------------------------------------

W0=$FIX/builtin_seqfirst/weights.safetensors  # layers.0.{norm,self_attn,ffn}.*, D = 16, H = 4
X0=$FIX/builtin_seqfirst/x.npy                # [T, B, D] = [5, 2, 16]
base="mha --heads 4 --input $X0 --seq-first"
ref=$(digest $base --weights "$W0")
check "the built-in block on prefixed weights" test -n "$ref"
same_digest "--prefix with the dot" "$ref" $base --weights "$W0" --prefix layers.0.self_attn.
same_digest "--prefix without the dot" "$ref" $base --weights "$W0" --prefix layers.0.self_attn
expect_error 1 "no tensor name starts with 'layers.1.self_attn.'; it holds 'layers.0.norm.weight'" \
    "--prefix that matches nothing" $base --weights "$W0" --prefix layers.1.self_attn
"$MK" st-rename "$W0" old.safetensors "" dup=layers.0.self_attn.old.
expect_error 1 "8 tensors under the prefix 'layers.0.self_attn.' are not used by mha: 'layers.0.self_attn.old.layers.0.norm.weight'" \
    "another block's tensors under the prefix: strict" $base --weights old.safetensors --prefix layers.0.self_attn
check "... a few names, then a count" grep -qF "and 3 more (a misspelled name" "$T/err"
expect_error 2 "--prefix is for --weights" "--prefix without --weights" $base --prefix a.
# names of any length, the data at offsets no multiple of 4 (copied), both at once
long=model.encoder.layers.0.a_module_with_a_rather_long_name_indeed.self_attn.
"$MK" st-rename "$W0" long.safetensors "$long"
"$MK" st-rename "$W0" odd.safetensors "" odd
"$MK" st-rename "$W0" long_odd.safetensors "$long" odd
same_digest "names over 63 bytes, prefix detected" "$ref" $base --weights long.safetensors
same_digest "unaligned data" "$ref" $base --weights odd.safetensors --prefix layers.0.self_attn
same_digest "long names and unaligned data" "$ref" $base --weights long_odd.safetensors --prefix "${long}layers.0.self_attn"
# sharded
mkdir -p shards
"$MK" st-shard "$W0" shards ""
same_digest "a sharded checkpoint (index .json)" "$ref" $base --weights shards/model.safetensors.index.json
sed -e 's/\("layers.0.self_attn.in_proj_weight": "model-0000\)1/\12/;t' \
    -e 's/\("layers.0.self_attn.in_proj_weight": "model-0000\)2/\11/' \
    shards/model.safetensors.index.json >shards/wrong.index.json
if cmp -s shards/model.safetensors.index.json shards/wrong.index.json; then
    fail "the index was not changed for the wrong-shard case"
else
    expect_error 1 "wrong.index.json: weight_map puts 'layers.0.self_attn.in_proj_weight' in model-0000" \
        "an index naming the wrong shard" $base --weights shards/wrong.index.json
fi
printf '{"weight_map": {"a": "../etc/passwd"}}' >shards/climb.index.json
expect_error 1 "is not a shard file name beside the index" "an index climbing out" \
    $base --weights shards/climb.index.json
printf '{"weight_map": {"a": "nosuch.safetensors"}}' >shards/missing.index.json
expect_error 1 "shards/nosuch.safetensors: cannot open" "an index naming a missing shard" \
    $base --weights shards/missing.index.json
# two blocks: detection refuses, --prefix chooses
"$MK" st-rename "$W0" two.safetensors "enc." dup=dec.
expect_error 2 "holds several blocks (prefixes 'enc.layers.0.self_attn.', 'dec.layers.0.self_attn.'): choose one with --prefix" \
    "two blocks, no --prefix" $base --weights two.safetensors
same_digest "two blocks, --prefix dec." "$ref" $base --weights two.safetensors --prefix dec.layers.0.self_attn
# strict: a misspelled tensor under the prefix
"$MK" st-rename "$W0" extra.safetensors "" extra=layers.0.self_attn.out_proj.bais
expect_error 1 "1 tensor under the prefix 'layers.0.self_attn.' is not used by mha: 'layers.0.self_attn.out_proj.bais'" \
    "an extra tensor" $base --weights extra.safetensors
same_digest "--non-strict allows it" "$ref" $base --weights extra.safetensors --non-strict
expect_error 1 "not used by mha" "strict in --decode too" mha --heads 4 --input "$X0" --seq-first \
    --weights extra.safetensors --decode 2
# not safetensors
printf 'PK\003\004\000\000\010\010\000\000archive/data.pkl' >torch.pt
expect_error 1 "torch.pt: offset 0: a zip archive (torch.save writes one: a PyTorch checkpoint), not a safetensors file" \
    "a torch.save file" $base --weights torch.pt
check "... says what to do" grep -qF "tools/export_safetensors.py" "$T/err"
printf '\200\002}q\000(X\001\000\000\000aq\001' >legacy.pt
expect_error 1 "legacy.pt: offset 0: a Python pickle" "a legacy torch.save pickle" $base --weights legacy.pt

# ---- inputs -----------------------------------------------------------------------------

"$MK" seq-first "$X0" xb.npy # [B, T, D]
expect_ok "--seq-first output" mha --heads 4 --input "$X0" --seq-first --weights "$W0" --output o_tbd.npy
expect_ok "batch-first output" mha --heads 4 --input xb.npy --weights "$W0" --output o_btd.npy
"$MK" seq-first o_btd.npy o_btd_t.npy
check "--seq-first writes [T, B, D]" "$CHECK" equal o_tbd.npy o_btd_t.npy
# float64 and float16 inputs: converted, one line says so
"$MK" astype xb.npy x64.npy f8
same_digest "a float64 input (exact values)" "$(digest mha --heads 4 --input xb.npy --weights "$W0")" \
    mha --heads 4 --input x64.npy --weights "$W0"
check "... a note says so" grep -qF "run-graph: note: x64.npy: float64 data converted to f32" "$T/d.err"
"$MK" npy h32.npy f4 2,5,16 0.5,-0.25,0.125,1.5,-2,0.0625,3,-0.75,0.375
"$MK" npy h16.npy f2 2,5,16 0.5,-0.25,0.125,1.5,-2,0.0625,3,-0.75,0.375
same_digest "a float16 input" "$(digest mha --heads 4 --input h32.npy --weights "$W0")" \
    mha --heads 4 --input h16.npy --weights "$W0"
"$MK" npy i64.npy i8 2,5,16 1,2,3
expect_error 1 "i64.npy: offset 20: dtype '<i8' is not supported; expected '<f4' or '<i4' (or '<f8', '<f2', '|b1', converted): convert it with np.save(path, a.astype(np.float32))" \
    "an int64 input" mha --heads 4 --input i64.npy --weights "$W0"

# ---- masks ------------------------------------------------------------------------------

G=$GRAPHS/mha.graph
M="--heads 4 --input xb.npy --weights $W0"
"$MK" npy none.npy b1 5,5 0
same_digest "an all-False bool mask changes nothing" "$(digest $G $M)" $G $M --attn-mask none.npy
"$MK" npy right.npy b1 2,5 0,0,0,0,0,0,0,0,1,1
same_digest "right padding as a key padding mask = --valid-lens" "$(digest $G $M --valid-lens 5,3)" \
    $G $M --key-padding-mask right.npy
"$MK" npy causal.npy b1 5,5 0,1,1,1,1,0,0,1,1,1,0,0,0,1,1,0,0,0,0,1,0,0,0,0,0
same_digest "a causal bool attn_mask = --causal" "$(digest $G $M --causal)" $G $M --attn-mask causal.npy
same_digest "... and in the fused graph" "$(digest "$GRAPHS/mha_fused.graph" $M --causal)" \
    "$GRAPHS/mha_fused.graph" $M --attn-mask causal.npy
"$MK" npy causal_f.npy f8 5,5 0,-inf,-inf,-inf,-inf,0,0,-inf,-inf,-inf,0,0,0,-inf,-inf,0,0,0,0,-inf,0,0,0,0,0
same_digest "the same as a float64 additive mask" "$(digest $G $M --causal)" $G $M --attn-mask causal_f.npy
"$MK" npy heads.npy b1 8,5,5 0,1,1,1,1,0,0,1,1,1,0,0,0,1,1,0,0,0,0,1,0,0,0,0,0
same_digest "a [B*H, T, S] mask" "$(digest $G $M --causal)" $G $M --attn-mask heads.npy
same_digest "attn_mask, key padding and valid lengths combine" "$(digest $G $M --causal --valid-lens 5,3)" \
    $G $M --attn-mask causal.npy --key-padding-mask right.npy --valid-lens 5,5
"$MK" npy bad.npy b1 4,5 0
expect_error 1 "--attn-mask bad.npy: [4,5] is not [T, S] or [B*H, T, S] (or [B or 1, H or 1, T, S]) with B = 2" "a mask of the wrong shape" \
    $G $M --attn-mask bad.npy
"$MK" npy bad3.npy b1 6,5,5 0
expect_error 1 "--attn-mask bad3.npy: [6,5,5]: 6 masks, but B*H = 2 * 4 = 8" "a [B*H, T, S] mask of the wrong count" \
    $G $M --attn-mask bad3.npy
expect_error 1 "--key-padding-mask causal.npy: [5,5] is not [B, S]" "a key padding mask of the wrong shape" \
    $G $M --key-padding-mask causal.npy
printf 'input x f32 [B, T, D]\ny = scale(x, 2)\noutput y\n' >plain.graph
expect_error 2 "--attn-mask: plain.graph declares no input attn_mask" "a mask for a file without one" \
    plain.graph --input xb.npy --attn-mask none.npy
same_digest "the built-in block with masks = mha.graph" "$(digest $G $M --attn-mask heads.npy --key-padding-mask right.npy)" \
    mha $M --attn-mask heads.npy --key-padding-mask right.npy --attn unfused
same_digest "... fused = mha_fused.graph" "$(digest "$GRAPHS/mha_fused.graph" $M --attn-mask causal.npy --key-padding-mask right.npy)" \
    mha $M --attn-mask causal.npy --key-padding-mask right.npy
same_digest "gqa with a mask = gqa.graph" "$(digest "$GRAPHS/gqa.graph" $M --kv-heads 4 --attn-mask causal.npy)" \
    gqa $M --kv-heads 4 --attn-mask causal.npy --attn unfused
d=$(digest mha $M --attn-mask heads.npy --key-padding-mask right.npy --save-inputs saved_mask)
check "--save-inputs writes the mask, and --attn-mask reads it back ($d)" test -n "$d" -a \
    "$(cd saved_mask && eval digest "$(cat args)")" = "$d"
check "... as --attn-mask attn_mask.npy" grep -qF -- "--attn-mask attn_mask.npy" saved_mask/args
expect_error 2 "--attn-mask does not apply with --decode" "--decode with a mask" mha $M --attn-mask none.npy --decode 2

# ---- graph files: every input bound, --bind checked, optional inputs with a default ------

printf 'input x f32 [B, T, D]\ninput extra f32 [B, T, D]\ny = add(x, extra)\noutput y\n' >two.graph
expect_error 1 "two.graph: input 'extra' [2,5,16] is not bound: give it with --bind NAME=FILE.npy" \
    "an input left unbound beside --input" two.graph --input xb.npy
expect_error 1 "input 'extra' [2,5,16] is not bound" "an input left unbound beside --weights" \
    two.graph --weights "$W0" --non-strict --d-model 16 --seq 5 --batch 2
expect_ok "bound with --bind" two.graph --input xb.npy --bind extra=xb.npy
expect_ok "random inputs when no file is given" two.graph --seq 5 --d-model 16
expect_error 2 "--bind extar=xb.npy: two.graph declares no input or param 'extar' (it declares x, extra)" \
    "a misspelled --bind" two.graph --input xb.npy --bind extra=xb.npy --bind extar=xb.npy
printf 'input x f32 [B, T, D]\ninput attn_mask f32 [B, 1, T, T] optional\ninput valid_lens i32 [B] optional default none\nm = add(attn_mask, valid_len_mask(valid_lens, T))\ny = softmax(reshape(matmul(x, transpose(x, -2, -1)), [B, 1, T, T]), m)\noutput y\n' >nodefault.graph
expect_error 1 "nodefault.graph:2:7: input 'attn_mask' is optional, but nothing binds it and it declares no default" \
    "an optional input without a default, unbound" nodefault.graph --input xb.npy --valid-lens 5,3
sed 's/optional$/optional default none/' nodefault.graph >withdefault.graph
printf 'input x f32 [B, T, D]\ninput valid_lens i32 [B] optional default none\nm = valid_len_mask(valid_lens, T)\ny = softmax(reshape(matmul(x, transpose(x, -2, -1)), [B, 1, T, T]), m)\noutput y\n' >lens_only.graph
same_digest "add(none, valid_len_mask) keeps the valid lengths" "$(digest lens_only.graph --input xb.npy --valid-lens 5,3)" \
    withdefault.graph --input xb.npy --valid-lens 5,3
check "... which change the result" test "$(digest lens_only.graph --input xb.npy --valid-lens 5,3)" != \
    "$(digest lens_only.graph --input xb.npy)"

# ---- --max-rel 0 --------------------------------------------------------------------------

expect_ok "relpos --max-rel 0" relpos --heads 2 --d-model 8 --seq 4 --max-rel 0 --save-inputs rel0
check "... saves a [1, d_k] table" grep -qF -- "--max-rel 0" rel0/args
same_digest "relpos.graph --max-rel 0 gives the block's digest" "$(digest relpos --heads 2 --d-model 8 --seq 4 --max-rel 0 --attn unfused)" \
    "$GRAPHS/relpos.graph" --heads 2 --kv-heads 2 --d-model 8 --seq 4 --max-rel 0
expect_error 2 "--max-rel: '-1' is not a whole number in [0, " "--max-rel -1" relpos --max-rel -1

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
