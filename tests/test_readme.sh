#!/usr/bin/env bash
# The README's C example (built from its first ```c block as it stands there)
# must run, exit 0 and print the value naive loops compute from the same
# inputs (tests/readme_ref.c).
# usage: test_readme.sh READMEEXAMPLE READMEREF
set -u
out=$("$1" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
    echo "FAIL: the README example exited with status $rc" >&2
    exit 1
fi
"$2" "$out"
