#!/usr/bin/env bash
# Prepares a fresh Debian/Ubuntu machine (or re-checks a prepared one):
# system packages, torch, and MCCL built against that torch.
#   PYTHON=python3.11 bash scripts/setup.sh   # choose the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

say() { printf '\n== %s\n' "$*"; }

# GoogleTest (C++ tests) from the distribution, when missing.
if [ ! -f /usr/include/gtest/gtest.h ]; then
  say "installing libgtest-dev"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libgtest-dev >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libgtest-dev >/dev/null; }
fi

# OpenSSL's libcrypto: MCCL_WIRE_SECURITY loads it at run time (its tests
# need it). Present wherever Python's ssl module works; installed if not.
if ! ldconfig -p 2>/dev/null | grep -q 'libcrypto\.so\.3'; then
  say "installing libssl3 (libcrypto, for MCCL_WIRE_SECURITY)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -q >/dev/null && { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libssl3 >/dev/null 2>&1 ||
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libssl3t64 >/dev/null; }; } ||
    { echo "setup.sh: could not install libssl3 (MCCL_WIRE_SECURITY and its tests need libcrypto)" >&2; exit 1; }
fi

# Build tools and torch. Torch is installed only when absent: an installed
# torch (2.5 or newer, CPU or CUDA) is used as is.
$PY -m pip --version >/dev/null
if ! $PY -c "import torch" 2>/dev/null; then
  say "installing torch==2.13.0 (CPU)"
  $PY -m pip install -q torch==2.13.0
fi
if ! $PY -c "import sys, torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(v < (2, 5))"; then
  echo "setup.sh: torch $($PY -c 'import torch; print(torch.__version__)') is older than 2.5, the oldest MCCL builds against" >&2
  exit 1
fi
missing=()
# expecttest: torch's own distributed test suite (tests/torch_suite) imports it.
for mod in pytest numpy cmake ninja expecttest; do
  $PY -c "import $mod" 2>/dev/null || missing+=("$mod")
done
# scikit-build-core 1.1 or newer: pyproject.toml's [[tool.dynamic-metadata]]
# (the version from python/mccl/_version.py, the wheel's torch pin).
$PY -c "import sys, scikit_build_core as s; sys.exit(tuple(map(int, s.__version__.split('.')[:2])) < (1, 1))" 2>/dev/null ||
  missing+=("scikit-build-core>=1.1")
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  $PY -m pip install -q "${missing[@]}"
fi

# MCCL itself, against the installed torch (no build isolation: an isolated
# build would download its own, multi-GB torch). The build folder is kept, so
# a second run only rebuilds what changed.
say "building and installing mccl (torch $($PY -c 'import torch; print(torch.__version__)'))"
$PY -m pip install -q --no-build-isolation . 2>&1 | grep -v "as the 'root' user" || true
$PY -c "import mccl; print('mccl', mccl.__version__, 'ready')"
