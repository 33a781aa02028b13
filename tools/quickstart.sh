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

# check NAME DIR [cmake options...]: build into DIR and run its tests.
check() {
    local name=$1 dir=$2
    shift 2
    echo "== $name"
    build "$dir" "$@"
    ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --timeout 300
}

# memcheck TEST...: valgrind over small runs of some tests of the release build.
memcheck() {
    echo "== valgrind memcheck"
    local t
    for t in "$@"; do
        echo "-- $t"
        valgrind -q --error-exitcode=1 --leak-check=full "build/tests/$t" quick >/dev/null
    done
}

# mpi: one more Release build, with -DGGMLITE_MPI=ON, of what the MPI tests run
# (run-graph, mpi_check, loading_files, the in-process tests test_tp, test_shard,
# test_ring and test_mpi_misuse, and test_mpi_weights, which mpirun starts), and
# those tests (label mpi: mpirun at P = 1..4 and 7; test_install_mpi).
mpi() {
    echo "== mpi (gcc, Open MPI)"
    cmake -S . -B build-mpi -G Ninja -DGGMLITE_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=gcc -DGGMLITE_MPI=ON >/dev/null
    cmake --build build-mpi -j "$JOBS" --target run-graph mpi_check loading_files test_tp test_shard test_ring \
        test_mpi_misuse test_mpi_weights
    ctest --test-dir build-mpi -L mpi -j "$JOBS" --output-on-failure --timeout 300
}

# arm64: the Release build cross-compiled for AArch64 (cmake/aarch64-linux-gnu.cmake:
# NEON kernels, scalar and reference ones beside them) into build-arm64, and
# its tests run under qemu-aarch64 (speed is not measured: qemu emulates).
arm64() {
    check "aarch64 release (cross gcc, tests under qemu-user)" build-arm64 -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
}

# fuzz: builds the libFuzzer targets (tests/fuzz) into build-fuzz and runs
# each for FUZZ_SECONDS on a copy of its seed corpus, so the repository's
# corpus stays as it is. Any crash, leak, timeout or out-of-memory fails.
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
fuzz() {
    local dir=build-fuzz fuzzer name
    echo "== fuzz (clang, libFuzzer + ASan + UBSan, ${FUZZ_SECONDS} s each)"
    build "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DGGMLITE_FUZZ=ON \
        -DGGMLITE_TESTS=OFF >/dev/null
    for fuzzer in "$dir"/fuzz/fuzz_*; do
        name=$(basename "$fuzzer")
        rm -rf "$dir/corpus/$name" "$dir/artifacts/$name"
        mkdir -p "$dir/corpus/$name" "$dir/artifacts/$name"
        cp tests/fuzz/corpus/"$name"/* "$dir/corpus/$name/"
        local dict=()
        [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
        if ! "$fuzzer" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=5 -rss_limit_mb=2048 \
            -artifact_prefix="$dir/artifacts/$name/" "$dir/corpus/$name" >"$dir/$name.log" 2>&1; then
            tail -n 40 "$dir/$name.log"
            echo "$name failed: reproducer in $dir/artifacts/$name/, log in $dir/$name.log" >&2
            return 1
        fi
        echo "$name: $(grep -o 'Done [0-9]* runs' "$dir/$name.log"), no crash"
    done
}

case "${1:-}" in
demo)
    install_missing "${BUILD_PKGS[@]}"
    build build -DCMAKE_BUILD_TYPE=Release >/dev/null
    echo "== run-graph mha --seq 10 --d-model 512 --heads 8 --causal"
    ./build/tools/run-graph mha --seq 10 --d-model 512 --heads 8 --causal
    ;;
test)
    add_arm64
    install_missing "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${MPI_PKGS[@]}" "${ARM64_PKGS[@]}"
    check "release (gcc)" build -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc
    check "asan+ubsan (clang)" build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
        -DGGMLITE_SANITIZE=ON
    # OpenMP threads that spin while waiting crawl on a busy 2-core machine: let them sleep.
    OMP_WAIT_POLICY=passive check "openmp (gcc)" build-omp -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=gcc -DGGMLITE_OPENMP=ON
    memcheck test_plan test_threads test_concurrency
    mpi
    arm64
    fuzz
    echo "== all tests passed"
    ;;
bench)
    install_missing "${BUILD_PKGS[@]}" "${BENCH_PKGS[@]}"
    build build -DCMAKE_BUILD_TYPE=Release >/dev/null
    ./build/tools/bench
    ;;
*)
    echo "usage: tools/quickstart.sh demo|test|bench" >&2
    exit 2
    ;;
esac
