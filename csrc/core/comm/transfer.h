// Transfers: one posted send or receive of a whole message.
//
// A transfer completes exactly once (finish()), from a connection thread or
// from the communicator when it is poisoned. Completion tells the collective
// op that posted it (which may resume the op's coroutine on this thread) or,
// for point-to-point operations, runs onDone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/signature.h"
#include "transport/connection.h"
#include "util/error.h"

namespace mccl {

class OpContext;

// Identifies a message between a pair of ranks.
struct MsgKey {
  uint8_t p2p = 0;    // collective messages and p2p messages never match
  uint64_t seq = 0;   // collective sequence number, or p2p counter
  uint32_t slot = 0;  // algorithm slot, or p2p tag
  uint32_t src = 0;   // sending rank
  auto operator<=>(const MsgKey&) const = default;
};

class Transfer {
 public:
  virtual ~Transfer() = default;
  bool done() const { return done_.load(std::memory_order_acquire); }
  // The error, or null; valid once done().
  const Error* error() const { return error_.get(); }
  // "receive of allreduce #5 slot 2 (4096 bytes) from rank 1"
  virtual std::string describe() const = 0;
  // The peer of this transfer, or -1 for a receive from any rank not yet matched.
  virtual int peerRank() const = 0;
  virtual bool isReceive() const { return false; }

  // The collective op that posted it (it outlives its transfers), or null.
  OpContext* op = nullptr;
  std::function<void(Transfer&)> onDone;

  void finish(const Error* err);

 private:
  std::atomic<bool> claimed_{false};
  std::atomic<bool> done_{false};
  std::unique_ptr<Error> error_;
};

class SendRequest : public Transfer, public SendCallback {
 public:
  SendRequest(int peer, MsgKey key, OpKind kind, size_t bytes)
      : peer(peer), key(key), kind(kind), bytes(bytes) {}
  // Set by the communicator before the first frame is queued. The request
  // keeps itself alive (`self`) until its last frame is done, because
  // connections hold only raw SendCallback pointers.
  void setFrames(int frames, std::shared_ptr<SendRequest> self) {
    framesLeft_.store(frames);
    self_ = std::move(self);
  }
  void sendDone(const Error* err) override;
  std::string describe() const override;
  int peerRank() const override { return peer; }

  const int peer;
  const MsgKey key;
  const OpKind kind;
  const size_t bytes;

 private:
  std::atomic<int> framesLeft_{1};
  std::shared_ptr<SendRequest> self_;
  std::mutex errMu_;
  std::unique_ptr<Error> firstError_;
};

class RecvRequest : public Transfer {
 public:
  RecvRequest(MsgKey key, void* dst, size_t bytes, const OpSignature& sig)
      : key(key), dst(static_cast<uint8_t*>(dst)), bytes(bytes), sig(sig) {}
  std::string describe() const override;
  int peerRank() const override { return anySource && !matched ? -1 : static_cast<int>(key.src); }
  bool isReceive() const override { return true; }

  MsgKey key;  // for an any-source receive, src is set when it matches
  uint8_t* const dst;
  const size_t bytes;
  const OpSignature sig;
  bool anySource = false;
  // Guarded by the matching engine's mutex.
  size_t received = 0;
  bool matched = false;
  int inflight = 0;                   // payloads being written into dst right now
  std::unique_ptr<Error> failedWith;  // failed while payloads were in flight
};

}  // namespace mccl
