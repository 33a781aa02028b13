#!/usr/bin/env bash
# run-graph's --help pages against its parse: every flag a page lists is
# accepted by the modes the page names for it (a flag followed by
# "[mha, gqa]" by those models, else by every model of the page). Pages:
#   - run-graph --help: mha, gqa, relpos, matmul, a graph file;
#   - run-graph llama --help: llama, gpt2, bert;
#   - with MPIEXEC (an MPI build): --parallel heads, context and context
#     --decode, under mpirun with one rank: all of a page's flags in one run
#     (the parse reads them in order and refuses the first it does not take),
#     ended by --help for heads and context (nothing computed).
# Accepted: not refused as an unknown flag, as a flag that does not apply to
# the mode, or as not a flag of the --parallel mode; the run may still fail
# for another reason (its file does not exist, --max-len without --decode).
# --parallel itself is a mode, checked by the --parallel pages.
# usage: test_cli_help.sh RUN_GRAPH SOURCE_DIR [MPIEXEC]
set -u
RG=$(realpath "$1") SRC=$(realpath "$2") MPIEXEC=${3:-}
T=$(mktemp -d /tmp/test_cli_help.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
n_checks=0 n_failed=0
fail() {
    n_failed=$((n_failed + 1))
    echo "FAIL: $*" >&2
}
mpi=()
if [ -n "$MPIEXEC" ]; then
    mpi=("$MPIEXEC" --oversubscribe -np 1)
    [ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
fi

# A value the flag's parse accepts.
value() {
    case $1 in
    --attn) echo unfused ;;
    --cache-dtype | --weights-dtype) echo f32 ;;
    --isa) echo scalar ;;
    --bind) echo "x=$T/none.npy" ;;
    --tokens | --query-tokens | --prefix) echo a ;;
    --rope-theta) echo 2 ;;
    --max-rel | --attn-batch) echo 0 ;;
    --weights | --input | --query | --key | --value | --attn-mask | --key-padding-mask) echo "$T/none.npy" ;;
    --output | --attn-weights) echo "$T/out.npy" ;;
    --attn-svg) echo "$T/out.svg" ;;
    --dot) echo "$T/out.dot" ;;
    --save-graph) echo "$T/out.graph" ;;
    --save-inputs) echo "$T/inputs" ;;
    *) echo 1 ;;
    esac
}

# The page's entries, one a line: "FLAG TAKES_VALUE MODES" (MODES: the
# bracketed names joined by ',', or "-" for every mode of the page).
entries() {
    awk '
        function flush() {
            if (name == "") return
            modes = "-"
            if (match(text, /\[[^]]*\]$/)) {
                modes = substr(text, RSTART + 1, RLENGTH - 2)
                gsub(/, /, ",", modes)
                gsub(/ /, "_", modes)
            }
            print name, arg, modes
            name = ""
        }
        /^  --/ {
            flush()
            name = $1
            arg = split(substr($0, 3, 22), w, " ") > 1 ? 1 : 0 # the flag and its value: columns 3..24
            text = $0
            next
        }
        /^                         [^ ]/ && name != "" { sub(/^ +/, ""); text = text " " $0; next }
        { flush() }
        END { flush() }'
}

# check_page PAGE_NAME "MODES OF THE PAGE" HELP_COMMAND...: every entry
# against `run MODE FLAG [VALUE]` (run: a function of the page).
check_page() {
    local page=$1 all=$2
    shift 2
    if ! "$@" >"$T/help" 2>"$T/help.err"; then
        fail "$page: $* failed: $(head -c 300 "$T/help.err")"
        return
    fi
    local n=0 flag takes modes mode
    while read -r flag takes modes; do
        [ "$flag" = --parallel ] && continue
        n=$((n + 1))
        [ "$modes" = - ] && modes=$all
        for mode in ${modes//,/ }; do
            local args=("$flag")
            [ "$takes" = 1 ] && args+=("$(value "$flag")")
            n_checks=$((n_checks + 1))
            run_"$page" "${mode//_/ }" "${args[@]}" >"$T/out" 2>"$T/err" </dev/null
            if grep -qE 'unknown flag|does not apply|not a flag of' "$T/err"; then
                fail "$page: $flag is listed for $mode, refused: $(head -n 1 "$T/err")"
            fi
        done
    done < <(entries <"$T/help")
    [ "$n" -ge 3 ] || fail "$page: only $n flags found in its --help"
    echo "$page: $n flags"
}

# Small sizes, one thread: what a flag does not set runs quickly.
SMALL=(--batch 1 --seq 2 --d-model 8 --heads 2 --threads 1)
run_single() {
    case $1 in
    matmul) "$RG" matmul --m 2 --n 2 --k 2 --threads 1 "${@:2}" ;;
    "graph files") "$RG" "$SRC/tools/graphs/gqa.graph" "${SMALL[@]}" --kv-heads 1 "${@:2}" ;;
    *) "$RG" "$1" "${SMALL[@]}" "${@:2}" ;;
    esac
}
run_layer() { "$RG" "$1" "${SMALL[@]}" "${@:2}"; }
check_page single "mha,gqa,relpos,matmul,graph_files" "$RG" --help
check_page layer "llama,gpt2,bert" "$RG" llama --help

# check_parallel PAGE ARGS...: every flag of the page's --help (`run-graph gqa
# ARGS --help`) in one run of `run-graph gqa FLAGS... ARGS` under mpirun; gqa
# takes every flag mha takes (--kv-heads too).
check_parallel() {
    local page=$1
    shift
    if ! timeout 60 "${mpi[@]}" "$RG" gqa "$@" --help >"$T/help" 2>"$T/help.err"; then
        fail "$page: its --help failed: $(head -c 300 "$T/help.err")"
        return
    fi
    local args=() n=0 flag takes modes
    while read -r flag takes modes; do
        case $flag in --parallel | --help) continue ;; esac
        n=$((n + 1))
        args+=("$flag")
        [ "$takes" = 1 ] && args+=("$(value "$flag")")
    done < <(entries <"$T/help")
    n_checks=$((n_checks + n))
    # heads and context stop at --help once the flags before it are read
    local end=(--help)
    [ "$page" = decode ] && end=() # its --help is read before any flag
    timeout 60 "${mpi[@]}" "$RG" gqa "${SMALL[@]}" "${args[@]}" "${end[@]}" "$@" >"$T/out" 2>"$T/err" </dev/null
    if grep -qE 'unknown flag|does not apply|not a flag of' "$T/err"; then
        fail "$page: a flag its --help lists is refused: $(grep -m1 -E 'unknown flag|does not apply|not a flag of' "$T/err")"
    fi
    [ "$n" -ge 3 ] || fail "$page: only $n flags found in its --help"
    echo "$page: $n flags"
}

if [ -n "$MPIEXEC" ]; then
    check_parallel heads --parallel heads
    check_parallel context --parallel context
    check_parallel decode --decode 1 --parallel context
fi

echo "test_cli_help: $n_checks checks, $n_failed failed"
[ "$n_failed" -eq 0 ]
