#!/usr/bin/env bash
# Every symbol a shared ggmlite library exports is declared by an installed
# header: nothing internal (the hash index's helpers aside, which are public,
# the micro-kernels, graph entries, io's file helpers) leaks out of a .so.
#
#   check_exports.sh PREFIX CC [CFLAGS...]
#
# For each libggmlite*.so under PREFIX, the names `nm -D --defined-only`
# lists are taken by address in a C file that includes every header of
# PREFIX/include/ggmlite; the compiler says which it does not know (CFLAGS:
# what those headers need, e.g. MPI's include path for <ggmlite/mpi.h>). The
# names the linker itself defines in every shared object (_init, _fini,
# _edata, _end, __bss_start) are not the library's. Fails listing each
# library's undeclared exports; also fails if no shared library is there.
set -euo pipefail
if (($# < 2)); then
    echo "usage: check_exports.sh PREFIX CC [CFLAGS...]" >&2
    exit 2
fi
prefix=$1 cc=$2
shift 2
command -v nm >/dev/null || { echo "check_exports needs nm (apt-get install binutils)" >&2; exit 1; }

mapfile -t libs < <(find "$prefix" -name 'libggmlite*.so' | sort)
((${#libs[@]} > 0)) || { echo "FAIL: no libggmlite*.so under $prefix" >&2; exit 1; }
headers=$(cd "$prefix/include" && ls ggmlite/*.h)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
for lib in "${libs[@]}"; do
    nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' |
        grep -v -x -E '_init|_fini|_edata|_end|__bss_start' | sort -u >"$tmp/syms"
    n=$(wc -l <"$tmp/syms")
    ((n > 0)) || { echo "FAIL: $(basename "$lib") exports nothing" >&2; bad=1; continue; }
    {
        for h in $headers; do echo "#include <$h>"; done
        echo "void gml_check_exports(void);"
        echo "void gml_check_exports(void) {"
        sed 's/.*/    (void)\&&;/' "$tmp/syms"
        echo "}"
    } >"$tmp/exports.c"
    if ! LC_ALL=C "$cc" -std=c11 -fsyntax-only -I"$prefix/include" "$@" "$tmp/exports.c" 2>"$tmp/err"; then
        # gcc: 'x' undeclared; clang: use of undeclared identifier 'x'
        undeclared=$(grep -o -E "'[A-Za-z_][A-Za-z0-9_]*' undeclared|undeclared identifier '[A-Za-z_][A-Za-z0-9_]*'" \
            "$tmp/err" | grep -o -E "'[^']*'" | tr -d "'" | sort -u | tr '\n' ' ' || true)
        if [[ -z $undeclared ]]; then
            cat "$tmp/err" >&2
            echo "FAIL: the check of $(basename "$lib") does not compile" >&2
        else
            echo "FAIL: $(basename "$lib") exports what no installed header declares: $undeclared" >&2
        fi
        bad=1
        continue
    fi
    echo "$(basename "$lib"): $n exported symbols, each declared by an installed header"
done
exit $bad
