// The matching engine: pairs incoming frames with posted receives.
//
// Frames that arrive before their receive is posted are buffered
// ("unexpected"), up to a byte budget; past it the receive thread waits,
// which stops reading the socket and lets TCP push back on the sender. The
// wait is bounded (then the frame is buffered anyway, with a warning), so a
// sender that runs ahead slows down but can never wedge a connection.
//
// Algorithms keep the budget rarely needed by sending to each peer in the
// order in which that peer posts its receives (or by posting them all up
// front).
// Collective frames are checked against the signature of this rank's op with
// the same sequence number, so ranks that disagree on a collective get an
// error naming both sides instead of a hang or corrupted memory.
//
// Threads: incoming()/incomingDone() run on connection receive threads;
// beginOp() under the engine's queue lock, in sequence order (engine.h), on
// the engine thread or a caller's thread; endOp() on whichever thread
// completes the op; post*() on any thread.
// Transfers are finished outside the engine's lock.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/scratch.h"
#include "comm/transfer.h"
#include "transport/frame.h"
#include "util/logging.h"

namespace mccl {

class Matching {
 public:
  struct Context {
    int rank = 0;
    int size = 1;
    std::string group;                       // for messages: "group 'default_pg'"
    std::function<std::string(int)> peerName;  // "rank 2 (10.0.0.2:41000)"
  };

  // Buffers for early frames come from `pool`.
  Matching(Context ctx, size_t budgetBytes, ScratchPool& pool);
  ~Matching();

  // Receive thread: where the payload of `h` goes (null if h.length == 0).
  // Throws mccl::Error on a mismatch or when poisoned.
  void* incoming(const FrameHeader& h);
  // The payload arrived (ok) or its read failed (!ok); either way nothing
  // more is written to dst. A failed receive is finished only once no payload
  // is in flight into its memory, so callers may free it when it completes.
  void incomingDone(const FrameHeader& h, void* dst, bool ok);

  // beginOp strictly in sequence order (see the class comment).
  void beginOp(uint64_t seq, const OpSignature& sig);
  void endOp(uint64_t seq);

  // Posts a receive from a specific rank. For p2p receives key.seq is
  // assigned here from the per-(source, tag) counter. Returns true when the
  // sender is waiting for a clear-to-send (it announced the message with a
  // ready-to-send frame): the caller must send it.
  bool post(const std::shared_ptr<RecvRequest>& req);
  // Posts a p2p receive from any rank with tag req->key.slot (same return).
  bool postAnySource(const std::shared_ptr<RecvRequest>& req);
  // Receive thread: a p2p ready-to-send. Returns true if its receive is
  // posted (send the clear-to-send now); else remembers it for post().
  bool incomingRts(const FrameHeader& h);
  // Withdraws a receive that has not matched yet (returns false if it has).
  bool cancel(const std::shared_ptr<RecvRequest>& req);
  // Where a clear-to-send goes for an announced (RTS) message that a waiting
  // any-source receive took on another call's thread: the message became
  // next in its pair's order when an earlier one was matched (see
  // rematchAnySource). Called without the lock; set once, before traffic.
  using CtsDue = std::function<void(uint32_t src, uint64_t seq, uint32_t tag)>;
  void setCtsDue(CtsDue fn) { ctsDue_ = std::move(fn); }

  // Fails every posted receive with `e` and makes later calls fail.
  void failAll(const Error& e);
  // Rank `src` shut down cleanly and will send nothing more: fails receives
  // from it that are posted now or later (unless already buffered).
  void sourceClosed(uint32_t src, const Error& e);

  size_t unexpectedBytes() const;

 private:
  struct Part {
    uint64_t offset;
    uint32_t length;
    Scratch data;  // from the communicator's pool: no page faults per frame
    bool complete;
  };
  struct Unexpected {
    FrameHeader first;  // the first frame's header (signature, sizes)
    uint64_t arrival = 0;
    std::vector<Part> parts;
    std::shared_ptr<RecvRequest> bound;  // posted while a part was in flight
    bool rts = false;  // a ready-to-send announcement, no data yet
  };
  using DoneList = std::vector<std::pair<std::shared_ptr<RecvRequest>, std::unique_ptr<Error>>>;

  void checkCollective(const FrameHeader& h);
  std::string mismatchText(uint64_t seq, const OpSignature& mine, const FrameHeader& theirs) const;
  void validatePosted(const RecvRequest& req, const FrameHeader& h) const;
  bool bindAnySource(const FrameHeader& h);
  // The counter of pair (src, tag) moved on: waiting any-source receives of
  // that tag take the buffered messages that are now next in the pair's
  // order (out of order arrival: frames of two messages striped over
  // several connections). Under mu_; RTS messages taken go to *cts.
  void rematchAnySource(uint32_t src, uint32_t slot, DoneList* done, std::vector<MsgKey>* cts);
  void sendDueCts(const std::vector<MsgKey>& cts) const;
  // Returns true if `u` was a ready-to-send (a clear-to-send is due).
  bool absorb(const std::shared_ptr<RecvRequest>& req, Unexpected& u, DoneList* done);
  bool settlePart(const MsgKey& key, void* dst, bool ok, DoneList* done);
  void account(const std::shared_ptr<RecvRequest>& req, size_t bytes, DoneList* done);
  static void finishAll(DoneList& done);

  const Context ctx_;
  const size_t budget_;
  ScratchPool& pool_;
  mutable std::mutex mu_;
  std::condition_variable budgetCv_;
  std::unique_ptr<Error> poison_;
  std::map<MsgKey, std::shared_ptr<RecvRequest>> posted_;
  std::map<MsgKey, std::shared_ptr<RecvRequest>> failing_;  // failed, payload in flight
  std::map<MsgKey, Unexpected> unexpected_;
  std::vector<std::shared_ptr<RecvRequest>> anySource_;  // FIFO
  CtsDue ctsDue_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> recvCounter_;  // (src, tag) -> next
  std::map<uint64_t, OpSignature> active_;
  std::map<uint32_t, Error> closedSources_;
  uint64_t nextToStart_ = 0;
  uint64_t arrivals_ = 0;
  size_t unexpectedBytes_ = 0;
  RateLimiter budgetLog_{1, std::chrono::seconds(60)};
};

}  // namespace mccl
