#!/usr/bin/env bash
# ggmlite_mpi as a new user gets it: installed, then used from outside the tree.
#
#   test_install_mpi.sh SRC BUILD GENERATOR CC MPIEXEC WORK
#
# BUILD (a build tree of SRC configured with -DGGMLITE_MPI=ON, its libraries
# and run-graph built) is installed into WORK/prefix. Then:
#   - the MPI part is where it should be: <ggmlite/mpi.h>, libggmlite_mpi,
#     its CMake export (ggmliteMpiTargets.cmake), ggmlite-mpi.pc;
#   - tests/install/mpi is built with find_package(ggmlite COMPONENTS mpi)
#     and, as a plain compiler command, with pkg-config ggmlite-mpi, and each
#     runs under MPIEXEC at P = 1, 2 and 3 (it checks the head-parallel
#     block's sum against the whole block);
#   - <ggmlite/mpi.h> compiles on its own with MPI's flags;
#   - a shared build's libraries, libggmlite_mpi.so with them, export
#     nothing that no installed header declares (check_exports.sh);
#   - a prefix without the MPI part (the same install, its MPI export
#     removed) refuses COMPONENTS mpi, saying so.
set -euo pipefail
if (($# != 6)); then
    echo "usage: test_install_mpi.sh SRC BUILD GENERATOR CC MPIEXEC WORK" >&2
    exit 2
fi
src=$1 build=$2 generator=$3 cc=$4 mpiexec=$5 work=$6
here=$src/tests/install/mpi
command -v pkg-config >/dev/null || { echo "test_install_mpi needs pkg-config (apt-get install pkg-config)" >&2; exit 1; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
step() { echo "== $*"; }
mpi=("$mpiexec" --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
export OMPI_MCA_mpi_yield_when_idle=1

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
step "install $build into prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
pcdir=$(dirname "$(find "$prefix" -name ggmlite-mpi.pc)")
[[ -f $pcdir/ggmlite-mpi.pc ]] || fail "no ggmlite-mpi.pc"
libdir=$(dirname "$pcdir")
[[ -f $prefix/include/ggmlite/mpi.h ]] || fail "no include/ggmlite/mpi.h"
ls "$libdir"/libggmlite_mpi.* >/dev/null 2>&1 || fail "no libggmlite_mpi in $libdir"
[[ -f $libdir/cmake/ggmlite/ggmliteMpiTargets.cmake ]] || fail "no ggmliteMpiTargets.cmake"

run() { # run NAME EXE: EXE under mpirun at P = 1, 2, 3
    for np in 1 2 3; do
        timeout 60 "${mpi[@]}" -np $np "$2" >"$work/run.log" 2>&1 || {
            cat "$work/run.log"
            fail "$1 at P=$np"
        }
        echo "$1 P=$np: $(grep -m1 matches "$work/run.log")"
    done
}

step "consumer with find_package(ggmlite COMPONENTS mpi)"
out=$work/consumer-cmake
cmake -S "$here" -B "$out" -G "$generator" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$out" >/dev/null
run cmake "$out/consumer_mpi"

step "consumer with pkg-config ggmlite-mpi"
out=$work/consumer-pc
mkdir -p "$out"
export PKG_CONFIG_PATH=$pcdir
static=()
ls "$libdir"/libggmlite_mpi.a >/dev/null 2>&1 && static=(--static)
# shellcheck disable=SC2046 # pkg-config's output is meant to be split into words
"$cc" -std=c11 -Wall -Wextra -Werror -O2 -o "$out/consumer_mpi" "$here/consumer_mpi.c" \
    $(pkg-config --cflags ggmlite-mpi) $(pkg-config "${static[@]}" --libs ggmlite-mpi) \
    -Wl,-rpath,"$libdir" -lm
run pkg-config "$out/consumer_mpi"

step "<ggmlite/mpi.h> on its own"
# shellcheck disable=SC2046
echo "#include <ggmlite/mpi.h>" | "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only \
    $(pkg-config --cflags ggmlite-mpi) -x c - || fail "<ggmlite/mpi.h> does not compile alone as C11"

if ls "$libdir"/libggmlite_mpi.so >/dev/null 2>&1; then
    step "shared: each exported symbol declared by an installed header (nm -D)"
    # shellcheck disable=SC2046
    bash "$src/tests/install/check_exports.sh" "$prefix" "$cc" $(pkg-config --cflags ggmlite-mpi)
fi
unset PKG_CONFIG_PATH

step "a prefix without the MPI part refuses COMPONENTS mpi"
cp -a "$prefix" "$work/prefix-nompi"
rm -f "$work/prefix-nompi/${libdir#"$prefix"/}"/cmake/ggmlite/ggmliteMpiTargets*.cmake
if cmake -S "$here" -B "$work/consumer-nompi" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$work/prefix-nompi" >"$work/nompi.log" 2>&1; then
    fail "find_package(ggmlite COMPONENTS mpi) succeeded without the MPI part"
fi
grep -q "component mpi: this ggmlite was built without -DGGMLITE_MPI=ON" "$work/nompi.log" || {
    cat "$work/nompi.log"
    fail "the refusal does not say why"
}
echo "refused: $(grep -m1 'component mpi' "$work/nompi.log" | sed 's/^ *//')"
echo "== test_install_mpi passed"
