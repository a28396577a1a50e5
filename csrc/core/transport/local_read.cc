#include "transport/local_read.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#if defined(__linux__)
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#endif

#include "util/bytes.h"
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

void encodeLocalHello(const LocalIdentity& id, uint8_t out[kLocalHelloBytes]) {
  std::memcpy(out, id.bootId.data(), 16);
  putLE<uint64_t>(out + 16, id.netNs);
  putLE<uint32_t>(out + 24, id.pid);
  putLE<uint64_t>(out + 28, id.cookieAddr);
  std::memcpy(out + 36, id.cookie.data(), 16);
}

LocalIdentity decodeLocalHello(const uint8_t in[kLocalHelloBytes]) {
  LocalIdentity id;
  std::memcpy(id.bootId.data(), in, 16);
  id.netNs = getLE<uint64_t>(in + 16);
  id.pid = getLE<uint32_t>(in + 24);
  id.cookieAddr = getLE<uint64_t>(in + 28);
  std::memcpy(id.cookie.data(), in + 36, 16);
  return id;
}

bool canReadPeer(const LocalIdentity& peer, std::string* why) {
#if defined(__linux__)
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
#else
  (void)peer;
  *why = "process_vm_readv(2) is Linux-only";
  return false;
#endif
}

void readPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) {
#if defined(__linux__)
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
#else
  (void)pid, (void)addr, (void)dst, (void)len;
  throwError(ErrorKind::kSystem, "process_vm_readv(2) is Linux-only");
#endif
}

PeerMemory::~PeerMemory() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerMemory::open(const LocalIdentity& peer, std::string* why) {
#if defined(__linux__) && defined(SYS_pidfd_open)
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
  *why = "same-host reads need Linux >= 5.3 (process_vm_readv and pidfd_open)";
  return false;
#endif
}

bool PeerMemory::exited() const {
#if defined(__linux__)
  pollfd p{pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;  // a pidfd polls readable once its process has exited
#else
  return true;
#endif
}

void PeerMemory::read(uint64_t addr, void* dst, size_t len) const {
  readPeerMemory(pid_, addr, dst, len);
  if (exited()) {
    throwError(ErrorKind::kRemote, "pid ", pid_,
               " exited while its memory was being read (its pid may be reused)");
  }
}

}  // namespace mccl
