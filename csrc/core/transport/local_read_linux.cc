// Same-host reads on Linux: process_vm_readv(2) and pidfds (Linux >= 5.3).
// The portable twin is local_read_none.cc; CMake chooses.
#include "transport/local_read.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "util/error.h"
#include "util/random.h"

namespace mccl {
namespace {

// Random bytes at a fixed address for the life of the process.
alignas(16) uint8_t gCookie[16];
std::once_flag gCookieOnce;

std::array<uint8_t, 16> readBootId() {
  std::array<uint8_t, 16> id{};
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (!(in >> text)) return id;
  size_t n = 0;
  int half = -1;
  for (char ch : text) {
    int v = (ch >= '0' && ch <= '9') ? ch - '0'
            : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                                       : -1;
    if (v < 0) continue;
    if (half < 0) {
      half = v;
    } else if (n < id.size()) {
      id[n++] = static_cast<uint8_t>(half << 4 | v);
      half = -1;
    }
  }
  if (n != id.size()) id.fill(0);
  return id;
}

uint64_t readNetNs() {
  struct stat st;
  if (::stat("/proc/self/ns/net", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::string hex(const std::array<uint8_t, 16>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t v : b) {
    s += d[v >> 4];
    s += d[v & 15];
  }
  return s;
}

}  // namespace

LocalIdentity localIdentity() {
  std::call_once(gCookieOnce, [] { secureRandom(gCookie, sizeof(gCookie)); });
  static const std::array<uint8_t, 16> bootId = readBootId();
  LocalIdentity id;
  id.bootId = bootId;
  id.netNs = readNetNs();
  id.pid = static_cast<uint32_t>(::getpid());
  id.cookieAddr = reinterpret_cast<uintptr_t>(gCookie);
  std::memcpy(id.cookie.data(), gCookie, sizeof(gCookie));
  return id;
}

bool canReadPeer(const LocalIdentity& peer, std::string* why) {
  const LocalIdentity self = localIdentity();
  const std::array<uint8_t, 16> zero{};
  if (self.bootId == zero || peer.bootId != self.bootId) {
    *why = strCat("another host (boot id ", hex(peer.bootId), ", this host's ", hex(self.bootId), ")");
    return false;
  }
  if (peer.netNs != self.netNs || self.netNs == 0) {
    *why = strCat("another network namespace (", peer.netNs, ", this process's ", self.netNs, ")");
    return false;
  }
  std::array<uint8_t, 16> got{};
  try {
    readPeerMemory(peer.pid, peer.cookieAddr, got.data(), got.size());
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  if (got != peer.cookie) {
    *why = strCat("pid ", peer.pid, " here is another process (a separate pid namespace)");
    return false;
  }
  return true;
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

bool PeerMemory::open(const LocalIdentity& peer, std::string* why) {
#if defined(SYS_pidfd_open)
  // Pin first, then prove: the cookie read afterwards shows that the pinned
  // process is the one that announced itself.
  const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(peer.pid), 0);
  if (fd < 0) {
    *why = strCat("pidfd_open(", peer.pid, ") failed: ", std::strerror(errno));
    return false;
  }
  pidfd_ = static_cast<int>(fd);
  pid_ = peer.pid;
  if (canReadPeer(peer, why) && !exited()) return true;
  if (why->empty()) *why = strCat("pid ", peer.pid, " exited during the probe");
  ::close(pidfd_);
  pidfd_ = -1;
  return false;
#else
  (void)peer;
  *why = "same-host reads need pidfd_open (Linux >= 5.3 headers)";
  return false;
#endif
}

bool PeerMemory::exited() const {
  pollfd p{pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;  // a pidfd polls readable once its process has exited
}

}  // namespace mccl
