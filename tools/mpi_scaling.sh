#!/usr/bin/env bash
# The scaling tables of docs/mpi.md ("Scaling, measured on one machine"): run-graph
# --parallel heads (and, the last four rows, --parallel context: the prompt split
# by rows, ring attention, the last also --zigzag) at P = 1 and P = 2 ranks of 1
# thread each against one process of 2 threads, on C5 (GQA B=1 T=1024 D=1024 H=16 G=4) and the
# LLaMA layer at C5's sizes (F = 2736), prompt (T = 1024) and one token
# (T = 1). Rows are interleaved: each round runs every configuration once
# (run-graph --repeat REPEAT, its median); the table gives the median over
# the rounds, and for the MPI runs the part rank 0 spent in the sums.
#   tools/mpi_scaling.sh [BUILD_DIR (build-mpi)] [ROUNDS (5)] [REPEAT (5)] [decode]
# (decode: the context-parallel decoding table instead, decode_table below)
set -euo pipefail
cd "$(dirname "$0")/.."
rg=${1:-build-mpi}/tools/run-graph
rounds=${2:-5} rep=${3:-5}
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
cases=("C5 GQA T=1024|heads|gqa --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4"
       "LLaMA layer T=1024|heads|llama --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4"
       "C5 GQA T=1|heads|gqa --batch 1 --seq 1 --d-model 1024 --heads 16 --kv-heads 4"
       "LLaMA layer T=1|heads|llama --batch 1 --seq 1 --d-model 1024 --heads 16 --kv-heads 4"
       "C5 GQA T=1024, context|context|gqa --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4"
       "C5 GQA T=1024 causal, context|context|gqa --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4 --causal"
       "LLaMA layer T=1024, context|context|llama --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4"
       "LLaMA layer T=1024, context zigzag|context|llama --batch 1 --seq 1024 --d-model 1024 --heads 16 --kv-heads 4|--zigzag")
configs=("1 process, 2 threads" "P=1 x 1 thread" "P=2 x 1 thread")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Context-parallel decoding (tools/mpi_scaling.sh BUILD ROUNDS REPEAT decode): C5's sizes,
# a prompt of 2048 then 64 tokens, run-graph --decode 64 in one process of 2 threads against
# --parallel context at P = 1 and 2 ranks of 1 thread (the KV cache sharded by position);
# interleaved rounds, ms per token (medians), and rank 0's time per token computing (its
# partial, the merge, W_o), moving (the broadcast, the gather) and waiting (the status exchange).
decode_table() {
    local args=(gqa --batch 1 --seq 2048 --d-model 1024 --heads 16 --kv-heads 4 --decode 64)
    for ((r = 0; r < rounds; r++)); do
        "$rg" "${args[@]}" --threads 2 --repeat "$rep" | awk '/^decode/ {print $4}' >>"$tmp/d.0"
        for np in 1 2; do
            "${mpi[@]}" -np "$np" "$rg" "${args[@]}" --threads 1 --repeat "$rep" --parallel context |
                awk '/^decode/ {t = $4}
                     /^comm/ {for (i = 1; i + 2 <= NF; i++) if ($(i + 1) == "ms") v[$(i + 2)] = $i
                              print t, v["moving"], v["waiting"], v["computing"]}' >>"$tmp/d.$np"
        done
    done
    local t0 t1 t2 c2 w2 k2
    t0=$(median <"$tmp/d.0")
    t1=$(cut -d' ' -f1 "$tmp/d.1" | median)
    t2=$(cut -d' ' -f1 "$tmp/d.2" | median)
    c2=$(cut -d' ' -f2 "$tmp/d.2" | median)
    w2=$(cut -d' ' -f3 "$tmp/d.2" | median)
    k2=$(cut -d' ' -f4 "$tmp/d.2" | median)
    printf '| case | 1 process, 2 threads | P=1 x 1 thread | P=2 x 1 thread | P=2 vs 2 threads | P=2 (rank 0): computing, moving, waiting |\n'
    printf '| --- | ---: | ---: | ---: | ---: | ---: |\n'
    printf '| C5 GQA decode, context 2048 + 64 | %.3f ms | %.3f ms | %.3f ms | %.2fx | %.3f, %.3f, %.3f ms |\n' \
        "$t0" "$t1" "$t2" "$(echo "$t0 / $t2" | bc -l)" "$k2" "$c2" "$w2"
    echo "(ms per token; $rounds rounds of run-graph --repeat $rep; $(uptime | sed 's/.*load/load/'))"
}
if [[ ${4:-} == decode ]]; then
    decode_table
    exit 0
fi

for ((r = 0; r < rounds; r++)); do
    for ((c = 0; c < ${#cases[@]}; c++)); do
        IFS='|' read -r _ mode rest extra <<<"${cases[c]}"
        read -ra args <<<"$rest"
        read -ra more <<<"$extra" # flags of the MPI runs only
        "$rg" "${args[@]}" --threads 2 --repeat "$rep" | awk '/^time/ {print $2}' >>"$tmp/$c.0"
        for np in 1 2; do # heads: rank 0's time in the sums and waiting before them; context: rank 0's
            "${mpi[@]}" -np "$np" "$rg" "${args[@]}" "${more[@]}" --threads 1 --repeat "$rep" --parallel "$mode" |
                awk '/^time/ {t = $2} /^sums/ {print t, $8, $13} /^ring/ {print t, $14, $25}' >>"$tmp/$c.$np"
        done
    done
done
printf '| case | %s | %s | %s | P=2 vs 2 threads | P=2: sums, waiting (rank 0); context: rank 0 waiting, the most any rank waited |\n' "${configs[@]}"
printf '| --- | ---: | ---: | ---: | ---: | ---: |\n'
for ((c = 0; c < ${#cases[@]}; c++)); do
    t0=$(median <"$tmp/$c.0")
    t1=$(cut -d' ' -f1 "$tmp/$c.1" | median)
    t2=$(cut -d' ' -f1 "$tmp/$c.2" | median)
    s2=$(cut -d' ' -f2 "$tmp/$c.2" | median)
    w2=$(cut -d' ' -f3 "$tmp/$c.2" | median)
    printf '| %s | %.3f ms | %.3f ms | %.3f ms | %.2fx | %.3f ms, %.3f ms |\n' "${cases[c]%%|*}" "$t0" "$t1" \
        "$t2" "$(echo "$t0 / $t2" | bc -l)" "$s2" "$w2"
done
echo "($rounds rounds of run-graph --repeat $rep; $(uptime | sed 's/.*load/load/'))"
