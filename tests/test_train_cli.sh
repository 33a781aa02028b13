#!/usr/bin/env bash
# run-graph train on the PyTorch training curves of tests/fixtures/train
# (gen_train.py), each case as its args file says:
#   - --log against losses.npy (1e-4 relative), --save-weights against
#     final.safetensors (1e-4 + 1e-3 |w|), --grads against grads0.safetensors;
#   - the same bits at 1, 2, 3 and 7 threads; --steps N gives the first N losses;
#   - a line per step on stderr; --json's keys and no lines;
#   - the errors, each one "run-graph: " line naming what is wrong, and no
#     output file left: token ids outside [0, V) (int32 and int64, naming the
#     id, where it is and V), TOKENS not 3-D (naming the file and its shape),
#     --steps past the data, a loss that overflows after --grads was written,
#     and the usage errors of the flags.
# usage: test_train_cli.sh RUN_GRAPH TRAIN_CHECK FIXTURES/train
set -u
RG=$(realpath "$1") TC=$(realpath "$2") FIX=$(realpath "$3")
T=$(mktemp -d /tmp/test_train_cli.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT

n_checks=0 n_failed=0
pass() { n_checks=$((n_checks + 1)); }
fail() {
    n_checks=$((n_checks + 1)) n_failed=$((n_failed + 1))
    echo "FAIL: $*" >&2
}
# check DESCRIPTION COMMAND...: the command succeeds.
check() {
    local desc=$1
    shift
    if "$@" >"$T/check.out" 2>&1; then pass; else fail "$desc: $(head -c 600 "$T/check.out")"; fi
}
# run ARGS...: run-graph in the current directory, stdout in $T/out, stderr in $T/err.
run() {
    "$RG" "$@" >"$T/out" 2>"$T/err"
    rc=$?
}
# expect_error STATUS SUBSTRING DESCRIPTION ARGS...: one "run-graph: " line on
# stderr holding SUBSTRING, that exit status, nothing on stdout, and none of
# the output files out.* in $T/o.
expect_error() {
    local status=$1 sub=$2 desc=$3
    shift 3
    run "$@"
    if [ "$rc" -ne "$status" ]; then
        fail "$desc: exit $rc, expected $status: $(cat "$T/err")"
    elif [ "$(grep -c '^run-graph: ' "$T/err")" -ne 1 ] || ! tail -n 1 "$T/err" | grep -q '^run-graph: '; then
        fail "$desc: stderr does not end in one 'run-graph: ' line: $(cat "$T/err")"
    elif ! grep -qF -- "$sub" "$T/err"; then
        fail "$desc: expected \"$sub\" in: $(cat "$T/err")"
    elif [ -s "$T/out" ]; then
        fail "$desc: printed to stdout: $(head -c 300 "$T/out")"
    elif [ -n "$(ls -A "$T/o")" ]; then
        fail "$desc: left files: $(ls -A "$T/o")"
    else
        pass
    fi
}
mkdir -p "$T/o"

# ---- every case against PyTorch --------------------------------------------------
while read -r case; do
    cd "$FIX/$case" || { fail "$case: no folder"; continue; }
    read -r -a args <args
    for th in 1 2 3 7; do
        o="$T/$case.$th"
        run "${args[@]}" --threads "$th" --log "$o.log.npy" --save-weights "$o.w.safetensors" \
            --grads "$o.g.safetensors"
        if [ "$rc" -ne 0 ]; then
            fail "$case, $th threads: exit $rc: $(cat "$T/err")"
            continue
        fi
        pass
        if [ "$th" = 1 ]; then
            check "$case: losses" "$TC" losses "$o.log.npy" losses.npy
            echo "$case: losses $(cat "$T/check.out")"
            check "$case: final weights" "$TC" weights "$o.w.safetensors" final.safetensors 1e-4 1e-3
            echo "$case: final weights $(cat "$T/check.out")"
            check "$case: first-step gradients" "$TC" grads "$o.g.safetensors" grads0.safetensors
            echo "$case: gradients $(cat "$T/check.out")"
            n_steps=$(grep -c '^step [0-9]*/[0-9]*  loss [0-9.]*  [0-9.]* ms  [0-9]* tokens/s$' "$T/err")
            check "$case: a line per step on stderr ($n_steps)" test "$n_steps" -gt 0 -a \
                "$n_steps" = "$(grep -c . "$T/err")"
            check "$case: the summary" grep -q "^train ${args[1]}: $n_steps steps of B=" "$T/out"
        else
            check "$case, $th threads: the losses' bits" cmp -s "$o.log.npy" "$T/$case.1.log.npy"
            check "$case, $th threads: the weights' bits" "$TC" same "$o.w.safetensors" "$T/$case.1.w.safetensors"
            check "$case, $th threads: the gradients' bits" "$TC" same "$o.g.safetensors" "$T/$case.1.g.safetensors"
        fi
    done
done <"$FIX/CASES"

cd "$FIX/gpt2_adamw" || exit 2
read -r -a args <args
# --steps 2: the first two losses
run "${args[@]}" --threads 2 --steps 2 --log "$T/two.npy"
check "--steps 2 runs: $(cat "$T/err")" test "$rc" = 0
check "--steps 2: the first two losses" "$TC" prefix "$T/two.npy" "$T/gpt2_adamw.1.log.npy"
# --json: one object with its keys, no line per step
run "${args[@]}" --threads 2 --json
check "--json runs: $(cat "$T/err")" test "$rc" = 0 -a ! -s "$T/err"
for key in '"losses":\[' '"median_ms":' '"tokens_per_s":' '"model":"gpt2"' '"steps":4' '"batch":2' '"seq":7'; do
    check "--json has $key" grep -q "$key" "$T/out"
done
check "--json is one line" test "$(wc -l <"$T/out")" = 1

# ---- errors: nothing written -------------------------------------------------------
outs=(--log "$T/o/out.npy" --save-weights "$T/o/out.safetensors" --grads "$T/o/out.g.safetensors")
"$TC" tokens "$T/bad32.npy" i32 37 4 2 8 11 37
expect_error 1 "token id 37 at [0, 1, 3] is outside [0, V) (V = 37" "an id = V (int32)" \
    "${args[@]}" --data "$T/bad32.npy" "${outs[@]}"
"$TC" tokens "$T/bad64.npy" i64 37 4 2 8 40 -5
expect_error 1 "token id -5 at [2, 1, 0] is outside [0, V) (V = 37" "a negative id (int64)" \
    "${args[@]}" --data "$T/bad64.npy" "${outs[@]}"
"$TC" tokens "$T/huge64.npy" i64 37 4 2 8 63 5000000000
expect_error 1 "token id 5000000000 at [3, 1, 7]" "an int64 id past int32" \
    "${args[@]}" --data "$T/huge64.npy" "${outs[@]}"
"$TC" tokens "$T/good64.npy" i64 37 3 2 8
run "${args[@]}" --data "$T/good64.npy" --threads 1 --log "$T/g64.npy"
"$TC" tokens "$T/good32.npy" i32 37 3 2 8
run "${args[@]}" --data "$T/good32.npy" --threads 1 --log "$T/g32.npy"
check "int64 and int32 tokens train alike" cmp -s "$T/g64.npy" "$T/g32.npy"
"$TC" tokens "$T/flat.npy" i32 37 4 8 0
expect_error 1 "$T/flat.npy: the token ids are int32 [4,8]; expected 3-D [S, B, T+1]" "2-D tokens" \
    "${args[@]}" --data "$T/flat.npy" "${outs[@]}"
expect_error 1 "the token ids are f32" "f32 tokens" "${args[@]}" --data "$FIX/gpt2_adamw/losses.npy" "${outs[@]}"
"$TC" tokens "$T/one.npy" i32 37 4 2 1
expect_error 1 "T >= 1" "a window of one token" "${args[@]}" --data "$T/one.npy" "${outs[@]}"
expect_error 1 "--steps 5: --data tokens.npy holds 4 steps" "--steps past the data" "${args[@]}" --steps 5 "${outs[@]}"
"$TC" tokens "$T/long.npy" i32 37 2 1 13
expect_error 1 "seq 12 is longer than the position table (wpe.weight has 11 rows)" "T past wpe" \
    "${args[@]}" --data "$T/long.npy" "${outs[@]}"
# a loss that overflows at the second step, after --grads was staged
expect_error 1 "step 2:" "a diverging run" train gpt2 --weights init.safetensors --data tokens.npy --heads 2 \
    --optimizer sgd --lr 1e30 "${outs[@]}"
expect_error 1 "--weights $T/none.safetensors" "a missing weights file" train gpt2 --weights "$T/none.safetensors" \
    --data tokens.npy --heads 2 --optimizer sgd --lr 0.1 "${outs[@]}"
expect_error 1 "--weights init.safetensors" "llama's names in a gpt2 file" train llama --weights init.safetensors \
    --data tokens.npy --heads 2 --optimizer sgd --lr 0.1 "${outs[@]}"

# usage errors (status 2)
base=(train gpt2 --weights init.safetensors --data tokens.npy --heads 2)
expect_error 2 "train gpt2: --lr LR is required" "no --lr" "${base[@]}" --optimizer sgd "${outs[@]}"
expect_error 2 "train gpt2: --optimizer adamw|sgd is required" "no --optimizer" "${base[@]}" --lr 1 "${outs[@]}"
expect_error 2 "--data TOKENS.npy is required" "no --data" train gpt2 --weights init.safetensors --heads 2 \
    --optimizer sgd --lr 1 "${outs[@]}"
expect_error 2 "--optimizer: 'adam' is not adamw or sgd" "a bad optimizer" "${base[@]}" --optimizer adam --lr 1
expect_error 2 "--betas is AdamW's" "--betas with sgd" "${base[@]}" --optimizer sgd --lr 1 --betas 0.9,0.99
expect_error 2 "--momentum is SGD's" "--momentum with adamw" "${base[@]}" --optimizer adamw --lr 1 --momentum 0.9
expect_error 2 "--betas: '0.9' is not two numbers in [0, 1)" "one beta" "${base[@]}" --optimizer adamw --lr 1 --betas 0.9
expect_error 2 "--betas: '0.9,1' is not two numbers in [0, 1)" "beta2 = 1" "${base[@]}" --optimizer adamw --lr 1 --betas 0.9,1
expect_error 2 "--lr: '-1' is not a finite number >= 0" "a negative lr" "${base[@]}" --optimizer sgd --lr -1
expect_error 2 "--clip-grad-norm: '0' is not a finite number > 0" "clip 0" "${base[@]}" --optimizer sgd --lr 1 --clip-grad-norm 0
expect_error 2 "--kv-heads is for train llama" "--kv-heads with gpt2" "${base[@]}" --optimizer sgd --lr 1 --kv-heads 1
expect_error 2 "--causal does not apply to train" "--causal" "${base[@]}" --optimizer sgd --lr 1 --causal
expect_error 2 "train: 'bert' is not a model run-graph trains: gpt2 or llama" "bert" train bert --heads 2
expect_error 2 "train: give the model to train: gpt2 or llama" "no model" train --heads 2
expect_error 2 "given for two outputs (--log" "one file twice" "${base[@]}" --optimizer sgd --lr 1 \
    --log "$T/o/x.npy" --grads "$T/o/x.npy"
run train --help
check "train --help" test "$rc" = 0
check "train --help lists --clip-grad-norm" grep -q -- "--clip-grad-norm C" "$T/out"
check "train --help's usage line" grep -q "^usage: run-graph train gpt2|llama" "$T/out"
run --help
check "run-graph --help names train" grep -q "train gpt2|llama" "$T/out"

echo "test_train_cli: $n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
