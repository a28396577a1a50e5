#!/usr/bin/env bash
# Type-checks the macOS-only Metal file (csrc/torch/device/mps_metal.mm) on Linux
# with clang's Objective-C++ front end against stand-in Foundation/Metal
# declarations (tests/objc_mock). It catches C++ and Objective-C mistakes in
# that file; it does not replace a build on a Mac.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CLANG=${CLANG:-clang++}
command -v "$CLANG" >/dev/null || { echo "check_mm: no $CLANG; skipped"; exit 0; }
mapfile -t inc < <($PY -c "import torch.utils.cpp_extension as c; print('\n'.join('-isystem' + p for p in c.include_paths()))")
"$CLANG" -std=c++20 -x objective-c++ -fobjc-arc -fblocks -fobjc-runtime=gnustep-2.0 -fsyntax-only \
  -Wall -Wextra -Wno-unused-parameter -Werror -Itests/objc_mock "${inc[@]}" -Icsrc/core -Icsrc/torch \
  csrc/torch/device/mps_metal.mm
echo "check_mm: csrc/torch/device/mps_metal.mm type-checks against tests/objc_mock"
