#!/usr/bin/env bash
# ggmlite as a new user gets it: installed, then used from outside the tree.
#
#   test_install.sh SRC BUILD GENERATOR CC SHARED OPENMP WORK [LAUNCHER]
#
# BUILD (a build tree of SRC, SHARED ON or OFF, OPENMP ON or OFF) is installed
# as it is into WORK/prefix-static or WORK/prefix-shared; the other kind is
# built in WORK/build-<kind> (libraries and run-graph only, kept between runs,
# so a rerun rebuilds only what changed) and installed into the other prefix.
# LAUNCHER (BUILD's CMAKE_C_COMPILER_LAUNCHER, e.g. ccache; may be empty) is
# that build's and the parent project's too, so a fresh WORK compiles from
# the cache. Each step prints the seconds since the start: a run stopped by
# its CTest TIMEOUT shows where the time went.
# Then, for each prefix:
#   - the files are where they should be (headers, libraries, soname, the
#     CMake package, pkg-config files, LICENSE, run-graph that runs);
#   - tests/install/consumer is built with find_package(ggmlite) and, as a
#     plain compiler command, with pkg-config, and run (it uses all three
#     libraries and checks a result against a naive computation);
#   - each consumer links ggmlite the way the prefix says (static: nothing
#     of ggmlite in its NEEDED entries; shared: all three .so.<major>).
# The consumer is also built by tests/install/parent, with ggmlite's tree
# inside (add_subdirectory, in WORK/parent, kept between runs like the
# other kind): no tests or tools of ggmlite, no warning options leaking.
# And: every installed header compiles on its own (C11, and C++ if a C++
# compiler is installed) with -Wall -Wextra -Wpedantic -Werror; the static
# libraries link whole into a shared object that dlopen() loads and runs;
# the shared libraries export nothing that no installed header declares
# (check_exports.sh, nm -D).
set -euo pipefail
if (($# != 7 && $# != 8)); then
    echo "usage: test_install.sh SRC BUILD GENERATOR CC SHARED OPENMP WORK [LAUNCHER]" >&2
    exit 2
fi
src=$1 build=$2 generator=$3 cc=$4 shared=$5 openmp=$6 work=$7 launcher=${8:-}
jobs=2
here=$src/tests/install
for tool in pkg-config readelf; do
    command -v $tool >/dev/null || { echo "test_install needs $tool (apt-get install pkg-config binutils)" >&2; exit 1; }
done

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
step() { echo "== [${SECONDS} s] $*"; }

mkdir -p "$work"
rm -rf "$work"/prefix-* "$work"/consumer-* "$work"/out-* "$work"/plugin
if [[ $shared == ON ]]; then
    this=shared other=static other_shared=OFF
else
    this=static other=shared other_shared=ON
fi

step "install $build ($this) into prefix-$this"
cmake --install "$build" --prefix "$work/prefix-$this" >/dev/null

step "build a $other ggmlite (libraries, run-graph) and install it into prefix-$other"
# Build type None (no optimization flags): these builds check how ggmlite
# installs and links, not its speed, and compile in half the time.
config=(-G "$generator" -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER="$cc"
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DBUILD_SHARED_LIBS="$other_shared"
    -DGGMLITE_OPENMP="$openmp" -DGGMLITE_TESTS=OFF -DGGMLITE_TOOLS=ON -DGGMLITE_INSTALL=ON)
# Another compiler or generator than last time: start afresh (CMake would
# drop its cache and forget the other options).
if [[ "$(cat "$work/build-$other.config" 2>/dev/null)" != "${config[*]}" ]]; then
    rm -rf "$work/build-$other"
    echo "${config[*]}" >"$work/build-$other.config"
fi
cmake -S "$src" -B "$work/build-$other" "${config[@]}" >/dev/null
cmake --build "$work/build-$other" -j $jobs --target ggmlite ggmlite_models ggmlite_io run-graph \
    >/dev/null
cmake --install "$work/build-$other" --prefix "$work/prefix-$other" >/dev/null

version=$(sed -n 's/^#define GML_VERSION "\(.*\)"$/\1/p' "$src/ggmlite/include/ggmlite/ggmlite.h")
major=${version%%.*}

for kind in static shared; do
    prefix=$work/prefix-$kind
    step "$kind: installed files"
    for h in export.h ggmlite.h types.h tensor.h registry.h compute.h hashindex.h ops.inc attention.h \
        kv_cache.h layers.h io.h; do
        [[ -f $prefix/include/ggmlite/$h ]] || fail "$kind: no include/ggmlite/$h"
    done
    pcdir=$(dirname "$(find "$prefix" -name ggmlite.pc)")
    libdir=$(dirname "$pcdir")
    for pc in ggmlite ggmlite-models ggmlite-io; do
        [[ -f $pcdir/$pc.pc ]] || fail "$kind: no $pc.pc"
    done
    for f in ggmliteConfig.cmake ggmliteConfigVersion.cmake ggmliteTargets.cmake; do
        [[ -f $libdir/cmake/ggmlite/$f ]] || fail "$kind: no $f"
    done
    [[ -f $prefix/share/doc/ggmlite/LICENSE ]] || fail "$kind: no share/doc/ggmlite/LICENSE"
    for lib in ggmlite ggmlite_models ggmlite_io; do
        if [[ $kind == static ]]; then
            [[ -f $libdir/lib$lib.a && ! -e $libdir/lib$lib.so ]] || fail "static: lib$lib.a alone"
        else
            [[ -f $libdir/lib$lib.so.$version && ! -e $libdir/lib$lib.a ]] || fail "shared: lib$lib.so.$version alone"
            soname=$(readelf -d "$libdir/lib$lib.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
            [[ $soname == lib$lib.so.$major ]] || fail "lib$lib.so: soname '$soname', want lib$lib.so.$major"
        fi
    done
    # run-graph finds its libraries by itself (RPATH $ORIGIN/../lib).
    got=$(env -u LD_LIBRARY_PATH "$prefix/bin/run-graph" --version)
    [[ $got == "run-graph (ggmlite) $version" ]] || fail "$kind: run-graph --version said '$got'"
    env -u LD_LIBRARY_PATH "$prefix/bin/run-graph" mha --seq 4 --d-model 16 --heads 2 --causal \
        >/dev/null || fail "$kind: run-graph mha failed"

    # needed EXE: the ggmlite shared libraries EXE needs, sorted, on one line.
    needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(libggmlite.*\)\]/\1/p' | sort | tr '\n' ' '; }
    if [[ $kind == static ]]; then
        want=""
    else
        want="libggmlite.so.$major libggmlite_io.so.$major libggmlite_models.so.$major "
    fi

    step "$kind: consumer with find_package(ggmlite)"
    out=$work/consumer-cmake-$kind
    cmake -S "$here/consumer" -B "$out" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
    cmake --build "$out" -j $jobs >/dev/null
    [[ "$(needed "$out/consumer")" == "$want" ]] || fail "$kind: cmake consumer links '$(needed "$out/consumer")'"
    mkdir -p "$work/out-cmake-$kind"
    "$out/consumer" "$work/out-cmake-$kind"

    step "$kind: consumer with pkg-config"
    out=$work/consumer-pc-$kind
    mkdir -p "$out"
    export PKG_CONFIG_PATH=$pcdir
    pcflags=()
    rpath=()
    if [[ $kind == static ]]; then
        pcflags=(--static)
    else
        rpath=("-Wl,-rpath,$(pkg-config --variable=libdir ggmlite)")
    fi
    # shellcheck disable=SC2046 # pkg-config's output is meant to be split into words
    "$cc" -std=c11 -Wall -Wextra -Werror -O2 -o "$out/consumer" "$here/consumer/consumer.c" \
        $(pkg-config --cflags ggmlite-models ggmlite-io) \
        $(pkg-config "${pcflags[@]}" --libs ggmlite-models ggmlite-io) "${rpath[@]}" -lm
    [[ "$(needed "$out/consumer")" == "$want" ]] || fail "$kind: pkg-config consumer links '$(needed "$out/consumer")'"
    mkdir -p "$work/out-pc-$kind"
    "$out/consumer" "$work/out-pc-$kind"
    unset PKG_CONFIG_PATH
done

step "add_subdirectory: ggmlite's tree inside a parent project"
out=$work/parent
config=(-G "$generator" -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER="$cc"
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DGGMLITE_SOURCE_DIR="$src" -DGGMLITE_OPENMP="$openmp"
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
if [[ "$(cat "$out.config" 2>/dev/null)" != "${config[*]}" ]]; then
    rm -rf "$out"
    echo "${config[*]}" >"$out.config"
fi
cmake -S "$here/parent" -B "$out" "${config[@]}" >/dev/null
cmake --build "$out" -j $jobs >/dev/null
# No tests, tools or benchmarks, and ggmlite's warning options stay on its
# own sources.
if cmake --build "$out" --target help | grep -E "run-graph|bench|test_|cli_check"; then
    fail "add_subdirectory builds ggmlite's tests or tools"
fi
grep -q '"command": .*-Wall.*context\.c"' "$out/compile_commands.json" ||
    fail "ggmlite's own sources lost -Wall"
if grep '"command": .*consumer\.c"' "$out/compile_commands.json" | grep -E -- "-Wall|-Wextra"; then
    fail "ggmlite's warning options reach the parent's sources"
fi
mkdir -p "$work/out-parent"
"$out/consumer" "$work/out-parent"

step "static: libggmlite.a and the others linked whole into a shared object, dlopen()ed"
prefix=$work/prefix-static
pcdir=$(dirname "$(find "$prefix" -name ggmlite.pc)")
libdir=$(dirname "$pcdir")
mkdir -p "$work/plugin"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -shared -fPIC -o "$work/plugin/plugin.so" "$here/plugin.c" \
    $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags ggmlite) \
    -Wl,--whole-archive "$libdir/libggmlite_io.a" "$libdir/libggmlite_models.a" \
    "$libdir/libggmlite.a" -Wl,--no-whole-archive \
    $(PKG_CONFIG_PATH=$pcdir pkg-config --static --libs ggmlite-io ggmlite-models) -Wl,--no-undefined
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/plugin/plugin_loader" "$here/plugin_loader.c" -ldl
"$work/plugin/plugin_loader" "$work/plugin/plugin.so"

step "shared: each exported symbol declared by an installed header (nm -D)"
bash "$here/check_exports.sh" "$work/prefix-shared" "$cc"

step "installed headers, each on its own"
cxx=$(command -v g++ || command -v clang++ || command -v c++ || true)
# (With a declaration after it: export.h alone declares nothing, and ISO C
# forbids an empty file.)
for h in $(cd "$prefix/include/ggmlite" && ls -- *.h); do
    # mpi.h (a build with GGMLITE_MPI) includes MPI's <mpi.h>: MPI's include
    # directories (pkg-config mpi-c, which ggmlite-mpi.pc requires) as system
    # ones, so that ggmlite's header is held to the warnings and MPI's is not
    mpi_inc=()
    if [[ $h == mpi.h ]]; then
        mpi_cflags=$(pkg-config --cflags-only-I mpi-c) ||
            fail "<ggmlite/mpi.h> is installed, but pkg-config finds no mpi-c"
        read -ra mpi_inc <<<"${mpi_cflags//-I/-isystem }"
    fi
    printf '#include <ggmlite/%s>\ntypedef int gml_alone;\n' "$h" | "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only \
        -I"$prefix/include" "${mpi_inc[@]}" -x c - || fail "<ggmlite/$h> does not compile alone as C11"
    if [[ -n $cxx ]]; then
        printf '#include <ggmlite/%s>\ntypedef int gml_alone;\n' "$h" | "$cxx" -std=c++11 -Wall -Wextra -Wpedantic -Werror \
            -fsyntax-only -I"$prefix/include" "${mpi_inc[@]}" -x c++ - || fail "<ggmlite/$h> does not compile alone as C++"
    fi
done
echo "C11: ok${cxx:+; C++ ($cxx): ok}"
echo "== [${SECONDS} s] test_install passed"
