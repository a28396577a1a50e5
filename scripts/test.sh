#!/usr/bin/env bash
# Sets up this machine, then runs every test: the C++ core suite (GoogleTest,
# ranks as threads over loopback), a short libFuzzer run over the wire
# parsers, and the Python suite (pytest, real multi-process torch.distributed
# jobs; network-lab tests run when this is root with network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup.sh
# The network-lab tests need iproute2 and iperf3 (they skip, saying why, without).
if [ "$(id -u)" -eq 0 ] && { ! command -v iperf3 >/dev/null || ! command -v tc >/dev/null; }; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 iperf3 >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 iperf3 >/dev/null 2>&1; } ||
    echo "note: could not install iproute2/iperf3; network-lab tests will be skipped"
fi

printf '\n== C++ core tests\n'
cmake -S . -B build/core -G Ninja -DMCCL_BUILD_TESTS=ON -DMCCL_BUILD_TORCH=OFF >/dev/null
cmake --build build/core
(cd build/core && ctest --output-on-failure -j2 --timeout 300)
printf '\n== C++ core tests again: every frame by same-host reads, reductions split over 3 helper threads\n'
(cd build/core && MCCL_LOCAL_READ_BYTES=1 MCCL_REDUCE_THREADS=3 ctest --output-on-failure -j2 --timeout 300)
printf '\n== C++ core tests again: every frame sealed and encrypted (MCCL_WIRE_SECURITY=encrypt), all on TCP\n'
(cd build/core && MCCL_WIRE_SECURITY=encrypt MCCL_LOCAL_READ_BYTES=0 ctest --output-on-failure -j2 --timeout 300)

printf '\n== Fuzzing the wire parsers (%s s per target)\n' "${FUZZ_SECONDS:-15}"
FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash scripts/fuzz.sh

printf '\n== The Metal file, type-checked against stand-in headers\n'
bash scripts/check_mm.sh

printf '\n== Python tests\n'
$PY -m pytest -q tests/python "$@"
