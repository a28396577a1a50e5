// One authenticated TCP connection to a peer, carrying frames both ways.
//
// Threads: each Connection owns a receive thread and a send thread.
//  - The receive thread reads headers, validates them (decodeFrame), asks the
//    FrameSink where the payload goes and reads it there directly (zero copy
//    into posted buffers). FrameSink callbacks run on this thread.
//  - The send thread writes queued frames with sendmsg(2), batching small
//    ones, and calls each frame's SendCallback once its bytes are in the
//    kernel (after which the caller may reuse the payload memory).
//
// Same-host reads (enableLocalReads, transport/local_read.h): the two ends
// attest each other at start through the kernel; once the peer has said it
// can read this process, DATA frames of at least the threshold go as REF frames (header +
// descriptor) and their SendCallback runs when the peer's REF_DONE says the
// payload is copied, not when the bytes are in the kernel.
//
// Failure: the first error (I/O, malformed frame, sink exception) is reported
// once through FrameSink::connectionEnded, the socket is shut down, and every
// queued frame's callback receives the error. Nothing blocks forever: close()
// unblocks and joins both threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/frame.h"
#include "transport/local_read.h"
#include "transport/socket.h"
#include "util/aead.h"
#include "util/error.h"

namespace mccl {

class Connection;

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A validated DATA header; returns memory for h.length payload bytes (null
  // when h.length is 0). May block (back-pressure). Throws to fail the link.
  virtual void* payloadDest(Connection& c, const FrameHeader& h) = 0;
  // The payload of `h` now lies in `dst`.
  virtual void payloadDone(Connection& c, const FrameHeader& h, void* dst) = 0;
  // Reading the payload into `dst` failed; nothing more will be written there.
  virtual void payloadAborted(Connection& c, const FrameHeader& h, void* dst) = 0;
  // A CLOSE or ABORT frame; `text` is an ABORT's reason.
  virtual void control(Connection& c, const FrameHeader& h, const std::string& text) = 0;
  // Called exactly once when the connection ends: err is null after the
  // peer's CLOSE and a clean EOF (or after our own close), else the cause.
  virtual void connectionEnded(Connection& c, const Error* err) = 0;
};

class SendCallback {
 public:
  virtual ~SendCallback() = default;
  // Called once per frame on the send thread (or the posting thread when the
  // connection is already down): err is null when the bytes are written.
  virtual void sendDone(const Error* err) = 0;
};

struct SendFrame {
  uint8_t header[kFrameHeaderBytes];
  const void* payload = nullptr;
  size_t length = 0;
  SendCallback* cb = nullptr;
  size_t sent = 0;  // bytes of header + wire payload already written
  bool byRef = false;  // a REF frame: the descriptor goes on the wire, not the payload
  uint8_t desc[kRefDescriptorBytes] = {};
  uint8_t tag[kAeadTagBytes] = {};  // sealed connections (send thread)
  // The payload when the frame owns it (an ABORT's text): freed with the
  // last copy of the frame, once it is written or dropped.
  std::shared_ptr<const std::string> owned;

  const uint8_t* wirePayload() const {
    return byRef ? desc : static_cast<const uint8_t*>(payload);
  }
  size_t wireLength() const { return byRef ? kRefDescriptorBytes : length; }
};

class Connection {
 public:
  // Frames of at most `inlineBytes` payload are written by the posting
  // thread itself when the socket is idle and has room (no hand-off to the
  // send thread); larger ones, and the rest of a partial write, go to the
  // send thread.
  Connection(Socket sock, int peer, FrameSink& sink, uint32_t maxPayload, size_t inlineBytes,
             std::string name);
  ~Connection();

  // With checksums on, DATA frames posted here carry their payload's CRC32C
  // (computed by the posting thread). Frames that arrive with a checksum are
  // always verified. Set before start().
  void setChecksum(bool on) { checksum_ = on; }
  // Offers same-host reads: DATA frames of at least `minBytes` (> 0) go by
  // reference once the peer has been attested as a local process holding
  // the connection's session key `key` and said it reads this process, and
  // this end reads the peer's REF frames once it has attested the peer
  // (transport/local_read.h). `tmpl` gives the group and this rank for the
  // control frames. Set before start(); a no-op where reads do not exist.
  void enableLocalReads(size_t minBytes, const FrameHeader& tmpl, const Digest& key);
  // Seals every frame both ways (MCCL_WIRE_SECURITY): an AES-256-GCM tag
  // over header and payload follows each frame, under `sendKey` for frames
  // this end sends and `recvKey` for the peer's; with `encrypt` the
  // payloads are encrypted too. A frame whose tag fails ends the connection
  // as a protocol fault. Every frame then goes through the send thread.
  // Set before start().
  void enableSealing(bool encrypt, const Digest& sendKey, const Digest& recvKey);
  void start();
  int peer() const { return peer_; }
  const SockAddr& peerAddr() const { return peerAddr_; }
  const std::string& name() const { return name_; }

  // Sends or queues a frame; thread-safe and never blocks on the socket. The
  // callback may run before post() returns (written inline, or the
  // connection is down).
  void post(SendFrame frame);
  // Queues a CLOSE frame and, after it, half-closes the socket.
  void postClose(const FrameHeader& closeHeader);
  // Drops every queued frame (their callbacks get `why`), sends an ABORT
  // frame carrying `why` next, then half-closes the socket.
  void postAbort(const FrameHeader& abortHeader, const Error& why);
  // A group's failure, on a connection that outlives it (a shrunk group
  // takes its parent's connections over): drops the queued frames of group
  // abortHeader.group, sends an ABORT carrying `why` next, and stays up.
  void postGroupAbort(const FrameHeader& abortHeader, const Error& why);
  // Whether the connection has ended (reported through connectionEnded).
  bool ended() const { return ended_.load(); }
  // Whether the peer announced a clean shutdown.
  bool peerClosed() const { return peerClosed_.load(); }
  // How many connections to this end the peer said it closes (its CLOSE
  // frame's count; 0 before a CLOSE or for an uncounted one).
  uint64_t peerCloseCount() const { return peerCloseCount_.load(); }
  // Whether both threads have finished.
  bool finished() const { return recvDone_.load() && sendDone_.load(); }
  // Whether the send thread has finished (after a CLOSE or ABORT, once it is out).
  bool sendFinished() const { return sendDone_.load(); }

  // Same-host reads: whether payloads to the peer go by reference now,
  // whether this end reads the peer's, and how many REF frames it has sent.
  bool sendsByRef() const { return peerReadsUs_.load(); }
  bool readsPeer() const { return readsPeer_.load(); }
  uint64_t refFramesSent() const { return refsSent_.load(); }
  // Frames opened with a valid tag (MCCL_WIRE_SECURITY; 0 when off).
  uint64_t framesOpened() const { return opened_.load(); }

  // Tests: runs on a posting thread right after it has written (part of) a
  // frame itself, before it settles that frame: the window in which the
  // connection can fail under it. Set before start().
  void setAfterInlineWriteForTesting(std::function<void()> f) { afterInlineWrite_ = std::move(f); }

  // Unblocks both threads (shutdown(2)); does not join. Any thread.
  void interrupt();
  // interrupt() + join. Not from this connection's own threads.
  void close();

 private:
  void recvLoop();
  void sendLoop();
  // Writes what the socket takes now; returns true once the frame is out.
  bool writeNow(SendFrame& f);
  bool readFrame();  // false on clean EOF
  template <typename F>
  void sinkCall(F&& f);  // marks exceptions from the sink as protocol faults
  // Buffers `need` bytes. EOF throws std::out_of_range only when nothing of
  // a frame has been read yet (`atFrameStart`); elsewhere it is an error.
  void fill(size_t need, bool atFrameStart = false);
  void fail(const Error& e);
  void reportEnd(const Error* err);
  void queueAbort(const FrameHeader& h, const Error& why, bool terminal);
  // The error for a failed write: the peer's goodbye if it sent one.
  Error sendFailure(const Error& e);
  // The error of a send that the peer's goodbye overtook ("... before `before`").
  Error goodbye(const std::string& before) const;
  // The error of a frame posted while this end closes or aborts.
  Error closing() const;
  // Sealing: opens `len` buffered payload bytes at rstart_ (and the tag after
  // them, which it fills) in place; a protocol fault when the tag fails
  // (naming `h` when given).
  void openBuffered(const uint8_t* header, size_t len, const FrameHeader* h = nullptr);
  // Reads the tag of a payload opened piece by piece and checks it.
  bool closeOpened();
  // Seals and writes a batch (send thread).
  void writeSealed(std::vector<SendFrame>& batch);
  // Adds the payload's checksum to the header when checksums are on (once
  // per frame: post() does it, and start() for the hello it queues).
  void stamp(SendFrame& frame) const;
  // Same-host reads.
  SendFrame localFrame(FrameType type, uint64_t offset, const void* payload, size_t length) const;
  void postLocal(FrameType type, uint64_t offset, const void* payload, size_t length);
  void localControl(const FrameHeader& h, const uint8_t* raw);  // LOCAL_HELLO, LOCAL_OK, REF_DONE
  // Fails the REF frames the peer has not confirmed and stops new ones.
  void failPendingRefs(const Error& e);

  Socket sock_;
  const int peer_;
  SockAddr peerAddr_;
  FrameSink& sink_;
  const uint32_t maxPayload_;
  const size_t inlineBytes_;
  const std::string name_;
  bool checksum_ = false;
  // Sealing (enableSealing): sealer_ on the send thread, opener_ on the
  // receive thread.
  std::unique_ptr<Aead> sealer_, opener_;
  bool encrypt_ = false;
  std::vector<uint8_t> sealArena_, sealPiece_;
  std::atomic<uint64_t> opened_{0};
  std::function<void()> afterInlineWrite_;  // tests only

  // Receive side (receive thread only).
  std::vector<uint8_t> rbuf_;
  bool protocolFault_ = false;
  bool afterLarge_ = false;  // the last payload was read straight into place
  size_t rstart_ = 0, rend_ = 0;

  // Send side.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SendFrame> queue_;
  bool closeQueued_ = false;
  bool endingAbort_ = false;  // a terminal ABORT is queued
  bool writing_ = false;  // a thread is writing to the socket
  bool stopping_ = false;
  std::unique_ptr<Error> error_;  // first failure, guarded by mu_

  // Same-host reads. pendingRefs_ and refsClosed_ are guarded by mu_.
  size_t refMin_ = 0;  // 0: off
  FrameHeader localTmpl_;
  uint8_t helloOut_[kLocalHelloBytes] = {};
  std::shared_ptr<LocalOffer> offer_;  // set with refMin_
  bool helloSeen_ = false;  // receive thread only
  std::atomic<bool> peerReadsUs_{false};
  PeerMemory peerMemory_;  // receive thread only, once readsPeer_ is set
  std::atomic<bool> readsPeer_{false};
  std::map<uint64_t, SendCallback*> pendingRefs_;
  uint64_t nextToken_ = 1;
  bool refsClosed_ = false;
  std::atomic<uint64_t> refsSent_{0};

  std::atomic<bool> peerClosed_{false};
  std::atomic<uint64_t> peerCloseCount_{0};
  std::atomic<bool> ended_{false};
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> recvDone_{false}, sendDone_{false};
  std::thread recvThread_, sendThread_;
  // The receive thread's id, set by that thread: sendFailure() reads it on
  // other threads while start() or close() may be writing recvThread_.
  std::atomic<std::thread::id> recvThreadId_{};
};

}  // namespace mccl
