#!/usr/bin/env bash
# Sets up this machine, then runs every test: the C++ core suite (GoogleTest,
# ranks as threads over loopback), a short libFuzzer run over the wire
# parsers, and the Python suite (pytest, real multi-process torch.distributed
# jobs; network-lab tests run when this is root with network namespaces).
#   bash scripts/test.sh                  # everything (what CI runs)
#   bash scripts/test.sh --quick          # a few minutes: the C++ suite once, and the Python
#                                         # tests not marked slow or netlab (pyproject.toml)
#   bash scripts/test.sh --quick -k allreduce -x    # other arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
QUICK=0
PYTEST_ARGS=()
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then QUICK=1; else PYTEST_ARGS+=("$arg"); fi
done
if [ "$QUICK" = 1 ]; then
  PYTEST_ARGS=(-m "not slow and not netlab" ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"})
fi

bash scripts/setup.sh

# What only the tests need (setup.sh is also the demo's): etcd, and the status
# page's browser and metrics libraries.
say() { printf '\n== %s\n' "$*"; }
# etcd (3.4+; Debian bookworm ships 3.4.23): the elastic tests run a 3-node
# cluster of it. Only the binary is wanted: the package's own service
# (a single node on localhost:2379) is stopped and disabled again.
if ! command -v etcd >/dev/null 2>&1; then
  say "installing etcd-server"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null; } ||
    echo "test.sh: could not install etcd-server (tests/python/test_etcd_store.py will skip)" >&2
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
fi

# The status page's tests (tests/python/test_dashboard*.py): headless
# Chromium and its driver from the distribution, Selenium and
# prometheus_client from PyPI; each only when missing.
if ! command -v chromedriver >/dev/null 2>&1 || ! { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
  say "installing chromium and chromium-driver (the status page's browser test)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; } ||
    echo "test.sh: could not install chromium (tests/python/test_dashboard_browser.py will skip)" >&2
fi
for mod in selenium prometheus_client; do
  if ! $PY -c "import $mod" 2>/dev/null; then
    say "installing $mod (the status page's tests)"
    $PY -m pip install -q "$mod" || echo "test.sh: could not install $mod" >&2
  fi
done

# The network-lab tests need iproute2 and iperf3 (they skip, saying why, without).
if [ "$QUICK" = 0 ] && [ "$(id -u)" -eq 0 ] && { ! command -v iperf3 >/dev/null || ! command -v tc >/dev/null; }; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 iperf3 >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 iperf3 >/dev/null 2>&1; } ||
    echo "note: could not install iproute2/iperf3; network-lab tests will be skipped"
fi

printf '\n== C++ core tests\n'
cmake -S . -B build/core -G Ninja -DMCCL_BUILD_TESTS=ON -DMCCL_BUILD_TORCH=OFF >/dev/null
cmake --build build/core
(cd build/core && ctest --output-on-failure -j2 --timeout 300)

if [ "$QUICK" = 0 ]; then
  printf '\n== C++ core tests again: every frame by same-host reads, reductions split over 3 helper threads\n'
  (cd build/core && MCCL_LOCAL_READ_BYTES=1 MCCL_REDUCE_THREADS=3 ctest --output-on-failure -j2 --timeout 300)
  printf '\n== C++ core tests again: every frame sealed and encrypted (MCCL_WIRE_SECURITY=encrypt), all on TCP\n'
  (cd build/core && MCCL_WIRE_SECURITY=encrypt MCCL_LOCAL_READ_BYTES=0 ctest --output-on-failure -j2 --timeout 300)

  printf '\n== Fuzzing the wire parsers (%s s per target)\n' "${FUZZ_SECONDS:-15}"
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash scripts/fuzz.sh

  printf '\n== The Metal file, type-checked against stand-in headers\n'
  bash scripts/check_mm.sh
fi

printf '\n== Python tests%s\n' "$([ "$QUICK" = 1 ] && echo ', quick tier: not slow, not netlab')"
$PY -m pytest -q --durations=20 tests/python ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
