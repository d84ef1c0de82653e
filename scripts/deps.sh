#!/usr/bin/env bash
# Installs what kiln needs to build and test: Debian packages (compiler, cmocka, cJSON, clang for the
# fuzzers; libseccomp for the cpu sandbox; libmicrohttpd, Chart.js and highlight.js for the dashboard,
# Chromium for its browser tests) and a Python virtual environment in .venv with PyTorch (CPU is
# enough) for the references.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="build-essential clang libclang-rt-14-dev clang-format libcmocka-dev libcjson-dev \
libsqlite3-dev libcurl4-openssl-dev python3-venv pkg-config libmicrohttpd-dev libseccomp-dev \
libjs-chart.js libjs-highlight.js chromium"
missing=""
for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "kiln deps: installing Debian packages:$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ]; then
    echo "kiln deps: the CUDA toolkit headers were not found under ${CUDA_HOME:-/usr/local/cuda};" \
         "install the CUDA toolkit (only its headers are needed to build)" >&2
    exit 1
fi

PY=${PYTHON_FOR_VENV:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "kiln deps: creating .venv"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r python/requirements.txt -r python/requirements-examples.txt
echo "kiln deps: done"
