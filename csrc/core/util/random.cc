#include "util/random.h"

#include <cerrno>
#include <cstdlib>

#if defined(__APPLE__)
#include <stdlib.h>  // arc4random_buf
#else
#include <sys/random.h>
#endif

#include "util/error.h"

namespace mccl {

void secureRandom(void* out, size_t len) {
#if defined(__APPLE__)
  arc4random_buf(out, len);
#else
  auto* p = static_cast<uint8_t*>(out);
  while (len > 0) {
    ssize_t n = ::getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throwError(ErrorKind::kSystem, "getrandom failed: ", errnoString(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
#endif
}

uint64_t secureRandom64() {
  uint64_t v;
  secureRandom(&v, sizeof(v));
  return v;
}

}  // namespace mccl
