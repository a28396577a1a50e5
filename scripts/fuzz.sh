#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (AddressSanitizer and
# UBSan on) and runs each for a while, starting from the seed corpus in
# fuzz/corpus/. New inputs go to build/fuzz/work/, never into the repository.
#   bash scripts/fuzz.sh            # 20 s per target
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  echo "== installing clang and libFuzzer (Debian: clang, libclang-rt-14-dev)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang libclang-rt-14-dev >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang libclang-rt-14-dev >/dev/null; }
fi

CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DMCCL_BUILD_FUZZERS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/fuzz

declare -A MAXLEN=([fuzz_frame]=128 [fuzz_handshake]=512 [fuzz_stream]=65536 [fuzz_attest]=512 [fuzz_sealed]=65536)
for target in fuzz_frame fuzz_handshake fuzz_stream fuzz_attest fuzz_sealed; do
  name=${target#fuzz_}
  work=build/fuzz/work/$name
  mkdir -p "$work"
  printf '\n== %s: %s s from %s seeds\n' "$target" "$SECONDS_PER_TARGET" "$(ls fuzz/corpus/$name | wc -l)"
  # -malloc_limit_mb: any single allocation above it is a bug (an absurd
  # length must be rejected before anything is allocated).
  log=build/fuzz/work/$name.log
  if ! build/fuzz/fuzz/$target "$work" "fuzz/corpus/$name" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len="${MAXLEN[$target]}" -malloc_limit_mb=64 -rss_limit_mb=1024 -timeout=10 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz target $target FAILED; the crashing input is in $(pwd) (crash-*, leak-*, oom-*)"
    exit 1
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)" "$log" || true
done
echo "fuzzing: no crash, no leak, no oversized allocation"
