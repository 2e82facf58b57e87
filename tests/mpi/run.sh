#!/bin/sh
# tests/mpi/run.sh MPIEXEC NP PROGRAM [ARGS...]: runs PROGRAM on NP ranks through MPIEXEC,
# or exits 77 (CTest: skipped) when MPI was not found at build time (MPIEXEC or PROGRAM
# empty). For Open MPI it adds --allow-run-as-root --oversubscribe: tests run as root in
# containers, with more ranks than cores.
mpiexec=$1
np=$2
shift 2
if [ -z "$mpiexec" ] || [ -z "${1:-}" ]; then
    echo "MPI was not found at build time: skipped"
    exit 77
fi
flags=""
if "$mpiexec" --version 2>&1 | grep -q -e "Open MPI" -e "OpenRTE"; then
    flags="--allow-run-as-root --oversubscribe"
fi
exec "$mpiexec" $flags -np "$np" "$@"
