#!/usr/bin/env bash
# The README's quick start. On a fresh Debian 12 machine, as root:
#   tools/quickstart.sh demo   build, and run multi-head attention with run-graph
#   tools/quickstart.sh test   build and run every test (what CI runs), also for AArch64 under qemu
#   tools/quickstart.sh bench  build and run the benchmark table (tools/bench.c)
# Each installs what it lacks with apt-get first.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_PKGS=(gcc libc6-dev cmake ninja-build libxxhash-dev libcjson-dev)
# pkg-config and g++: test_install builds a consumer with pkg-config and
# compiles the installed headers as C++ too.
TEST_PKGS=(clang libclang-rt-14-dev libomp-dev valgrind libxml2-utils pkg-config g++)
BENCH_PKGS=(libopenblas-dev) # the reference the benchmark measures against
MPI_PKGS=(openmpi-bin libopenmpi-dev) # run-graph --parallel heads|context (-DGGMLITE_MPI=ON)
# The AArch64 cross build and qemu-user to run its tests; the libraries it
# links are Debian's arm64 packages (multiarch: see add_arm64).
ARM64_PKGS=(gcc-aarch64-linux-gnu qemu-user libxxhash-dev:arm64 libcjson-dev:arm64)
JOBS=$(nproc)
# The gcc Release build (build/): the demo's, the benchmark's and the tests'
# first; `test` also configures it with MPI and then with OpenMP (the
# options are given each time, so each use gets what it asks for).
RELEASE=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DGGMLITE_OPENMP=OFF -DGGMLITE_MPI=OFF)

install_missing() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "== installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# add_arm64: lets dpkg install arm64 packages beside the machine's own
# (install_missing then updates the package lists, arm64's included).
add_arm64() {
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
}

# build DIR [cmake options...]: configure and build into DIR.
build() {
    local dir=$1
    shift
    cmake -S . -B "$dir" -G Ninja -DGGMLITE_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

# check NAME DIR [cmake options...] [-- ctest options...]: build into DIR and
# run its tests (those the ctest options select).
check() {
    local name=$1 dir=$2 opts=() sel=()
    shift 2
    while (($#)) && [[ $1 != -- ]]; do opts+=("$1"); shift; done
    (($#)) && shift && sel=("$@")
    echo "== $name"
    SECONDS=0
    build "$dir" "${opts[@]}"
    ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --timeout 300 "${sel[@]}"
    echo "== $name: $SECONDS s"
}

# memcheck TEST...: valgrind over small runs of some tests of the release
# build, all at once (valgrind runs a program's threads one at a time, on
# one core); each one's output in build/memcheck-TEST.log.
memcheck() {
    echo "== valgrind memcheck"
    local t pids=() i=0 failed=0
    for t in "$@"; do
        valgrind -q --error-exitcode=1 --leak-check=full "build/tests/$t" quick >"build/memcheck-$t.log" 2>&1 &
        pids+=($!)
    done
    for t in "$@"; do
        if wait "${pids[$i]}"; then
            echo "-- $t: no error"
        else
            tail -n 40 "build/memcheck-$t.log"
            echo "-- $t failed under valgrind (log: build/memcheck-$t.log)" >&2
            failed=1
        fi
        i=$((i + 1))
    done
    return $failed
}

# mpi: the Release build again, with -DGGMLITE_MPI=ON (it only adds targets:
# ggmlite_mpi, run-graph's --parallel modes and the MPI tests, so the rest
# is not compiled again), what the MPI tests run (run-graph, mpi_check,
# loading_files, the in-process tests test_tp, test_shard, test_ring and
# test_mpi_misuse, and test_mpi_weights, which mpirun starts), and those
# tests (label mpi: mpirun at P = 1..4 and 7; test_install_mpi).
mpi() {
    echo "== mpi (gcc, Open MPI)"
    cmake -S . -B build -G Ninja -DGGMLITE_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=gcc -DGGMLITE_OPENMP=OFF -DGGMLITE_MPI=ON >/dev/null
    cmake --build build -j "$JOBS" --target run-graph mpi_check loading_files test_tp test_shard test_ring \
        test_mpi_misuse test_mpi_weights
    ctest --test-dir build -L mpi -j "$JOBS" --output-on-failure --timeout 300
}

# arm64: the Release build cross-compiled for AArch64 (cmake/aarch64-linux-gnu.cmake:
# NEON kernels, scalar and reference ones beside them) into build-arm64, and
# its tests run under qemu-aarch64 (speed is not measured: qemu emulates):
# every C test (each kernel family's NEON variants against the reference,
# test_kernels asserting that every family ran its NEON kernel), the shell
# tests that compute through run-graph (int8, bf16, the README), not the
# label cli (run-graph's parsing, messages and files: portable C, run in
# the native builds) nor test_amx_bf16 (x86's AMX kernel on the C tile
# emulation, which AArch64 never runs: 15 s under qemu, the native stages
# run it; its --opt-in run, that nothing picks AMX here, stays).
arm64() {
    check "aarch64 release (cross gcc, tests under qemu-user)" build-arm64 -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -- -LE '^cli$' -E '^test_amx_bf16$'
}

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# fuzz_one DIR NAME: runs one fuzzer on a copy of its corpus; its log in
# DIR/NAME.log.
fuzz_one() {
    local dir=$1 name=$2 dict=()
    rm -rf "$dir/corpus/$name" "$dir/artifacts/$name"
    mkdir -p "$dir/corpus/$name" "$dir/artifacts/$name"
    cp tests/fuzz/corpus/"$name"/* "$dir/corpus/$name/"
    [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
    "$dir/fuzz/$name" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=5 -rss_limit_mb=2048 \
        -artifact_prefix="$dir/artifacts/$name/" "$dir/corpus/$name" >"$dir/$name.log" 2>&1
}
# fuzz_wait DIR NAME...: waits for the fuzzers started last (FUZZ_PIDS), in
# order, and says how each went; 1 if one failed.
fuzz_wait() {
    local dir=$1 name i=0 failed=0
    shift
    for name in "$@"; do
        if wait "${FUZZ_PIDS[$i]}"; then
            echo "$name: $(grep -o 'Done [0-9]* runs' "$dir/$name.log"), no crash"
        else
            tail -n 40 "$dir/$name.log"
            echo "$name failed: reproducer in $dir/artifacts/$name/, log in $dir/$name.log" >&2
            failed=1
        fi
        i=$((i + 1))
    done
    FUZZ_PIDS=()
    return $failed
}
# fuzz: the libFuzzer targets (tests/fuzz; nothing else) into build-fuzz,
# each run for FUZZ_SECONDS on a copy of its seed corpus, so the repository's
# corpus stays as it is. Any crash, leak, timeout or out-of-memory fails.
# fuzz_diff, whose computes use 2-4 threads, runs alone; the file fuzzers
# (one thread each) JOBS at a time: each fuzzer gets its seconds of a core.
fuzz() {
    local dir=build-fuzz name fuzzers=() batch=()
    echo "== fuzz (clang, libFuzzer + ASan + UBSan, ${FUZZ_SECONDS} s each)"
    for name in tests/fuzz/corpus/fuzz_*; do fuzzers+=("$(basename "$name")"); done
    # Debug (-O0): clang -O2 with ASan, UBSan and coverage spends minutes
    # on each SIMD flash-attention object; the fuzzers run slower at -O0,
    # which costs executions, not coverage of the parsers.
    cmake -S . -B "$dir" -G Ninja -DGGMLITE_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_COMPILER=clang -DGGMLITE_FUZZ=ON -DGGMLITE_TESTS=OFF >/dev/null
    cmake --build "$dir" -j "$JOBS" --target "${fuzzers[@]}" >/dev/null
    FUZZ_PIDS=()
    for name in "${fuzzers[@]}"; do
        if [[ $name == fuzz_diff ]]; then
            fuzz_one "$dir" "$name" &
            FUZZ_PIDS=($!)
            fuzz_wait "$dir" "$name" || return 1
            continue
        fi
        fuzz_one "$dir" "$name" &
        FUZZ_PIDS+=($!)
        batch+=("$name")
        if ((${#batch[@]} == JOBS)); then
            fuzz_wait "$dir" "${batch[@]}" || return 1
            batch=()
        fi
    done
    ((${#batch[@]} == 0)) || fuzz_wait "$dir" "${batch[@]}"
}

case "${1:-}" in
demo)
    install_missing "${BUILD_PKGS[@]}"
    build build "${RELEASE[@]}" >/dev/null
    echo "== run-graph mha --seq 10 --d-model 512 --heads 8 --causal"
    ./build/tools/run-graph mha --seq 10 --d-model 512 --heads 8 --causal
    ;;
test)
    start=$(date +%s)
    add_arm64
    install_missing "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${MPI_PKGS[@]}" "${ARM64_PKGS[@]}"
    check "release (gcc)" build "${RELEASE[@]}"
    memcheck test_plan test_threads test_concurrency
    mpi
    # The same build once more with -DGGMLITE_OPENMP=ON: only ggmlite's core
    # (its compute) is compiled again, the rest relinked. OpenMP threads that
    # spin while waiting crawl on a busy 2-core machine: let them sleep.
    # Its tests leave out the CLI's (label cli) and the install test (label
    # install: the same files installed again, as in the release stage).
    OMP_WAIT_POLICY=passive check "openmp (gcc)" build -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=gcc -DGGMLITE_OPENMP=ON -DGGMLITE_MPI=OFF -- -LE '^(cli|install)$'
    # test_cli_help only compares the help pages' text (the release stage
    # runs it); under ASan each of its hundreds of runs costs a start-up.
    check "asan+ubsan (clang)" build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
        -DGGMLITE_SANITIZE=ON -- -E '^test_cli_help$'
    arm64
    fuzz
    echo "== all tests passed in $(($(date +%s) - start)) s"
    ;;
bench)
    install_missing "${BUILD_PKGS[@]}" "${BENCH_PKGS[@]}"
    build build "${RELEASE[@]}" >/dev/null
    ./build/tools/bench
    ;;
*)
    echo "usage: tools/quickstart.sh demo|test|bench" >&2
    exit 2
    ;;
esac
