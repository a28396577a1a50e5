// The rendezvous key-value store, as the core sees it.
//
// MCCL uses the store only to bootstrap a communicator (the job secret, the
// group id, and each rank's listening address), never on the data path. The
// torch adapter bridges c10d::Store to this interface; tests use MemoryStore.
// Implementations must be thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mccl {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until `key` exists; throws mccl::Error(kTimeout) after `timeout`.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// An in-process store for tests and single-process use.
class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  size_t numKeys();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

}  // namespace mccl
