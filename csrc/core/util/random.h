// Cryptographically strong random bytes from the OS (getrandom / arc4random).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mccl {

void secureRandom(void* out, size_t len);
uint64_t secureRandom64();

}  // namespace mccl
