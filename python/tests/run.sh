#!/bin/sh
# The CTest entry python_package: builds the Python package with pip into a venv under the
# build tree and runs python/tests with pytest.
#   python/tests/run.sh BUILD_DIR SOURCE_DIR [plain|sanitize]
# The venv sees Debian's python3-numpy, python3-torch and python3-pytest (the oracles;
# scripts/setup installs them) through --system-site-packages. scikit-build-core comes from
# PyPI, once, into the venv; the package is then built without build isolation into
# BUILD_DIR/python-build, so that a rebuild only compiles what changed (the first build
# compiles the library once more, about a minute on 2 cores; later runs take seconds).
# `pip install .` on a fresh machine uses build isolation instead (README, "Python").
# Exit 77 (skipped): a sanitizer build (the instrumented library cannot load into an
# uninstrumented python).
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
if [ "${3:-plain}" = sanitize ]; then
    echo "python_package: skipped in a sanitizer build"
    exit 77
fi
py=${TA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c "import venv, numpy, torch, pytest" 2>/dev/null; then
    echo "python_package: $py lacks venv, numpy, torch or pytest: run scripts/setup" >&2
    exit 1
fi
venv=$build/python-venv
[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
if ! "$venv/bin/python" -c "import scikit_build_core" 2>/dev/null; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall --config-settings=build-dir="$build/python-build" \
    --config-settings=cmake.define.TA_WERROR=ON "$src"
# The package installs its own files only (tensorattn/ and its dist-info): nothing of the
# C library's install rules (libtensorattn_mpi.a and its header went to site-packages/lib
# and site-packages/include).
"$venv/bin/python" - <<'EOF_PY'
import importlib.metadata as md
stray = [str(f) for f in md.files("tensorattn") if not str(f).startswith(("tensorattn/", "tensorattn-"))]
if stray:
    raise SystemExit("python_package: the package installs files outside tensorattn/: %s" % stray)
EOF_PY
# From the build tree, so that `import tensorattn` finds the installed package, not the
# sources in python/ (which lack the compiled module).
cd "$build"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
