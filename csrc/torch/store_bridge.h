// The c10d Store as the core's rendezvous Store.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/store.h"
#include "util/error.h"

namespace mccl::torch_adapter {

class C10dStore : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    try {
      store_->set(key, value);
    } catch (const std::exception& e) {
      throwError(ErrorKind::kRemote, "rendezvous store: set('", key, "') failed: ", e.what());
    }
  }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
      return store_->get(key);
    } catch (const std::exception& e) {
      throwError(ErrorKind::kTimeout, "rendezvous store: key '", key, "' not available within ",
                 timeout.count(), " ms (", e.what(), "); did every rank create the group?");
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace mccl::torch_adapter
