#include "comm/store.h"

#include "util/error.h"

namespace mccl {

void MemoryStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::vector<uint8_t> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return data_.count(key) > 0; };
  if (timeout.count() <= 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, timeout, ready)) {
    throwError(ErrorKind::kTimeout, "store: key '", key, "' not set within ", timeout.count(),
               " ms");
  }
  return data_[key];
}

size_t MemoryStore::numKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

}  // namespace mccl
