#!/bin/sh
# Installs the build into a temporary prefix, then builds and runs a consumer through
# find_package(tensorattn) (shared and static; from C, and from a C++-only project) and
# through pkg-config.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/consumer/consumer"
"$tmp/consumer/consumer_static"
cmake -S "$src/tests/install/cxx" -B "$tmp/consumer_cxx" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer_cxx" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/consumer_cxx/consumer_cxx"
"$tmp/consumer_cxx/consumer_cxx_static"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n 1)
PKG_CONFIG_PATH="$libdir" cc "$src/tests/install/consumer.c" -o "$tmp/pc" \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs tensorattn)
LD_LIBRARY_PATH="$libdir/..:${LD_LIBRARY_PATH:-}" "$tmp/pc"
# The shared library exports what tensorattn.h declares and nothing internal, but for the
# internal functions the installed libtensorattn_mpi.a calls (TA_DIST_EXPORT in
# src/ops/sdpa*.h; the OpenMP runtime's lock of a named critical section,
# .gomp_critical_user_*, is global by its ABI).
so=$(ls "$libdir"/../libtensorattn.so)
mpilib="$libdir/../libtensorattn_mpi.a"
dist=""
[ -f "$mpilib" ] && dist=$(nm -u "$mpilib" | awk '$2 ~ /^ta_/ {print $2}' | sort -u)
extra=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^\.gomp_critical_user_' |
    while read -r sym; do
        grep -Eq "(^|[^A-Za-z0-9_])$sym[[:space:]]*\(" "$src/include/tensorattn.h" ||
            echo "$dist" | grep -qx "$sym" || echo "$sym"
    done)
if [ -n "$extra" ]; then
    echo "install_consumer: libtensorattn.so exports symbols tensorattn.h does not declare:" $extra >&2
    exit 1
fi
# Where MPI was built: a program of tensorattn_mpi.h links with the installed
# libtensorattn_mpi.a and the shared library (by hand), and through the CMake package's
# tensorattn::mpi.
if [ -f "$mpilib" ] && command -v mpicc >/dev/null; then
    mpicc "$src/tests/install/mpi/mpi_consumer.c" -o "$tmp/mpi_consumer" \
        $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags tensorattn) -L"$libdir/.." -ltensorattn_mpi \
        $(PKG_CONFIG_PATH="$libdir" pkg-config --static --libs tensorattn)
    LD_LIBRARY_PATH="$libdir/..:${LD_LIBRARY_PATH:-}" "$tmp/mpi_consumer"
    cmake -S "$src/tests/install/mpi" -B "$tmp/consumer_mpi" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
    cmake --build "$tmp/consumer_mpi" >/dev/null
    "$tmp/consumer_mpi/mpi_consumer"
fi
