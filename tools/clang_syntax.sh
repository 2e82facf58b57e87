#!/bin/sh
# clang_syntax.sh BUILD: the build's sources parsed by clang (tools/clang_syntax.cmake);
# exit 77 (skipped) where no clang is installed (scripts/setup fuzz installs it).
set -eu
for c in clang-14 clang; do
    if command -v "$c" >/dev/null 2>&1; then
        exec cmake -DBUILD="$1" -DCLANG="$c" -P "$(dirname "$0")/clang_syntax.cmake"
    fi
done
echo "clang_syntax: no clang installed: skipped" >&2
exit 77
