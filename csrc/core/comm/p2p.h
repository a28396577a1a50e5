// Point-to-point send and receive of one group (torch's send/recv/isend/
// irecv). Ordered per (peer, tag) by their own counters, never by the
// collective sequence numbers. Messages up to MCCL_P2P_EAGER_BYTES go at
// once; larger ones are announced (RTS) and sent when the receiver has
// posted its buffer (CTS), so they land in place without staging.
//
// Threads: send() and recv() from any thread; onRts() and onCts() from
// connection receive threads; failAll() from whichever thread poisons the
// group. Lock: mu_ (counters and announced sends), never held while
// posting frames.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <mutex>
#include <tuple>

#include "comm/matching.h"
#include "comm/op_host.h"
#include "comm/watchdog.h"
#include "comm/work.h"

namespace mccl {

// Why `peer` cannot be the `what` ("destination", "source") of a
// point-to-point op at rank `self` of a group of `size`; empty when it can.
// The one wording of this refusal, for the core's checks and the adapter's
// (which refuses a device tensor's op at the call, before staging it).
std::string peerRefusal(int size, int self, int64_t peer, const char* what);

class PointToPoint {
 public:
  // Data goes out through host.postSend; frames without payload (RTS, CTS)
  // through `postControl` (to a group rank; throws on failure). Headers
  // carry `wireRank` (this rank in the family, links.h) and group `groupId`.
  using PostControl = std::function<void(int peer, const FrameHeader& h, Deadline deadline)>;
  PointToPoint(OpHost& host, Matching& matching, Watchdog& watchdog, PostControl postControl,
               uint32_t wireRank);

  static constexpr int kAnySource = -1;
  // Zero copy: `data` must stay valid until the Work completes.
  // `timeout` <= 0: the group's.
  std::shared_ptr<Work> send(int peer, uint32_t tag, const void* data, size_t bytes, DataType dtype,
                             uint64_t count, std::chrono::milliseconds timeout);
  // peer == kAnySource receives from whichever rank sends first.
  std::shared_ptr<Work> recv(int peer, uint32_t tag, void* data, size_t bytes, DataType dtype,
                             uint64_t count, std::chrono::milliseconds timeout);

  // A peer announced a large send; answers CTS once a receive is posted.
  void onRts(int peer, const FrameHeader& h);
  // A peer is ready for a large send announced here.
  void onCts(int peer, const FrameHeader& h);
  // The group failed, was shut down or was shrunk: announced sends fail
  // with `e`, and so does every large send announced from now on (no
  // clear-to-send can reach this group any more).
  void failAll(const Error& e);

 private:
  // Header of point-to-point message #seq with `tag` from this rank.
  FrameHeader header(uint64_t seq, uint32_t tag) const;
  void done(const std::shared_ptr<Work>& work, Transfer& t);
  // Sends a frame without payload; failures poison the group.
  void control(int peer, const FrameHeader& h);
  void sendCts(int peer, uint64_t seq, uint32_t tag);

  OpHost& host_;
  Matching& matching_;
  Watchdog& watchdog_;
  const PostControl postControl_;
  const uint32_t wireRank_;

  struct PendingSend {
    std::shared_ptr<SendRequest> req;
    FrameHeader tmpl;
    const void* data = nullptr;
    Deadline deadline = Deadline::never();
  };
  std::mutex mu_;
  std::map<std::pair<int, uint32_t>, uint64_t> sendCounter_;
  // Large sends waiting for their clear-to-send, by (peer, counter, tag).
  std::map<std::tuple<int, uint64_t, uint32_t>, PendingSend> announced_;
  std::unique_ptr<Error> failed_;  // set by failAll: nothing is announced any more
};

}  // namespace mccl
