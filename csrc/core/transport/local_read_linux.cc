// Same-host reads on Linux: process_vm_readv(2) and pidfds (Linux >= 5.3).
// The attestation that names the peer is local_attest_linux.cc; the portable
// twin of both is local_read_none.cc; CMake chooses.
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "transport/local_read.h"
#include "util/error.h"
#include "util/random.h"

namespace mccl {
namespace {

// Random bytes at a fixed address for the life of the process.
alignas(16) uint8_t gCookie[16];
std::once_flag gCookieOnce;

}  // namespace

void localCookie(uint64_t* addr, std::array<uint8_t, 16>* bytes) {
  std::call_once(gCookieOnce, [] { secureRandom(gCookie, sizeof(gCookie)); });
  *addr = reinterpret_cast<uintptr_t>(gCookie);
  std::memcpy(bytes->data(), gCookie, sizeof(gCookie));
}

void readPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < len) {
    iovec local{out + done, len - done};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(addr + done)), len - done};
    ssize_t n = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EFAULT;
      const char* hint = (err == EPERM || err == EACCES)
                             ? " (another user, or kernel.yama.ptrace_scope forbids it)"
                         : err == ESRCH ? " (the process has exited)"
                                        : "";
      throwError(ErrorKind::kRemote, "process_vm_readv of ", len - done, " bytes at 0x", std::hex,
                 addr + done, std::dec, " in pid ", pid, " failed: ", std::strerror(err), hint);
    }
    done += static_cast<size_t>(n);
  }
}

PeerMemory::~PeerMemory() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerMemory::open(uint32_t pid, uint64_t cookieAddr, const std::array<uint8_t, 16>& cookie,
                      std::string* why) {
#if defined(SYS_pidfd_open)
  // Pin first, then prove: the cookie read afterwards shows that the pinned
  // process is the one that told us the cookie.
  const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd < 0) {
    *why = strCat("pidfd_open(", pid, ") failed: ", std::strerror(errno));
    return false;
  }
  pidfd_ = static_cast<int>(fd);
  pid_ = pid;
  std::array<uint8_t, 16> got{};
  try {
    readPeerMemory(pid, cookieAddr, got.data(), got.size());
    if (got != cookie) {
      *why = strCat("pid ", pid, " does not hold the cookie it named (another process)");
    } else if (exited()) {
      *why = strCat("pid ", pid, " exited during the probe");
    } else {
      return true;
    }
  } catch (const Error& e) {
    *why = e.what();
  }
  ::close(pidfd_);
  pidfd_ = -1;
  return false;
#else
  (void)pid;
  (void)cookieAddr;
  (void)cookie;
  *why = "same-host reads need pidfd_open (Linux >= 5.3 headers)";
  return false;
#endif
}

bool PeerMemory::exited() const {
  pollfd p{pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;  // a pidfd polls readable once its process has exited
}

}  // namespace mccl
