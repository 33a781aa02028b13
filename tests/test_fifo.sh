#!/usr/bin/env bash
# A FIFO (and a device, a directory, a socket) named as any file run-graph
# reads is refused at once, never waited on: run-graph opens no file that is
# not regular (ggmlite/io/file.c). Each role, under `timeout` (a run that
# has not ended after 20 s is a hang, a failure): exit status 1, and the
# last stderr line "run-graph: <path>: is a FIFO, not a regular file".
# Roles: --weights (a safetensors file, an index .json, a shard an index
# names) of mha and of the layers, --input, --query, --key, --value,
# --attn-mask, --key-padding-mask, --bind, a graph file as MODEL.
# usage: test_fifo.sh RUN_GRAPH LOADING_FILES SOURCE_DIR
set -u
RG=$(realpath "$1") MK=$(realpath "$2") SRC=$(realpath "$3")
T=$(mktemp -d /tmp/test_fifo.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2
n_checks=0 n_failed=0
fail() {
    n_failed=$((n_failed + 1))
    echo "FAIL: $*" >&2
}

# refused DESCRIPTION SUBSTRING ARGS...: run-graph ARGS ends within 20 s,
# exit 1, its last stderr line "run-graph: ..." holding SUBSTRING
refused() {
    local desc=$1 sub=$2
    shift 2
    n_checks=$((n_checks + 1))
    timeout 20 "$RG" "$@" >out 2>err </dev/null
    local rc=$?
    if [ "$rc" -eq 124 ]; then
        fail "$desc: still running after 20 s (blocked on the FIFO?)"
    elif [ "$rc" -ne 1 ]; then
        fail "$desc: exit $rc, expected 1: $(cat err)"
    elif ! tail -n 1 err | grep -q '^run-graph: ' || ! tail -n 1 err | grep -qF -- "$sub"; then
        fail "$desc: expected \"$sub\" in: $(cat err)"
    fi
}

mkfifo fifo fifo.json fifo.graph || exit 2
X=$SRC/tests/fixtures/loading/builtin_seqfirst/x.npy # [5, 2, 16]: with --seq-first
W=$SRC/tests/fixtures/loading/builtin_seqfirst/weights.safetensors
L=$SRC/tests/fixtures/layers/llama_gqa
F="is a FIFO, not a regular file"
M="mha --heads 4 --seq-first"

refused "mha --weights" "fifo: $F" $M --input "$X" --weights fifo
refused "mha --weights, an index" "fifo.json: $F" $M --input "$X" --weights fifo.json
mkdir shards
"$MK" st-shard "$W" shards "" || exit 2
rm shards/model-00002-of-00002.safetensors
mkfifo shards/model-00002-of-00002.safetensors
refused "a shard of an index" "shards/model-00002-of-00002.safetensors: $F" \
    $M --input "$X" --weights shards/model.safetensors.index.json
refused "mha --input" "fifo: $F" $M --weights "$W" --input fifo
refused "mha --query" "fifo: $F" $M --weights "$W" --query fifo
refused "mha --key" "fifo: $F" $M --weights "$W" --query "$X" --key fifo
refused "mha --value" "fifo: $F" $M --weights "$W" --query "$X" --key "$X" --value fifo
refused "--attn-mask" "fifo: $F" $M --input "$X" --attn-mask fifo
refused "--key-padding-mask" "fifo: $F" $M --input "$X" --key-padding-mask fifo
refused "a graph file" "fifo.graph: $F" fifo.graph
refused "a graph file's --bind" "fifo: $F" "$SRC/tools/graphs/mha.graph" --heads 4 --input "$X" --seq-first --bind x=fifo
refused "matmul --bind" "fifo: $F" matmul --bind a=fifo
for layer in llama gpt2 bert; do
    refused "$layer --weights" "fifo: $F" $layer --heads 6 --weights fifo
    refused "$layer --weights, an index" "fifo.json: $F" $layer --heads 6 --weights fifo.json
    refused "$layer --input" "fifo: $F" $layer --heads 6 --input fifo
done
refused "llama --weights, a shard of an index" "shards/model-00002-of-00002.safetensors: $F" \
    llama --heads 6 --input "$L/x.npy" --weights shards/model.safetensors.index.json
# the other files that are not regular
refused "a character device" "/dev/null: is a character device, not a regular file" \
    $M --weights "$W" --input /dev/null
mkdir adir
refused "a directory" "adir: is a directory, not a regular file" llama --heads 6 --weights adir
if command -v python3 >/dev/null &&
    python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")' 2>/dev/null; then
    refused "a socket" "sock: is a socket, not a regular file" $M --weights "$W" --input sock
fi

echo "$n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
