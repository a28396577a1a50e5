#include "comm/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "util/bytes.h"
#include "util/check.h"
#include "util/params.h"

namespace mccl {
namespace {

constexpr size_t kMinSecretBytes = 32;
constexpr size_t kMaxSecretFileBytes = 64 * 1024;

std::vector<uint8_t> readSecretFile(const std::string& path) {
  const char* env = params::spec::secretFile.env;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  MCCL_USAGE_CHECK(fd >= 0, env, "=", path, ": cannot open it (", std::strerror(errno),
                   "); write one with `mccl secret ", path, "`");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  MCCL_USAGE_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), env, "=", path,
                   ": not a regular file (symbolic links are refused too)");
  MCCL_USAGE_CHECK((st.st_mode & 077) == 0, env, "=", path, ": its mode is 0", std::oct,
                   (st.st_mode & 0777), std::dec,
                   ", so its group or other users can read or change it; run chmod 600 ", path);
  MCCL_USAGE_CHECK(st.st_uid == ::geteuid(), env, "=", path, ": owned by uid ", st.st_uid,
                   ", not by this process's uid ", ::geteuid());
  std::vector<uint8_t> bytes;
  uint8_t buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    MCCL_USAGE_CHECK(n >= 0, env, "=", path, ": read failed (", std::strerror(errno), ")");
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
    MCCL_USAGE_CHECK(bytes.size() <= kMaxSecretFileBytes, env, "=", path, ": larger than ",
                     kMaxSecretFileBytes, " bytes; a secret file holds 32 to ",
                     kMaxSecretFileBytes, " random bytes");
  }
  MCCL_USAGE_CHECK(bytes.size() >= kMinSecretBytes, env, "=", path, ": ", bytes.size(),
                   " bytes; a secret file needs at least ", kMinSecretBytes,
                   " random bytes (`mccl secret PATH` writes one)");
  return bytes;
}

}  // namespace

Secret deriveJobSecret(const void* data, size_t len) {
  static const char kLabel[] = "mccl job secret v1";
  return hmacSha256(data, len, kLabel, sizeof(kLabel) - 1);
}

std::optional<Secret> loadJobSecret() {
  const std::string file = params::secretFile();
  const std::string text = params::secret();
  MCCL_USAGE_CHECK(file.empty() || text.empty(), params::spec::secretFile.env, " and ",
                   params::spec::secret.env, " are both set; set one");
  if (!file.empty()) {
    std::vector<uint8_t> bytes = readSecretFile(file);
    Secret s = deriveJobSecret(bytes.data(), bytes.size());
    std::memset(bytes.data(), 0, bytes.size());
    return s;
  }
  if (!text.empty()) {
    MCCL_USAGE_CHECK(text.size() >= kMinSecretBytes, params::spec::secret.env, " has ",
                     text.size(), " characters; it needs at least ", kMinSecretBytes,
                     " (the value is not shown)");
    return deriveJobSecret(text.data(), text.size());
  }
  return std::nullopt;
}

Secret groupSecret(const Secret& job, uint64_t group, const Secret& salt) {
  static const char kLabel[] = "mccl group secret v1";
  uint8_t msg[sizeof(kLabel) + 8 + 32];
  std::memcpy(msg, kLabel, sizeof(kLabel));
  putLE<uint64_t>(msg + sizeof(kLabel), group);
  std::memcpy(msg + sizeof(kLabel) + 8, salt.data(), salt.size());
  return hmacSha256(job.data(), job.size(), msg, sizeof(msg));
}

}  // namespace mccl
