// Links: the transport a family of groups shares with the other processes:
// the listener, the connections by family rank (Peers), and the routing of
// incoming frames to the group that owns the links now.
//
// A group made by init_process_group or new_group starts a family: its
// ranks are the family ranks, and frames carry the sender's family rank.
// shrink() hands the links to a smaller group (same connections, same
// listener, same ports; ranks renumbered by the group, not on the wire).
// Frames carry their group's id, so the router tells apart:
//   - the owner's frames: delivered to it;
//   - frames of a group this family retired (the shrunk parent): read and
//     dropped (a peer's last frames of an aborted op, its late ABORT);
//   - frames of the owner's successor (a peer that shrank first and sends
//     on the new group already): the receive thread waits until this rank
//     shrinks too (TCP back-pressure holds the rest), or fails the link
//     after the group timeout, or drops it once this rank closes instead.
//
// Threads: FrameSink methods on connection receive threads; the listener's
// thread adopts; setOwner()/handover() on the thread that creates or
// shrinks a group; close() on the thread that shuts the last owner down.
//
// Lifetime: the owner is a plain pointer. Every call into it, and every
// payload between payloadDest() and payloadDone(), counts as busy;
// handover() returns only once the old owner is idle, so it may then be
// destroyed. The last owner closes the links (joining every connection
// thread) before it is destroyed. So no MCCL thread ever holds or drops
// the last reference to a group.
#pragma once

#include <condition_variable>
#include <set>
#include <memory>
#include <mutex>
#include <string>

#include "comm/config.h"
#include "comm/peers.h"
#include "comm/rendezvous.h"
#include "transport/connection.h"
#include "transport/handshake.h"
#include "transport/listener.h"

namespace mccl {

// What the group that owns the links hears from them. `h.src` and the
// ranks here are family ranks.
class LinkOwner {
 public:
  virtual ~LinkOwner() = default;
  virtual void* payloadDest(Connection& c, const FrameHeader& h) = 0;
  virtual void payloadDone(Connection& c, const FrameHeader& h, void* dst) = 0;
  virtual void payloadAborted(Connection& c, const FrameHeader& h, void* dst) = 0;
  virtual void control(Connection& c, const FrameHeader& h, const std::string& text) = 0;
  // A connection to family rank `peer` failed with `err`.
  virtual void linkFailed(int peer, const Error& err) = 0;
  // Family rank `peer` shut down cleanly: everything it sent has arrived.
  virtual void peerGone(int peer) = 0;
  // A new connection joined (the owner may tell it the group has failed).
  virtual void adopted(Connection& c) = 0;
};

// A buffer that a frame nobody waits for is read into and dropped (this
// receive thread's own), and whether `dst` is one.
void* discardBuffer(size_t bytes);
bool isDiscarded(const void* dst);

// The id of the group that shrinking group `id` creates (every survivor
// computes the same, without a rendezvous).
uint64_t successorGroupId(uint64_t id);

class Links final : public FrameSink {
 public:
  // `cfg` and `identity` are the family's (rank and size are family ranks).
  Links(const CommConfig& cfg, const Identity& identity, std::shared_ptr<Rendezvous> rendezvous,
        std::string selfName);
  ~Links() override;

  // Listens on `addr` and publishes the address in the store.
  void listen(const SockAddr& addr);
  const SockAddr& address() const { return listener_->address(); }
  size_t rejected() const { return listener_ ? listener_->rejected() : 0; }
  Peers& peers() { return peers_; }
  const Peers& peers() const { return peers_; }
  const Identity& identity() const { return identity_; }

  // The first owner (group `group`).
  void setOwner(LinkOwner* owner, uint64_t group);
  // Shrink: group `from` retires (its frames are dropped from now on) and
  // `to` (group successorGroupId(from)) receives; waiting frames resume.
  // Returns once nothing runs in, or reads into, the old owner.
  void handover(uint64_t from, LinkOwner* to, uint64_t toGroup);
  // The last owner is done: stop accepting, say goodbye or abort (see
  // Peers::closeAll), close.
  void close(bool graceful, const FrameHeader& tmpl, Deadline grace, const Error* why);

  // FrameSink.
  void* payloadDest(Connection& c, const FrameHeader& h) override;
  void payloadDone(Connection& c, const FrameHeader& h, void* dst) override;
  void payloadAborted(Connection& c, const FrameHeader& h, void* dst) override;
  void control(Connection& c, const FrameHeader& h, const std::string& text) override;
  void connectionEnded(Connection& c, const Error* err) override;

 private:
  // The owner for a frame of `group`, marked busy (release with done()), or
  // null when the group has retired or the links are closing (drop the
  // frame). Waits while `group` is the successor of the current group.
  // Throws for an unknown group.
  // `c`: the connection the frame came on (named in errors).
  LinkOwner* acquire(uint64_t group, bool wait, const Connection& c);
  LinkOwner* acquireCurrent();
  void done(LinkOwner* owner);

  const CommConfig cfg_;
  Identity identity_;  // listenPort set by listen(); the listener reads it
  std::shared_ptr<Rendezvous> rendezvous_;
  const std::string self_;
  Peers peers_;
  std::unique_ptr<Listener> listener_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t group_ = 0;
  LinkOwner* owner_ = nullptr;
  int busy_ = 0;      // calls into, and payloads toward, owner_
  int oldBusy_ = 0;   // the same for the owner being handed over
  LinkOwner* old_ = nullptr;
  std::set<uint64_t> retired_;
  bool closing_ = false;  // close() has begun: frames of groups other than the owner's are dropped
};

}  // namespace mccl
