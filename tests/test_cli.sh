#!/usr/bin/env bash
# run-graph through its command line, as users and scripts call it:
#   - every PyTorch fixture, run exactly as its `args` file says (in a copy of
#     its folder), output and attention weights against the expected files;
#   - the example graph files on the same fixtures and on random data: the
#     same output digest as the built-in blocks;
#   - round trips: --save-graph then run, --save-inputs then run (npy and
#     safetensors written then read), --output's bytes against --json's digest;
#   - every kind of bad input: exit status, a one-line message naming the file
#     and what was wrong, and no output file left behind;
#   - the outputs: --json (checked with cJSON), --attn-svg (xmllint), --profile,
#     --print-graph, --dot, --help, --version;
#   - the fused and unfused graphs (--attn) and decoding (--decode);
#   - the scoring and position flags of mha and gqa (--rope, --rope-theta,
#     --causal-top-left, --window, --softcap, --alibi, --sinks);
#   - whole layers (llama, gpt2, bert) on tests/fixtures/layers, their graph
#     files' digests, strict loading and their errors.
# usage: test_cli.sh RUN_GRAPH CLI_CHECK SOURCE_DIR FIXTURES_DIR
# Needs bash, coreutils, grep and xmllint (libxml2-utils). CLI_CHECK is
# tests/cli_check.c (npy comparisons and JSON with the library and cJSON).
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") SRC=$(realpath "$3") FIX=$(realpath "$4")
GRAPHS=$SRC/tools/graphs
T=$(mktemp -d /tmp/test_cli.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT

# pass, fail, check, run, expect_ok, digest
source "$SRC/tests/cli_lib.sh"
# same_digest DESCRIPTION "ARGS A" "ARGS B": both runs give one digest.
same_digest() {
    local a b
    a=$(eval digest "$2")
    b=$(eval digest "$3")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass; else fail "$1: '$a' vs '$b' ($2 | $3)"; fi
}
# expect_error STATUS SUBSTRING DESCRIPTION ARGS...: run-graph fails with that
# status and one line on stderr, "run-graph: ..." containing SUBSTRING, prints
# nothing on stdout and leaves no output file (it is given --output too).
expect_error() {
    local status=$1 sub=$2 desc=$3
    shift 3
    rm -f "$T/never.npy"
    run --output "$T/never.npy" "$@"
    local lines
    lines=$(wc -l <"$T/err")
    if [ "$rc" -ne "$status" ]; then
        fail "$desc: exit $rc, expected $status: $(cat "$T/err")"
    elif [ "$lines" -ne 1 ] || ! grep -q '^run-graph: ' "$T/err"; then
        fail "$desc: stderr is not one 'run-graph: ' line: $(cat "$T/err")"
    elif ! grep -qF -- "$sub" "$T/err"; then
        fail "$desc: expected \"$sub\" in: $(cat "$T/err")"
    elif [ -s "$T/out" ] || [ -e "$T/never.npy" ] || [ -n "$(find "$T" -name '*.run-graph-tmp*')" ]; then
        fail "$desc: printed to stdout or left an output file"
    else
        pass
    fi
}

# ---- the PyTorch fixtures, exactly as their args say --------------------------

# The fixtures are data this test needs: missing, the test fails (never skips).
if [ ! -d "$FIX" ]; then
    echo "FAIL: the fixtures directory $4 is missing (tests/fixtures, gen_fixtures.py)" >&2
    exit 1
fi
for name in mha_seed mha_bias_causal mha_d2l_cross_validlens mha_torch_native gqa_seed_small mqa \
    relpos_key relpos_key_value mha_causal_validlens mha_cross_causal_validlens gqa_causal_validlens \
    relpos_gqa_causal; do
    check "fixture $name is in $FIX" test -f "$FIX/$name/args"
done
mkdir -p "$T/fx"
n_fixtures=0
for dir in "$FIX"/*/; do
    [ -f "$dir/args" ] || continue
    name=$(basename "$dir")
    # a case run-graph cannot express (its no_cli says why) is the other
    # tests' (test_attn_fixtures runs every case)
    if [ -f "$dir/no_cli" ]; then
        echo "fixture $name: not run through run-graph: $(cat "$dir/no_cli")"
        continue
    fi
    n_fixtures=$((n_fixtures + 1))
    cp -r "$dir" "$T/fx/$name"
    cd "$T/fx/$name" || exit 2
    args=$(cat args)
    model=${args%% *} rest=${args#* }
    # shellcheck disable=SC2086 # the args file is split into words, as a shell would
    check "fixture $name: run-graph $args" "$RG" $args
    check "fixture $name: output" "$CHECK" close got_out.npy out.npy
    check "fixture $name: attention weights" "$CHECK" close got_attn.npy attn.npy
    # the output file holds exactly the bytes --json digested
    d=$(digest $args)
    check "fixture $name: --output bytes have the --json digest" test "$d" = "$("$CHECK" xxh3 got_out.npy)"
    # graph files take no scoring or position flags: a saved graph holds them as
    # ops; the example graph files have none (no rope)
    grest=$(printf '%s' "$rest" | sed -E 's/ --rope( --rope-theta [^ ]+)?//')
    # the example graph file computes the same bytes
    if [ -f "$GRAPHS/$model.graph" ] && [ "$grest" = "$rest" ]; then
        g=$(digest "$GRAPHS/$model.graph" $rest)
        check "fixture $name: $model.graph gives the block's digest ($g vs $d)" test -n "$d" -a "$g" = "$d"
        check "fixture $name: $model.graph output" "$CHECK" close got_out.npy out.npy
    fi
    # --save-graph, then the saved file on the same files: the same digest
    s=$(digest $args --save-graph saved.graph)
    r=$(digest saved.graph $grest)
    check "fixture $name: --save-graph then run ($s vs $r)" test -n "$s" -a "$s" = "$r"
    cd "$T" || exit 2
done
check "fixtures run through run-graph from $FIX ($n_fixtures, want 15)" test "$n_fixtures" -ge 15

# ---- nn.MultiheadAttention's whole state_dict and the HF names (tests/fixtures/mha_module) --
# Each was silently wrong with exit 0 before: bias_k/bias_v ignored (error 0.167), GPT-2's
# square c_proj (Conv1D [in, out]) read as [out, in] (error 1.01); or refused: kdim/vdim,
# --add-zero-attn, q_proj.., BERT's names. Now each matches PyTorch, and a saved graph too.
MOD="$FIX/mha_module"
n_mod=0
for name in $(cat "$MOD/CASES"); do
    n_mod=$((n_mod + 1))
    cp -r "$MOD/$name" "$T/fx/mod_$name"
    cd "$T/fx/mod_$name" || exit 2
    args=$(cat args)
    # shellcheck disable=SC2086 # the args file is split into words, as a shell would
    check "mha_module $name: run-graph $args" "$RG" $args
    check "mha_module $name: output" "$CHECK" close got_out.npy out.npy
    check "mha_module $name: attention weights" "$CHECK" close got_attn.npy attn.npy
    fargs=$(printf '%s' "$args" | sed -E 's/ --attn-weights [^ ]+//; s/got_out.npy/got_fused.npy/')
    # shellcheck disable=SC2086
    check "mha_module $name: run-graph $fargs --attn fused" "$RG" $fargs --attn fused
    check "mha_module $name: fused output" "$CHECK" close got_fused.npy out.npy
    s=$(digest $args --save-graph saved.graph)
    rest=$(printf '%s' "${args#* }" | sed -E 's/ --add-zero-attn//')
    r=$(digest saved.graph $rest)
    check "mha_module $name: --save-graph then run ($s vs $r)" test -n "$s" -a "$s" = "$r"
    cd "$T" || exit 2
done
check "mha_module cases run ($n_mod, want 9)" test "$n_mod" -ge 9

# ---- graph files and built-in blocks on random data -------------------------------

for sizes in "--seq 5 --d-model 24 --heads 6 --kv-heads 2" \
    "--seq 5 --d-model 24 --heads 6 --kv-heads 3 --causal --seed 7" \
    "--batch 3 --seq 2 --kv-seq 7 --d-model 16 --heads 4 --kv-heads 1 --valid-lens 7,0,3" \
    "--batch 2 --seq 4 --kv-seq 3 --d-model 16 --heads 2 --kv-heads 2 --causal --valid-lens 1,3"; do
    for model in gqa relpos; do
        same_digest "$model.graph = $model --attn unfused with $sizes" "$model --attn unfused $sizes" \
            "$GRAPHS/$model.graph $sizes"
    done
    same_digest "gqa_fused.graph = gqa (fused) with $sizes" "gqa $sizes" "$GRAPHS/gqa_fused.graph $sizes"
    mha_sizes=${sizes/--kv-heads [0-9]/}
    same_digest "mha.graph = mha --attn unfused with $mha_sizes" "mha --attn unfused $mha_sizes" \
        "$GRAPHS/mha.graph $mha_sizes"
    same_digest "mha_fused.graph = mha (fused) with $mha_sizes" "mha $mha_sizes" \
        "$GRAPHS/mha_fused.graph $mha_sizes"
done

# ---- round trips --------------------------------------------------------------------

# --save-graph then run: every block, with and without masks, cross-attention
for model in mha gqa relpos; do
    sizes="--seq 4 --d-model 16 --heads 4 --seed 3"
    [ "$model" = relpos ] && sizes="$sizes --max-rel 2"
    [ "$model" = gqa ] && sizes="$sizes --kv-heads 2"
    s=$(digest $model $sizes --attn unfused --causal --save-graph "$T/rt.graph")
    r=$(digest "$T/rt.graph" $sizes --causal)
    check "$model $sizes --attn unfused --causal: --save-graph then run ($s vs $r)" test -n "$s" -a "$s" = "$r"
    for extra in "" "--causal" "--valid-lens 3,1" "--kv-seq 6 --causal --valid-lens 6,2"; do
        s=$(digest $model $sizes $extra --save-graph "$T/rt.graph")
        r=$(digest "$T/rt.graph" $sizes $extra)
        check "$model $sizes $extra: --save-graph then run ($s vs $r)" test -n "$s" -a "$s" = "$r"
    done
done
# the saved text reads back to the same text
expect_ok "save a saved graph" "$T/rt.graph" $sizes --kv-seq 6 --causal --valid-lens 6,2 --save-graph "$T/rt2.graph"
check "a saved graph saves to the same text" cmp "$T/rt.graph" "$T/rt2.graph"

# --save-inputs: the weights (safetensors) and inputs (npy) written, then read
# back through their args file, give the same digest
for a in "mha --seq 3 --d-model 8 --heads 2 --causal --valid-lens 2,3" \
    "gqa --seq 2 --kv-seq 5 --d-model 16 --heads 4 --kv-heads 2 --seed 9" \
    "relpos --seq 4 --d-model 8 --heads 2 --max-rel 2" \
    "matmul --m 3 --n 5 --k 7" \
    "$GRAPHS/relpos.graph --seq 4 --d-model 8 --heads 2 --max-rel 1 --valid-lens 4,2"; do
    rm -rf "$T/si"
    d=$(digest $a --save-inputs "$T/si")
    r=$(cd "$T/si" && digest $(cat args))
    check "$a: --save-inputs then run its args ($d vs $r)" test -n "$d" -a "$d" = "$r"
done
check "--save-inputs wrote weights and inputs" test -f "$T/si/weights.safetensors" -a -f "$T/si/x.npy"
# npy written, then read: bit-exact (the output fed back as an input)
expect_ok "write an output" mha --seq 3 --d-model 8 --heads 2 --output "$T/o1.npy"
expect_ok "read it as an input" mha --input "$T/o1.npy" --heads 2 --save-inputs "$T/si2"
check "npy write then read is bit-exact" "$CHECK" equal "$T/o1.npy" "$T/si2/x.npy"

# ---- determinism ---------------------------------------------------------------------

same_digest "the same seed, the same digest" "mha --seq 4 --d-model 16 --heads 2 --seed 5" \
    "mha --seq 4 --d-model 16 --heads 2 --seed 5"
same_digest "any thread count, the same digest" "gqa --seq 9 --d-model 32 --heads 4 --threads 1" \
    "gqa --seq 9 --d-model 32 --heads 4 --threads 3"
d1=$(digest mha --seq 4 --d-model 16 --heads 2 --seed 5)
d2=$(digest mha --seq 4 --d-model 16 --heads 2 --seed 6)
check "another seed, another digest" test "$d1" != "$d2"

# ---- --json ----------------------------------------------------------------------------

expect_ok "--json" mha --seq 4 --d-model 16 --heads 2 --repeat 3 --json
cp "$T/out" "$T/run.json"
check "--json is one object with the documented keys" "$CHECK" json "$T/run.json" model output_shape xxh3 \
    threads runs median_ms min_ms flops peak_bytes
check "--json runs" test "$("$CHECK" json-get "$T/run.json" runs)" = 3
check "--json output_shape" test "$("$CHECK" json-get "$T/run.json" output_shape)" = "[2,4,16]"
check "--json xxh3 is 16 hex digits" grep -qE '"xxh3":"[0-9a-f]{16}"' "$T/run.json"
check "--json peak_bytes > 0" test "$("$CHECK" json-get "$T/run.json" peak_bytes)" -gt 0
# the planner reuses the memory of dead intermediates: less than without reuse
expect_ok "--json, a bigger graph" relpos --seq 64 --d-model 32 --heads 4 --max-rel 8 --json
peak=$("$CHECK" json-get "$T/out" peak_bytes) naive=$("$CHECK" json-get "$T/out" naive_bytes)
check "peak_bytes ($peak) < naive_bytes ($naive) when memory is reused" test "$peak" -lt "$naive"
expect_ok "--json --profile --print-graph" relpos --seq 3 --d-model 8 --heads 2 --json --profile --print-graph
check "--json stays one object with --profile and --print-graph" "$CHECK" json "$T/out" profile xxh3
check "--print-graph goes to stderr with --json" grep -q softmax "$T/err"

# ---- the human summary, --profile, --print-graph, --dot -------------------------------

expect_ok "summary" gqa --seq 4 --d-model 16 --heads 4 --kv-heads 2 --repeat 2
check "summary: output shape and digest" grep -qE '^output  \[2,4,16\]  xxh3 [0-9a-f]{16}$' "$T/out"
check "summary: time" grep -qE '^time    [0-9.]+ ms median, [0-9.]+ ms min of 2 runs' "$T/out"
expect_ok "--profile" mha --seq 4 --d-model 16 --heads 2 --attn unfused --profile --repeat 2
check "--profile: per-node rows" grep -qE '^ +[0-9]+  scores +matmul +\[2,2,4,4\]' "$T/out"
check "--profile: per-op totals" grep -qE '^softmax +1 ' "$T/out"
check "--profile: each node's kernel" grep -qE '^ +[0-9]+  scores +matmul .*%  gml_f32_gem[mv]_ukernel__[a-z0-9]+_[0-9]+x[0-9]+( \([a-z_]+\))?$' "$T/out"
check "--profile: the softmax's kernel" grep -qE '^ +[0-9]+  attn +softmax .*%  gml_f32_softmax_ukernel__[a-z0-9]+_u[0-9]+$' "$T/out"
check "--profile: a view runs no kernel" grep -qE '^ +[0-9]+  .* permute .*%  -$' "$T/out"
expect_ok "--profile --isa reference" mha --seq 4 --d-model 16 --heads 2 --attn unfused --profile --isa reference
check "--profile --isa reference: the reference kernels" grep -qE '^ +[0-9]+  scores +matmul .*%  reference$' "$T/out"
check "--profile: total 100%" grep -qE '^total .* 100\.0%$' "$T/out"
expect_ok "--print-graph" relpos --seq 3 --d-model 8 --heads 2 --print-graph
check "--print-graph lists the nodes" grep -qE '^node .* get_rows ' "$T/out"
expect_ok "--dot" mha --seq 3 --d-model 8 --heads 2 --dot "$T/g.dot"
check "--dot writes DOT" grep -q '^digraph ggmlite {' "$T/g.dot"
check "--dot has edges" grep -q -- '->' "$T/g.dot"

# ---- --attn-svg -----------------------------------------------------------------------

expect_ok "--attn-svg" mha --seq 6 --d-model 32 --heads 4 --causal --tokens "The,cat,sat,on,the,mat" \
    --attn-svg "$T/h.svg"
check "--attn-svg is well-formed XML" xmllint --noout "$T/h.svg"
check "--attn-svg: a panel per head" grep -q '>head 3</text>' "$T/h.svg"
check "--attn-svg: no fifth panel" test "$(grep -c '>head [0-9]*</text>' "$T/h.svg")" = 4
check "--attn-svg: token labels" grep -q '>cat</text>' "$T/h.svg"
check "--attn-svg: values in small grids" grep -qE '>0\.[0-9]{2}</text>' "$T/h.svg"
check "--attn-svg: a colour bar" grep -q 'url(#scale)' "$T/h.svg"
expect_ok "--attn-svg with markup, quotes and bad UTF-8 in tokens" mha --seq 4 --d-model 8 --heads 2 \
    --tokens "$(printf 'a&b,<c>,"d\x27,\xff\xfe')" --attn-svg "$T/h2.svg"
check "--attn-svg escapes tokens" xmllint --noout "$T/h2.svg"
check "--attn-svg: & escaped" grep -q 'a&amp;b' "$T/h2.svg"
expect_ok "--attn-svg, cross-attention and a large grid" gqa --seq 40 --kv-seq 50 --d-model 16 --heads 4 \
    --valid-lens 50,20 --attn-svg "$T/h3.svg" --attn-batch 1
check "--attn-svg (large) is well-formed XML" xmllint --noout "$T/h3.svg"
check "--attn-svg (large): no values printed" test "$(grep -cE '>0\.[0-9]{2}</text>' "$T/h3.svg")" = 0

# ---- fused and unfused graphs --------------------------------------------------------------

# the default is fused unless the weights are asked for; both compute the same attention
same_digest "mha is fused by default" "mha --seq 6 --d-model 16 --heads 2 --causal" \
    "mha --seq 6 --d-model 16 --heads 2 --causal --attn fused"
for a in "mha --seq 7 --d-model 16 --heads 2 --causal --valid-lens 7,3" \
    "gqa --seq 5 --kv-seq 9 --d-model 32 --heads 4 --kv-heads 2 --valid-lens 9,0"; do
    expect_ok "$a --attn fused" $a --attn fused --output "$T/fused.npy"
    expect_ok "$a --attn unfused" $a --attn unfused --output "$T/unfused.npy"
    check "$a: fused and unfused outputs agree" "$CHECK" close "$T/fused.npy" "$T/unfused.npy"
done
expect_ok "--attn-weights takes the unfused graph" mha --seq 5 --d-model 16 --heads 2 --attn-weights "$T/a.npy" \
    --print-graph
check "... which has a softmax" grep -q softmax "$T/out"
expect_ok "the fused graph" mha --seq 5 --d-model 16 --heads 2 --print-graph
check "... has a flash_attn node" grep -q flash_attn "$T/out"
# a long sequence: the fused graph's memory stays small, the unfused one holds [B, H, T, T]
expect_ok "fused, T = 512" mha --seq 512 --d-model 32 --heads 4 --batch 1 --json
fused_peak=$("$CHECK" json-get "$T/out" peak_bytes)
expect_ok "unfused, T = 512" mha --seq 512 --d-model 32 --heads 4 --batch 1 --attn unfused --json
unfused_peak=$("$CHECK" json-get "$T/out" peak_bytes)
check "fused peak_bytes ($fused_peak) < unfused / 8 ($unfused_peak)" test $((fused_peak * 8)) -lt "$unfused_peak"
# the built-in blocks' unfused graph has the weights as an output only when asked for
# (--attn-weights, --attn-svg): otherwise the planner reuses their memory (the fixtures above
# check them against PyTorch when asked). A graph file's outputs are those it declares.
for m in "mha --attn unfused" "relpos"; do
    expect_ok "$m: no weights asked for" $m --seq 6 --d-model 16 --heads 2 --json --save-graph "$T/nw.graph"
    check "$m: no weights asked for: no attn_shape" sh -c "! grep -q attn_shape '$T/out'"
    check "$m: no weights asked for: the saved graph has one output" \
        test "$(grep -c '^output ' "$T/nw.graph")" = 1
    expect_ok "$m --attn-weights" $m --seq 6 --d-model 16 --heads 2 --json --attn-weights "$T/w.npy" \
        --save-graph "$T/w.graph"
    check "$m --attn-weights: attn_shape" test "$("$CHECK" json-get "$T/out" attn_shape)" = "[2,2,6,6]"
    check "$m --attn-weights: the saved graph has two outputs" grep -qx "output attn" "$T/w.graph"
done

# ---- the ISA: GGMLITE_ISA (the library's environment variable) and --isa -----------------------

GGMLITE_ISA=reference "$RG" mha --seq 4 --d-model 16 --heads 2 --json >"$T/isa.json" 2>"$T/isa.err"
check "GGMLITE_ISA=reference runs the reference kernels" \
    test "$("$CHECK" json-get "$T/isa.json" isa)" = reference
GGMLITE_ISA=avx9000 "$RG" mha --seq 4 --d-model 16 --heads 2 --json >"$T/isa.json" 2>"$T/isa.err"
check "GGMLITE_ISA=avx9000 warns and runs the best ISA" grep -q "GGMLITE_ISA" "$T/isa.err"
check "GGMLITE_ISA=avx9000: a result all the same" "$CHECK" json "$T/isa.json" xxh3

# ---- --decode ----------------------------------------------------------------------------

expect_ok "--decode --json" gqa --batch 2 --seq 6 --d-model 32 --heads 4 --kv-heads 2 --decode 5 --json \
    --output "$T/dec.npy"
cp "$T/out" "$T/dec.json"
check "--decode --json has the documented keys" "$CHECK" json "$T/dec.json" tokens_per_s cache_bytes \
    prompt_tokens decode_tokens max_len ms_per_token xxh3 output_shape model threads runs median_ms min_ms \
    flops peak_bytes
check "--decode: peak_bytes holds the cache" test "$("$CHECK" json-get "$T/dec.json" peak_bytes)" -gt \
    "$("$CHECK" json-get "$T/dec.json" cache_bytes)"
check "--decode: the outputs of the 5 tokens" test "$("$CHECK" json-get "$T/dec.json" output_shape)" = "[2,5,32]"
# K and V: 2 x [B=2, G=2, T_max=6+5, d_k=8] floats
check "--decode: cache_bytes" test "$("$CHECK" json-get "$T/dec.json" cache_bytes)" = $((2 * 2 * 2 * 11 * 8 * 4))
check "--decode: --output has the digest" test "$("$CHECK" json-get "$T/dec.json" xxh3)" = "$("$CHECK" xxh3 "$T/dec.npy")"
same_digest "--decode: any thread count, the same tokens" \
    "mha --seq 9 --d-model 32 --heads 4 --decode 7 --threads 1" "mha --seq 9 --d-model 32 --heads 4 --decode 7 --threads 3"
same_digest "--decode --repeat: the same tokens" "mha --seq 3 --d-model 16 --heads 2 --decode 4" \
    "mha --seq 3 --d-model 16 --heads 2 --decode 4 --repeat 3"
expect_ok "--decode summary" mha --seq 4 --d-model 16 --heads 2 --decode 3 --max-len 10
check "--decode summary: tokens/s" grep -qE '^decode  [0-9.]+ tokens/s, [0-9.]+ ms/token' "$T/out"
check "--decode summary: the cache" grep -qE '^memory  KV cache [0-9.]+ MiB' "$T/out"
# --cache-dtype f16|bf16: K and V rounded into the cache (round to nearest even, unit roundoff
# u = 2^-11 for f16, 2^-8 for bf16). Each decoded output is a softmax-weighted average of V rows
# through W_o, its scores from q . k: rounding K and V moves it by about u times the outputs'
# size (measured here 0.17 to 0.26 u of the largest |output|, 2026-11-24), so the tolerance is
# 1 u of the largest output: 4x margin, and an f16 run that got the bf16 cache (0.9e-3) or a cache
# holding wrong rows (errors of the outputs' own size) misses it. The digest must differ from the
# f32 cache's (the flag is not ignored) and the cache is half the bytes.
CD="gqa --batch 2 --seq 20 --d-model 64 --heads 4 --kv-heads 2 --rope --decode 12"
expect_ok "--cache-dtype f32" $CD --cache-dtype f32 --output "$T/cache_f32.npy" --json
cache_f32=$("$CHECK" json-get "$T/out" cache_bytes) d_cache_f32=$("$CHECK" json-get "$T/out" xxh3)
check "--cache-dtype f32 is the default" test "$(digest $CD)" = "$d_cache_f32"
check "--cache-dtype f32: json cache_dtype" test "$("$CHECK" json-get "$T/out" cache_dtype)" = f32
for dt in f16:0.00048828125 bf16:0.00390625; do
    u=${dt#*:} dt=${dt%:*}
    expect_ok "--cache-dtype $dt" $CD --cache-dtype $dt --output "$T/cache_$dt.npy" --json
    check "--cache-dtype $dt: json cache_dtype" test "$("$CHECK" json-get "$T/out" cache_dtype)" = $dt
    check "--cache-dtype $dt: half the cache bytes" test "$("$CHECK" json-get "$T/out" cache_bytes)" = \
        $((cache_f32 / 2))
    check "--cache-dtype $dt: another result than the f32 cache" \
        test "$("$CHECK" json-get "$T/out" xxh3)" != "$d_cache_f32"
    check "--cache-dtype $dt: within $u (1 u) of the largest output of the f32 cache" \
        "$CHECK" near "$T/cache_$dt.npy" "$T/cache_f32.npy" $u
done
check "--cache-dtype bf16 misses f16's tolerance (the test tells the types apart)" \
    sh -c "! '$CHECK' near '$T/cache_bf16.npy' '$T/cache_f32.npy' 0.00048828125"
expect_ok "--cache-dtype: the summary names the type" mha --seq 4 --d-model 16 --heads 2 --decode 3 \
    --cache-dtype bf16
check "--cache-dtype: the summary names the type" grep -qE '^memory  KV cache [0-9.]+ MiB \(K and V bf16 ' "$T/out"

# ---- --help, --list-ops, --version --------------------------------------------------------

expect_ok "--help" --help
for flag in --batch --seq --kv-seq --d-model --heads --kv-heads --max-rel --m --n --k --causal --valid-lens \
    --weights --input --query --key --value --bind --seed --output --attn-weights --attn-svg --tokens \
    --query-tokens --attn-batch --dot --save-graph --save-inputs --threads --repeat --isa --profile \
    --nan-trap --print-graph --json --help --list-ops --version --attn --decode --max-len --cache-dtype; do
    check "--help documents $flag" grep -qE -- "^  $flag( |$)" "$T/out"
done
expect_ok "--list-ops" --list-ops
check "--list-ops prints the op table" grep -q '^| `softmax(x, mask=none, scale=1, causal=false, valid_lens=none, positions=none, sinks=none, window=0, softcap=0, alibi=0)` |' "$T/out"
expect_ok "--version" --version
version=$(sed -n 's/^#define GML_VERSION "\(.*\)"$/\1/p' "$SRC/ggmlite/include/ggmlite/ggmlite.h")
check "--version prints the library's version" grep -qx "run-graph (ggmlite) $version" "$T/out"

# ---- bad input ------------------------------------------------------------------------------

B=$T/bad
mkdir -p "$B"
cd "$B" || exit 2
W=$FIX/mha_bias_causal/weights.safetensors # D = 48, H = 4, with biases
X=$FIX/mha_bias_causal/x.npy               # [2, 7, 48]
le64() { local n=$1 i; for i in 0 1 2 3 4 5 6 7; do printf '\\x%02x' $(((n >> (8 * i)) & 255)); done; }
# mkst FILE JSON DATA_BYTES: a safetensors file
mkst() {
    printf "$(le64 ${#2})" >"$1"
    printf '%s' "$2" >>"$1"
    head -c "$3" /dev/zero >>"$1"
}
# mknpy FILE DESCR FORTRAN SHAPE DATA_BYTES [FILL_BYTE]: a .npy v1.0 file
mknpy() {
    local hdr="{'descr': '$2', 'fortran_order': $3, 'shape': $4, }"
    local pad=$((((10 + ${#hdr} + 1 + 63) / 64) * 64 - 10 - ${#hdr} - 1))
    hdr="$hdr$(printf '%*s' "$pad" '')"
    local len=$((${#hdr} + 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
        printf '%s\n' "$hdr"
        head -c "$5" /dev/zero | tr '\0' "${6:-\0}"
    } >"$1"
}
mknpy ok.npy '<f4' False '(2, 7, 48)' 2688
head -c 100 "$X" >trunc_header.npy
head -c 400 "$X" >trunc_data.npy
head -c 300 "$W" >trunc.safetensors
: >empty.npy
{ head -c 8 "$X"; printf '\xff\xff'; head -c 40 /dev/zero; } >hlen.npy
{ printf "$(le64 100000)"; printf '{}'; } >hlen.safetensors
mkst badjson.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [2,2], "data_offsets": [0, 16]' 16
mkst range.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [2,2], "data_offsets": [0, 16]}}' 8
mkst overlap.safetensors '{"a": {"dtype": "F32", "shape": [2,2], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}' 16
mkst f64.safetensors '{"w_q.weight": {"dtype": "F64", "shape": [2,2], "data_offsets": [0, 32]}}' 32
mkst only_q.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [48,48], "data_offsets": [0, 9216]}}' 9216
mkst even_rel.safetensors '{"rel_k.weight": {"dtype": "F32", "shape": [6,12], "data_offsets": [0, 288]}}' 288
mkst nonsq.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [8,9], "data_offsets": [0, 288]}}' 288
mkst nulkey.safetensors '{"w_q.weight\u0000junk": {"dtype": "F32", "shape": [48,48], "data_offsets": [0, 9216]}}' 9216
mkst esckey.safetensors '{"\u001b[2Jw_q.weight": {"dtype": "F32", "shape": [48,48], "data_offsets": [0, 9216]}}' 9216
mkst trailing.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [48,48], "data_offsets": [0, 9216]}}' 9220
mkst float.safetensors '{"w_q.weight": {"dtype": "F32", "shape": [48.0,48], "data_offsets": [0, 9216]}}' 9216
mknpy u2.npy '<u2' False '(2, 7, 48)' 1344
mknpy fortran.npy '<f4' True '(2, 7, 48)' 2688
mknpy rank2.npy '<f4' False '(7, 48)' 1344
mknpy i32.npy '<i4' False '(2, 7, 48)' 2688
mknpy nan.npy '<f4' False '(2, 7, 48)' 2688 '\377'
# zeros [2, 3, 4] but one NaN at [1, 2, 1]: element 21, 84 bytes into the 96 of data
mknpy one_nan.npy '<f4' False '(2, 3, 4)' 96
printf '\377\377\377\377' | dd of=one_nan.npy bs=1 seek=$(($(wc -c <one_nan.npy) - 96 + 84)) conv=notrunc 2>/dev/null
printf 'input x f32 [2, 3, 4]\ny = permute(x, [0, 2, 1])\noutput y\n' >permute.graph
printf 'input x f32 [B, T, D]\nlet dk = D / H\ny = sofmax(x)\noutput y\n' >bad.graph
printf 'input x f32 [B, T, D]\ny = scale(x, 2)\noutput y\n' >one_output.graph
printf 'input x f32 [B, T, D]\ninput valid_lens i32 [B]\nm = valid_len_mask(valid_lens, T)\noutput x, m\n' >lens.graph
printf 'input x f32 [B, T, D]\nlet dk = D / H\noutput x\n' >needs_h.graph

expect_error 1 "trunc_header.npy: offset 8: header length" "truncated .npy header" mha --heads 4 --input trunc_header.npy
expect_error 1 "trunc_data.npy: offset 128: data is" "truncated .npy data" mha --heads 4 --input trunc_data.npy
expect_error 1 "empty.npy: file is 0 bytes, too short" "empty .npy" mha --heads 4 --input empty.npy
expect_error 1 "trunc.safetensors: offset 0: header length" "truncated .safetensors" mha --heads 4 --weights trunc.safetensors
expect_error 1 "hlen.npy: offset 8: header length 65535 goes past the end of the file" ".npy header length past EOF" \
    mha --heads 4 --input hlen.npy
expect_error 1 "hlen.safetensors: offset 0: header length 100000 goes past the end of the file" \
    ".safetensors header length past EOF" mha --heads 4 --weights hlen.safetensors
expect_error 1 "badjson.safetensors: offset 78: header is not valid JSON" "bad JSON" mha --heads 4 --weights badjson.safetensors
expect_error 1 "nulkey.safetensors: offset 20: tensor name 'w_q.weight\\x00junk' holds byte 0x00, a control character" \
    "a NUL in a tensor name is refused, not cut short" mha --heads 4 --weights nulkey.safetensors
expect_error 1 "esckey.safetensors: offset 10: tensor name '\\x1b[2Jw_q.weight' holds byte 0x1b" \
    "an escape sequence in a tensor name is refused" mha --heads 4 --weights esckey.safetensors
check "the escape sequence does not reach the terminal" test -z "$(tr -d -c '\033' <"$T/err")"
expect_error 1 "trailing.safetensors: offset 9301: 4 unused bytes after the last tensor's data" \
    "bytes after the last tensor" mha --heads 4 --weights trailing.safetensors
expect_error 1 "float.safetensors: offset 50: tensor 'w_q.weight': shape dim 0 is 48.0, not a whole number" \
    "a size written 48.0" mha --heads 4 --weights float.safetensors
expect_error 1 "range.safetensors: tensor 'w_q.weight': data_offsets [0, 16] end past the data buffer" \
    "offsets out of range" mha --heads 4 --weights range.safetensors
expect_error 1 "overlap.safetensors: tensors 'a' [0, 16] and 'b' [8, 16] overlap" "overlapping offsets" \
    mha --heads 4 --weights overlap.safetensors
expect_error 1 "f64.safetensors: tensor 'w_q.weight': dtype 'F64' is not supported" "F64 weights" \
    mha --heads 4 --weights f64.safetensors
expect_error 1 "u2.npy: offset 20: dtype '<u2' is not supported; expected '<f4' or '<i4' (or '<f8', '<f2', '|b1', converted)" \
    "<u2 input" mha --heads 4 --input u2.npy
expect_error 1 "fortran.npy: offset 44: fortran_order is True" "Fortran order" mha --heads 4 --input fortran.npy
expect_error 1 "only_q.safetensors: attention weights: w_q.weight, w_k.weight and w_v.weight are not all present; present: w_q.weight [48,48]" \
    "a missing weight lists the present ones" mha --heads 4 --weights only_q.safetensors --input ok.npy
expect_error 1 "only_q.safetensors: no weights 'w_k.weight' [48,48], 'w_v.weight' [48,48], 'w_o.weight' [48,48] for $GRAPHS/mha.graph; present: w_q.weight [48,48]" \
    "a graph file's missing param lists the present ones" "$GRAPHS/mha.graph" --heads 4 --weights only_q.safetensors --input ok.npy
expect_error 1 "--d-model 64 disagrees with ok.npy [2,7,48] (D = 48)" "a flag that disagrees with a file" \
    mha --heads 4 --input ok.npy --d-model 64
expect_error 1 "--batch 3 disagrees with ok.npy [2,7,48] (B = 2)" "--batch against a file" mha --heads 4 --input ok.npy --batch 3
expect_error 1 "w_q.weight [48,48] disagrees with $FIX/mha_seed/x.npy [2,10,40] (D = 40)" \
    "weights that do not fit the input" mha --heads 4 --input "$FIX/mha_seed/x.npy" --weights "$W"
expect_error 1 "rank2.npy: f32 [7,48] is not an f32 [B, T, D] input" "a 2-D input" mha --heads 4 --input rank2.npy
expect_error 1 "i32.npy: i32 [2,7,48] is not an f32 [B, T, D] input" "an i32 input" mha --heads 4 --input i32.npy
expect_error 1 "--heads 5 does not divide D = 48 (ok.npy [2,7,48])" "heads that do not divide d_model" \
    mha --heads 5 --input ok.npy
expect_error 1 "even_rel.safetensors: rel_k.weight [6,12] has 6 rows; expected 2P+1 (odd)" "an even relative table" \
    relpos --heads 4 --weights even_rel.safetensors
expect_error 1 "gqa: kv_heads 3 must divide heads 4" "kv heads that do not divide heads" gqa --heads 4 --kv-heads 3 --d-model 16
expect_error 1 "--valid-lens has 3 lengths, but the batch is 2 (ok.npy [2,7,48])" "--valid-lens count" \
    mha --heads 4 --input ok.npy --valid-lens 1,2,3
expect_error 1 "--valid-lens: length 8 (batch 1) is more than the 7 keys" "--valid-lens past Tk" \
    mha --heads 4 --input ok.npy --valid-lens 3,8
expect_error 1 "bad.graph:3:5: unknown op 'sofmax'" "a malformed graph file (line:col)" bad.graph
expect_error 1 "needs_h.graph:2:14: unknown symbol 'H' (give --heads)" "a graph file needing a size" needs_h.graph --weights "$W"
expect_error 1 "lens.graph: input valid_lens [2] needs --valid-lens" "a graph file's valid_lens" lens.graph
expect_error 1 "one_output.graph: --attn-weights needs a second output" "--attn-weights of a one-output graph" \
    one_output.graph --attn-weights a.npy
expect_error 1 "--tokens has 3 labels, but there are 7 keys (Tk)" "--tokens count" \
    mha --heads 4 --input ok.npy --attn-svg h.svg --tokens a,b,c
expect_error 1 "--attn-batch 2: the batch has 2 elements" "--attn-batch out of range" \
    mha --heads 4 --input ok.npy --attn-svg h.svg --attn-batch 2
expect_error 1 "the inputs need 1.72e+10 GiB of tensor data; this machine has" "sizes too large for memory" \
    mha --batch 1073741824 --seq 1073741824 --d-model 1073741824 --heads 1
expect_error 1 "nosuch.npy: cannot open: No such file or directory" "a missing file" mha --heads 4 --input nosuch.npy
expect_error 1 "$B: not a regular file" "a directory as input" mha --heads 4 --input "$B"
expect_error 1 "compute: nan trap: node" "a compute error (NaN trap)" mha --heads 4 --input nan.npy --nan-trap
expect_error 1 "/nonexistent/dir/a.npy: cannot create" "an output that cannot be written" mha --heads 4 --input ok.npy \
    --attn-weights /nonexistent/dir/a.npy
expect_error 1 "/nonexistent/g.graph: cannot create" "a graph that cannot be saved" mha --heads 4 --input ok.npy \
    --save-graph /nonexistent/g.graph --attn-svg h.svg
check "a failed write leaves no other output (--output, staged)" test ! -e "$T/never.npy"
expect_error 2 "--frobnicate: unknown flag" "an unknown flag" mha --frobnicate
expect_error 2 "nosuch: not a model (mha, gqa, relpos, matmul) nor a readable graph file" "a bad MODEL" nosuch --heads 2
expect_error 2 "no MODEL given" "no MODEL" --heads 2
expect_error 2 "--heads: missing its value (H)" "a flag without its value" mha --heads
expect_error 2 "--heads: 'four' is not a whole number" "a flag with a bad value" mha --heads four
expect_error 2 "--seq: '0' is not a whole number in [1, " "a size of 0" mha --seq 0
expect_error 2 "--valid-lens: '3,,2' is not a list of lengths" "a malformed --valid-lens" mha --valid-lens 3,,2
expect_error 2 "give --heads: the weights do not say how many heads" "--weights without --heads" mha --weights "$W"
expect_error 2 "--kv-heads does not apply to mha (grouped-query attention is gqa)" "--kv-heads for mha" mha --kv-heads 2
expect_error 2 "--causal does not apply to matmul" "an attention flag for matmul" matmul --causal
expect_error 2 "--input is self-attention" "--input with --query" mha --input ok.npy --query ok.npy
expect_error 2 "--isa: 'avx9000' is not" "a bad --isa" mha --isa avx9000
expect_error 2 "--attn-batch is for the --attn-svg heatmap" "--attn-batch without --attn-svg" mha --attn-batch 1
expect_error 2 "a.npy: given for two outputs" "one path for two outputs" mha --attn-weights a.npy --attn-svg a.npy
expect_error 2 "--bind c=...: matmul's inputs are a [M, K] and b [K, N]" "--bind of an unknown matmul input" \
    matmul --bind c=ok.npy
expect_error 1 "--decode 4 after a prompt of 3 tokens needs 7 cache positions, but --max-len is 5" \
    "--decode past --max-len" mha --seq 3 --d-model 16 --heads 2 --decode 4 --max-len 5
expect_error 1 "--decode 1 after a prompt of 3 tokens needs 4 cache positions, but --max-len is 2" \
    "a prompt longer than --max-len" mha --seq 3 --d-model 16 --heads 2 --decode 1 --max-len 2
expect_error 2 "--attn: 'flash' is not fused or unfused" "a bad --attn" mha --attn flash
expect_error 2 "--attn-weights needs the attention weights, which the fused graph does not make" \
    "--attn fused with --attn-weights" mha --attn fused --attn-weights a.npy
expect_error 2 "--attn does not apply to matmul" "--attn for matmul" matmul --attn fused
expect_error 2 "--decode does not apply to relpos" "--decode for relpos" relpos --decode 3
expect_error 2 "--attn-svg does not apply with --decode" "--decode with --attn-svg" mha --decode 3 --attn-svg h.svg
expect_error 2 "--valid-lens does not apply with --decode" "--decode with --valid-lens" mha --decode 3 --valid-lens 1,2
expect_error 2 "--decode runs the fused graph" "--decode with --attn unfused" mha --decode 3 --attn unfused
expect_error 2 "--max-len is for --decode" "--max-len without --decode" mha --max-len 9
expect_error 2 "--cache-dtype: 'f64' is not f32, f16 or bf16" "unknown --cache-dtype" mha --decode 2 \
    --cache-dtype f64
expect_error 2 "--cache-dtype: 'q8_0' is not f32, f16 or bf16" "--cache-dtype q8_0" mha --decode 2 --cache-dtype q8_0
expect_error 2 "--cache-dtype is for --decode" "--cache-dtype without --decode" mha --cache-dtype f16
expect_error 2 "--cache-dtype does not apply to relpos" "--cache-dtype for relpos" relpos --cache-dtype f16
expect_error 1 "decode: kv_heads 3 must divide heads 4" "--decode with bad kv heads" gqa --heads 4 --kv-heads 3 \
    --d-model 16 --decode 2
# outputs are checked before any work: one file spelled two ways, a directory
mkdir -p adir
expect_error 2 "ok1.npy: given for two outputs (--attn-weights ok1.npy, --attn-svg ./ok1.npy)" \
    "one output file spelled two ways" mha --heads 4 --input ok.npy --attn-weights ok1.npy --attn-svg ./ok1.npy
expect_error 1 "--attn-weights adir: cannot create: it is a directory" "an output path that is a directory" \
    mha --heads 4 --input ok.npy --attn-weights adir
check "a refused output path leaves no other output" test ! -e ok1.npy
# a result holding NaN is an error, with or without --nan-trap
expect_error 1 "the output [2,7,48] holds 672 non-finite values, the first NaN at [0,0,0]" \
    "NaN input without --nan-trap: an error, not a NaN output" mha --heads 4 --input nan.npy
expect_error 1 "the output [2,4,3] holds 1 non-finite value, the first NaN at [1,1,2]" \
    "a NaN in a permuted output is named where the output has it" permute.graph --bind x=one_nan.npy
expect_error 2 "--attn fused: relpos has no fused graph" "relpos --attn fused" relpos --attn fused
expect_error 1 "weights.safetensors: relpos needs rel_k.weight [2P+1, d_k] (rel_v.weight is optional); present: w_q.weight" \
    "relpos weights without rel_k list the present ones" relpos --heads 4 --weights "$W"
expect_error 1 "nonsq.safetensors: w_q.weight is [8,9], but it must be square, [D, D]" "a non-square w_q" \
    mha --heads 4 --weights nonsq.safetensors
# flags a graph file never reads change nothing: a warning says so, and its sizes leave the summary
expect_ok "flags a graph file never reads" one_output.graph --causal --heads 4 --seq 3 --d-model 8 --valid-lens 1,2
check "--causal unread: a warning" grep -qF "warning: --causal: one_output.graph never reads CAUSAL" "$T/err"
check "--heads unread: a warning" grep -qF "warning: --heads 4: one_output.graph never reads H" "$T/err"
check "--valid-lens unread: a warning" grep -qF "warning: --valid-lens: one_output.graph declares no input valid_lens" \
    "$T/err"
check "the summary names the sizes the file reads, not H" grep -qE "^one_output.graph: B=2 T=3 D=8, causal" "$T/out"
check "no file left in the bad-input folder" test -z "$(find "$B" -newer "$B/needs_h.graph" -type f)"
# a write that fails, however it fails, leaves no file: past `ulimit -f` (run-graph ignores SIGXFSZ,
# so the write fails with EFBIG and the run cleans up), and killed by a signal once the outputs
# are staged (RUN_GRAPH_TEST_RAISE, a test hook in tools/rg_out.c: the signal handler removes
# them, and run-graph still dies of the signal)
# --weights-dtype: the weight matrices converted at load (graph files built from ops take them)
expect_ok "weights for --weights-dtype" mha --seq 3 --d-model 64 --heads 2 --save-inputs "$T/wd"
same_digest "--weights-dtype f32 changes nothing" \
    "$GRAPHS/mha_fused.graph --weights $T/wd/weights.safetensors --input $T/wd/x.npy --heads 2" \
    "$GRAPHS/mha_fused.graph --weights $T/wd/weights.safetensors --input $T/wd/x.npy --heads 2 --weights-dtype f32"
d_f32=$(digest "$GRAPHS/mha_fused.graph" --weights "$T/wd/weights.safetensors" --input "$T/wd/x.npy" --heads 2)
for dt in f16 bf16 q8_0; do
    expect_ok "--weights-dtype $dt" "$GRAPHS/mha_fused.graph" --weights "$T/wd/weights.safetensors" \
        --input "$T/wd/x.npy" --heads 2 --weights-dtype $dt --output "$T/wd_$dt.npy"
    d=$(digest "$GRAPHS/mha_fused.graph" --weights "$T/wd/weights.safetensors" --input "$T/wd/x.npy" \
        --heads 2 --weights-dtype $dt)
    check "--weights-dtype $dt: another result than f32 ($d)" test -n "$d" -a "$d" != "$d_f32"
    check "--weights-dtype $dt: the weights are smaller" grep -q "MiB of tensor data" "$T/out"
done
expect_error 2 "--weights-dtype: 'q4' is not f32, f16, bf16 or q8_0" "unknown --weights-dtype" mha --weights-dtype q4
expect_ok "weights of rows of 8" mha --seq 3 --d-model 8 --heads 2 --save-inputs "$T/wd8"
expect_error 1 "has rows of 8 values, not a multiple of 32" "q8_0 with rows of 8" \
    "$GRAPHS/mha_fused.graph" --heads 2 --weights "$T/wd8/weights.safetensors" --weights-dtype q8_0
# the built-in blocks and layers take typed weights too: mha equals the graph file on them
for dt in f16 bf16 q8_0; do
    same_digest "mha --weights-dtype $dt: the graph file's digest" \
        "mha --weights $T/wd/weights.safetensors --input $T/wd/x.npy --heads 2 --weights-dtype $dt" \
        "$GRAPHS/mha_fused.graph --weights $T/wd/weights.safetensors --input $T/wd/x.npy --heads 2 --weights-dtype $dt"
done
for m in llama gpt2 bert; do
    expect_ok "$m, f32 weights" $m --seq 5 --d-model 64 --heads 2 --ffn 64 --output "$T/${m}_f32.npy"
    expect_ok "$m --weights-dtype bf16" $m --seq 5 --d-model 64 --heads 2 --ffn 64 --weights-dtype bf16 \
        --output "$T/${m}_bf16.npy"
    check "$m --weights-dtype bf16: another result than f32" sh -c "! cmp -s $T/${m}_f32.npy $T/${m}_bf16.npy"
done
expect_error 1 "gpt2: attn.c_attn.weight is q8_0 [64,192]: Conv1D weights [in, out]" \
    "gpt2 takes no q8_0 Conv1D weights" gpt2 --seq 5 --d-model 64 --heads 2 --weights-dtype q8_0
# nn.MultiheadAttention's packed in_proj_weight as q8_0: its q, k, v row blocks are views
MT=$FIX/mha_torch_native
d_q8=$(digest mha --heads 4 --weights "$MT/weights.safetensors" --input "$MT/x.npy" --weights-dtype q8_0 --threads 1)
check "mha --weights-dtype q8_0 on in_proj_weight runs ($d_q8), not the f32 result" test -n "$d_q8" -a \
    "$d_q8" != "$(digest mha --heads 4 --weights "$MT/weights.safetensors" --input "$MT/x.npy")"
for th in 2 3 4 7; do
    same_digest "mha --weights-dtype q8_0 on in_proj_weight: $th threads as 1" \
        "mha --heads 4 --weights $MT/weights.safetensors --input $MT/x.npy --weights-dtype q8_0 --threads 1" \
        "mha --heads 4 --weights $MT/weights.safetensors --input $MT/x.npy --weights-dtype q8_0 --threads $th"
done
expect_error 1 "has rows of 48 values, not a multiple of 32" "llama --weights-dtype q8_0, F = 48" \
    llama --seq 5 --d-model 64 --heads 2 --ffn 48 --weights-dtype q8_0
# bf16 weights are saved as BF16 and read back as they are: the folder's args
# (no --weights-dtype) give the same digest
rm -rf "$T/wd2"
d=$(digest "$GRAPHS/mha_fused.graph" --weights "$T/wd/weights.safetensors" --heads 2 --weights-dtype bf16 \
    --save-inputs "$T/wd2")
r=$(cd "$T/wd2" && digest $(cat args))
check "--save-inputs of bf16 weights then run its args ($d vs $r)" test -n "$d" -a "$d" = "$r"
check "--save-inputs of bf16 weights wrote BF16" grep -q '"dtype":"BF16"' "$T/wd2/weights.safetensors"
expect_error 1 "tensor 'w_q.weight' is q8_0, which safetensors has no dtype for" "--save-inputs of q8_0 weights" \
    "$GRAPHS/mha_fused.graph" --weights "$T/wd/weights.safetensors" --heads 2 --weights-dtype q8_0 --save-inputs "$T/wd3"
K=$T/killed
mkdir -p "$K"
(ulimit -f 8 && "$RG" mha --heads 4 --seq 64 --d-model 64 --output "$K/out.npy" >"$T/out" 2>"$T/err")
rc=$?
check "past ulimit -f: exit 1 (not killed by SIGXFSZ: $rc)" test "$rc" -eq 1
check "past ulimit -f: the message says why" grep -qF "out.npy: write failed: File too large" "$T/err"
check "past ulimit -f: one line, no temporary path in it" test "$(wc -l <"$T/err")" -eq 1 -a \
    -z "$(grep -F run-graph-tmp "$T/err")"
check "past ulimit -f: no file left ($(ls -A "$K"))" test -z "$(ls -A "$K")"
for sig in 1 2 13 15; do
    RUN_GRAPH_TEST_RAISE=$sig "$RG" mha --heads 4 --seq 8 --d-model 16 --output "$K/out.npy" \
        --attn-weights "$K/attn.npy" --save-graph "$K/g.graph" --save-inputs "$K/inputs" >"$T/out" 2>"$T/err"
    rc=$?
    check "killed by signal $sig: the exit status says so ($rc)" test "$rc" -eq $((128 + sig))
    check "killed by signal $sig: no file left ($(ls -A "$K"))" test -z "$(ls -A "$K")"
done
cd "$T" || exit 2

# ---- attention scoring and positions (mha, gqa) ----------------------------------------

base="--seq 7 --d-model 32 --heads 4 --seed 4"
for model in mha "gqa --kv-heads 2"; do
    d0=$(eval digest $model $base --causal)
    d1=$(eval digest $model $base --causal --rope)
    d2=$(eval digest $model $base --causal --rope --rope-theta 500000)
    check "$model --rope changes the digest ($d0, $d1)" test -n "$d1" -a "$d0" != "$d1"
    check "$model --rope-theta changes the digest ($d1, $d2)" test -n "$d2" -a "$d1" != "$d2"
    same_digest "$model --rope: --save-graph then run the saved graph" \
        "$model $base --causal --rope --attn fused --save-graph $T/rope.graph" "$T/rope.graph $base --causal"
done
# each scoring flag changes the result, fused and unfused alike (within float rounding)
for model in mha "gqa --kv-heads 2"; do
    d0=$(eval digest $model $base --causal)
    for f in "--window 3" "--alibi" "--softcap 0.5" "--sinks" "--causal-top-left --kv-seq 10" \
        "--window 2 --alibi --softcap 1 --sinks --rope"; do
        fl=${f/--causal-top-left/}
        dc=$(eval digest $model $base $([ "$fl" = "$f" ] && echo --causal) $f)
        check "$model $f: accepted, another digest ($d0, $dc)" test -n "$dc" -a "$dc" != "$d0"
        rm -f "$T/of.npy" "$T/ou.npy"
        run $model $base $([ "$fl" = "$f" ] && echo --causal) $f --attn fused --output "$T/of.npy"
        run $model $base $([ "$fl" = "$f" ] && echo --causal) $f --attn unfused --output "$T/ou.npy"
        check "$model $f: fused and unfused agree" "$CHECK" close "$T/of.npy" "$T/ou.npy"
    done
    s=$(eval digest $model $base --window 3 --alibi --sinks --softcap 2 --save-graph "$T/opts.graph")
    r=$(eval digest "$T/opts.graph" $base)
    check "$model options: --save-graph then run ($s vs $r)" test -n "$s" -a "$s" = "$r"
done
check "--window implies causal: --window W == --causal --window W" test \
    "$(digest mha $base --window 3)" = "$(digest mha $base --causal --window 3)"
check "--window past T is plain causal" test \
    "$(digest mha $base --window 100)" = "$(digest mha $base --causal)"
rm -rf "$T/si_opts"
d=$(digest gqa --seq 5 --d-model 16 --heads 4 --kv-heads 2 --sinks --window 2 --save-inputs "$T/si_opts")
r=$(cd "$T/si_opts" && digest $(cat args))
check "--sinks --window: --save-inputs then run its args ($d vs $r)" test -n "$d" -a "$d" = "$r"
expect_ok "the options with --decode" gqa --seq 5 --d-model 32 --heads 4 --kv-heads 2 --window 3 \
    --sinks --alibi --softcap 5 --decode 3
check "--decode: the summary names the options" grep -qF "causal, window 3, softcap 5, alibi, sinks" "$T/out"
expect_ok "--rope with --decode" gqa --seq 5 --d-model 32 --heads 4 --kv-heads 2 --rope --decode 3
check "--decode --rope: the summary says rope" grep -qF "causal, rope theta 10000" "$T/out"
expect_ok "--rope with cross-attention" mha --seq 3 --kv-seq 8 --d-model 16 --heads 2 --rope --causal
rm -rf "$T/si_rope"
d=$(digest mha --seq 3 --d-model 8 --heads 2 --rope --rope-theta 100 --save-inputs "$T/si_rope")
r=$(cd "$T/si_rope" && digest $(cat args))
check "--rope: --save-inputs then run its args ($d vs $r)" test -n "$d" -a "$d" = "$r"
expect_error 2 "--rope-theta is for --rope: give --rope too" "--rope-theta alone" mha --rope-theta 100
expect_error 2 "--rope-theta: 'x' is not a number > 0 other than 1" "--rope-theta x" mha --rope --rope-theta x
expect_error 2 "--rope-theta: '1' is not a number > 0 other than 1" "--rope-theta 1" mha --rope --rope-theta 1
expect_error 2 "--rope does not apply to relpos" "relpos --rope" relpos --rope
expect_error 2 "--causal and --causal-top-left are two alignments: give one" "both alignments" \
    mha --causal --causal-top-left
expect_error 2 "--causal-top-left does not apply with --decode" "--causal-top-left --decode" \
    mha --causal-top-left --decode 2
expect_error 2 "--window: '0' is not" "--window 0" mha --window 0
expect_error 2 "--softcap: '-1' is not a number > 0" "--softcap -1" mha --softcap -1
expect_error 2 "--sinks does not apply to matmul" "matmul --sinks" matmul --sinks
expect_error 1 "weights.safetensors: --sinks needs the weight 'sinks' (or 'self_attn.sinks') [H]; present: w_q.weight" \
    "--sinks without a sinks weight" mha --heads 8 --weights "$FIX/mha_seed/weights.safetensors" \
    --input "$FIX/mha_seed/x.npy" --sinks
expect_error 1 "weights.safetensors: --sinks needs the weight 'sinks' (or 'self_attn.sinks') [H]; present: w_q.weight" \
    "--decode --sinks without a sinks weight" mha --heads 8 --weights "$FIX/mha_seed/weights.safetensors" \
    --input "$FIX/mha_seed/x.npy" --sinks --decode 2
# a file's sinks without --sinks: unused (strict), in a prompt and in --decode alike
run mha --seq 5 --d-model 16 --heads 4 --causal --sinks --save-inputs "$T/sk"
for dec in "" "--decode 2"; do
    # shellcheck disable=SC2086 # $dec: no flag, or two words
    expect_error 1 "1 tensor under the prefix '' is not used by mha: 'sinks'" "a file's sinks without --sinks $dec" \
        mha --heads 4 --causal --weights "$T/sk/weights.safetensors" --input "$T/sk/x.npy" $dec
done

# ---- whole layers: llama, gpt2, bert (tests/fixtures/layers, gen_layers.py) -----------------

LFIX=$FIX/layers
n_layer_cases=0
for dir in "$LFIX"/*/; do
    [ -f "$dir/args" ] || continue
    name=$(basename "$dir")
    n_layer_cases=$((n_layer_cases + 1))
    cp -r "$dir" "$T/fx/layer_$name"
    cd "$T/fx/layer_$name" || exit 2
    args=$(cat args)
    # shellcheck disable=SC2086 # the args file is split into words
    run $args --output got_out.npy --threads 3
    if [ "$rc" -eq 0 ]; then pass; else fail "layer $name: run-graph $args: exit $rc: $(cat "$T/err")"; fi
    check "layer $name: output against PyTorch" "$CHECK" close got_out.npy out.npy
    d=$(sed -n 's/^output .*xxh3 \([0-9a-f]*\).*/\1/p' "$T/out")
    check "layer $name: the printed digest is the --output bytes'" test -n "$d" -a "$d" = "$("$CHECK" xxh3 got_out.npy)"
    # the model may come after flags, as for the other models
    # shellcheck disable=SC2086
    run --threads 1 $args
    check "layer $name: MODEL after a flag, 1 thread: the same digest" grep -qF "xxh3 $d" "$T/out"
    cd "$T" || exit 2
done
check "layer fixtures found ($n_layer_cases, want 11)" test "$n_layer_cases" -ge 11
# the graph files compute the built-in layers' bytes (digests as printed)
layer_digest() { "$RG" "$@" 2>"$T/lerr" | sed -n 's/^output .*xxh3 \([0-9a-f]*\).*/\1/p'; }
for spec in "llama_gqa llama llama --heads 6 --kv-heads 2" "gpt2 gpt2 gpt2 --heads 6" \
    "bert_padding bert bert --heads 5 --valid-lens 9,5,1" "bert_padding bert bert --heads 5" \
    "llama_sinks llama llama_sinks --heads 6 --kv-heads 2"; do
    read -r case model file rest <<<"$spec"
    cd "$LFIX/$case" || exit 2
    # shellcheck disable=SC2086
    a=$(layer_digest "$model" $rest --weights weights.safetensors --input x.npy)
    # shellcheck disable=SC2086
    b=$(layer_digest "$GRAPHS/$file.graph" $rest --weights weights.safetensors --input x.npy)
    check "tools/graphs/$file.graph on $case ($rest): the built-in's digest ('$a' vs '$b')" test -n "$a" -a "$a" = "$b"
    cd "$T" || exit 2
done
# random weights and inputs, with and without a seed
check "llama on random data" "$RG" llama --seq 5 --d-model 64 --heads 4 --threads 1
check "gpt2 on random data" "$RG" gpt2 --seq 5 --d-model 64 --heads 4 --layers 2
check "bert on random data" "$RG" bert --seq 5 --d-model 64 --heads 4 --valid-lens 5,2
a=$(layer_digest llama --seq 5 --d-model 64 --heads 4 --seed 1) b=$(layer_digest llama --seq 5 --d-model 64 --heads 4 --seed 2)
check "llama: another seed, another digest ($a, $b)" test -n "$a" -a "$a" != "$b"
# bad input: a clear one-line message, exit 1 (run time) or 2 (usage), no output file
L=$LFIX
expect_error 1 "llama weights: missing model.layers.2.input_layernorm.weight" "llama: a layer missing" \
    llama --heads 6 --layers 3 --weights "$L/llama_mqa_stack2/weights.safetensors"
expect_error 1 "9 tensors not used by 1 llama layer: model.layers.1.input_layernorm.weight" \
    "llama: tensors of the file unused" llama --heads 6 --weights "$L/llama_mqa_stack2/weights.safetensors"
expect_error 1 "no gpt2 layer 0: expected ln_1.weight, h.0.ln_1.weight or transformer.h.0.ln_1.weight; present: input_layernorm.weight [48]" \
    "gpt2 on llama weights" gpt2 --heads 6 --weights "$L/llama_gqa/weights.safetensors"
expect_error 1 "llama: self_attn.k_proj.weight is f32 [16,48], expected f32 [24,48] ([G*hd, D])" \
    "llama: kv heads that do not fit k_proj" llama --heads 6 --kv-heads 3 --weights "$L/llama_gqa/weights.safetensors"
expect_error 1 "llama: d_model 48 is not divisible by heads 5" \
    "llama: heads that do not fit q_proj" llama --heads 5 --weights "$L/llama_gqa/weights.safetensors"
expect_error 1 "x is [3,9,40], but the layers of $L/llama_gqa/weights.safetensors have d_model 48" \
    "llama: input of another width" llama --heads 6 --weights "$L/llama_gqa/weights.safetensors" --input "$L/bert_padding/x.npy"
expect_error 2 "llama: give --heads" "llama: weights without --heads" llama --weights "$L/llama_gqa/weights.safetensors"
expect_error 2 "--valid-lens does not apply to llama (bert only)" "llama --valid-lens" llama --valid-lens 3,3
expect_error 2 "--rope-theta does not apply to gpt2 (llama only)" "gpt2 --rope-theta" gpt2 --rope-theta 100
expect_error 2 "--valid-lens: 2 lengths for a batch of 3" "bert: lengths for another batch" \
    bert --heads 5 --valid-lens 9,5 --weights "$L/bert_padding/weights.safetensors" --input "$L/bert_padding/x.npy"
expect_error 2 "--valid-lens: length 10 of batch row 2 is past the 9 tokens" "bert: a length past T" \
    bert --heads 5 --valid-lens 9,5,10 --weights "$L/bert_padding/weights.safetensors" --input "$L/bert_padding/x.npy"
expect_error 2 "--bogus: unknown flag for llama" "llama: an unknown flag" llama --bogus 3
expect_error 2 "gpt2: a second MODEL (the first is 'llama')" "llama gpt2" llama gpt2
expect_error 2 "--softcap: '-1' is not a finite number > 0" "llama: a negative softcap" llama --softcap -1
expect_error 1 "nonexist.safetensors: cannot open" "llama: no such weights file" llama --heads 6 --weights "$T/nonexist.safetensors"
# a file with one tensor llama does not know (and so missing the rest)
h='{"input_layernorm.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"self_attn.q_norm.weight":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
while [ $((${#h} % 8)) -ne 0 ]; do h="$h "; done
{ printf "\\x$(printf %02x $((${#h} & 255)))\\x$(printf %02x $((${#h} >> 8)))\\x00\\x00\\x00\\x00\\x00\\x00"
  printf '%s' "$h"; printf '\x00\x00\x00\x00\x00\x00\x00\x00'; } >"$T/unknown.safetensors"
expect_error 1 "; not llama weights: self_attn.q_norm.weight" "llama: an unknown tensor (Qwen3's q_norm)" \
    llama --heads 6 --weights "$T/unknown.safetensors"
check "run-graph llama --help" "$RG" llama --help
check "run-graph --help names the layers" sh -c "'$RG' --help | grep -q 'llama | gpt2 | bert'"

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
