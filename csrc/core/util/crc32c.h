// CRC32C (Castagnoli), the checksum of MCCL_CHECKSUM=1 payloads.
//
// Uses the CPU's CRC32C instructions where present (SSE4.2 on x86-64, the
// CRC extension on 64-bit Arm, which every Apple Silicon core has), else a
// table-driven fallback. All variants give the same result.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mccl {

// CRC32C of `len` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t len, uint32_t crc = 0);

// The portable implementation (tests compare the fast one against it).
uint32_t crc32cPortable(const void* data, size_t len, uint32_t crc = 0);

// Which implementation crc32c() uses: "sse4.2", "armv8-crc" or "table".
const char* crc32cImplementation();

}  // namespace mccl
