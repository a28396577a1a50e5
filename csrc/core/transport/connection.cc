#include "transport/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "util/thread_priority.h"
#include "util/bytes.h"
#include "util/check.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace mccl {
namespace {

constexpr size_t kReadBuffer = 256 * 1024;
constexpr size_t kDirectReadMin = 64 * 1024;  // larger remainders skip the buffer
constexpr int kMaxBatch = 64;
// Ciphertext of one batch when encrypting (a larger frame is a batch alone).
constexpr size_t kSealArenaBytes = 8 << 20;
// Sealed payloads above this are sealed, opened and written in pieces of it.
constexpr size_t kSealPieceBytes = 256 * 1024;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

Connection::Connection(Socket sock, int peer, FrameSink& sink, uint32_t maxPayload,
                       size_t inlineBytes, std::string name)
    : sock_(std::move(sock)),
      peer_(peer),
      peerAddr_(sock_.peerAddr()),
      sink_(sink),
      maxPayload_(maxPayload),
      inlineBytes_(inlineBytes),
      name_(std::move(name)),
      rbuf_(kReadBuffer) {}

Connection::~Connection() { close(); }

void Connection::enableLocalReads(size_t minBytes, const FrameHeader& tmpl, const Digest& key) {
  std::string why;
  offer_ = offerLocalReads(key, helloOut_, &why);
  if (!offer_) {
    MCCL_LOG(kDebug, name_, ": payloads stay on TCP: ", why);
    return;
  }
  refMin_ = minBytes;
  localTmpl_ = tmpl;
}

void Connection::enableSealing(bool encrypt, const Digest& sendKey, const Digest& recvKey) {
  sealer_ = std::make_unique<Aead>(sendKey);
  opener_ = std::make_unique<Aead>(recvKey);
  encrypt_ = encrypt;
}

void Connection::start() {
  if (refMin_ > 0) {
    // Queued for the send thread, never written here: the caller may hold
    // its own locks (Peers::adopt holds the peer's), and a write failing on
    // this thread would report the failure through the sink, which takes
    // them again.
    SendFrame f = localFrame(FrameType::kLocalHello, 0, helloOut_, kLocalHelloBytes);
    stamp(f);
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(f);
  }
  recvThread_ = std::thread([this] {
    recvThreadId_.store(std::this_thread::get_id());
    nameDataPathThread("mccl-recv");
    recvLoop();
  });
  sendThread_ = std::thread([this] {
    nameDataPathThread("mccl-send");
    sendLoop();
  });
}

SendFrame Connection::localFrame(FrameType type, uint64_t offset, const void* payload, size_t length) const {
  FrameHeader h = localTmpl_;
  h.type = type;
  h.offset = offset;
  h.length = static_cast<uint32_t>(length);
  SendFrame f;
  encodeFrame(h, f.header);
  f.payload = payload;
  f.length = length;
  return f;
}

void Connection::postLocal(FrameType type, uint64_t offset, const void* payload, size_t length) {
  post(localFrame(type, offset, payload, length));
}

void Connection::stamp(SendFrame& frame) const {
  if (checksum_ && frame.length > 0) {
    frame.header[kFlagsOffset] |= kFlagChecksum;
    putLE<uint32_t>(frame.header + kChecksumOffset, crc32c(frame.payload, frame.length));
  }
}

void Connection::post(SendFrame frame) {
  stamp(frame);
  std::unique_lock<std::mutex> lock(mu_);
  if (error_ || stopping_ || closeQueued_) {
    // A goodbye read first (its answer queued) is the cause to report;
    // not when this end closes (interrupt) or aborts on its own.
    Error e = error_ ? *error_
              : !stopping_ && !endingAbort_ && peerClosed_.load() ? goodbye("this frame was sent")
                                                                  : closing();
    lock.unlock();
    if (frame.cb) frame.cb->sendDone(&e);
    return;
  }
  if (refMin_ > 0 && frame.length >= refMin_ && !refsClosed_ &&
      frame.header[kTypeOffset] == static_cast<uint8_t>(FrameType::kData) &&
      peerReadsUs_.load(std::memory_order_relaxed)) {
    // By reference: the callback waits for the peer's REF_DONE.
    const uint64_t token = nextToken_++;
    frame.header[kTypeOffset] = static_cast<uint8_t>(FrameType::kRef);
    putLE<uint64_t>(frame.desc, reinterpret_cast<uintptr_t>(frame.payload));
    putLE<uint64_t>(frame.desc + 8, token);
    frame.byRef = true;
    pendingRefs_.emplace(token, frame.cb);  // a null callback is still a frame in flight
    frame.cb = nullptr;
    refsSent_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!queue_.empty() || writing_ || frame.wireLength() > inlineBytes_ || sealer_) {
    queue_.push_back(frame);
    if (queue_.size() == 1) cv_.notify_one();
    return;
  }
  // The socket is idle: write from this thread, without waiting for room.
  writing_ = true;
  lock.unlock();
  bool done = false;
  std::unique_ptr<Error> err;
  try {
    done = writeNow(frame);
  } catch (const Error& e) {
    err = std::make_unique<Error>(sendFailure(e));
  }
  if (afterInlineWrite_) afterInlineWrite_();
  lock.lock();
  writing_ = false;
  std::unique_ptr<Error> ended;  // the connection failed or began closing during the write
  if (!err && !done) {
    if (error_ || stopping_) {
      // Nobody would write the rest: the send thread has left or is
      // leaving, and fail() emptied the queue before this frame was in it.
      ended = std::make_unique<Error>(error_ ? *error_ : closing());
    } else {
      queue_.push_front(frame);  // the send thread writes the rest
    }
  }
  const bool wake = !queue_.empty();
  lock.unlock();
  if (wake) cv_.notify_one();
  if (ended) {
    if (frame.cb) frame.cb->sendDone(ended.get());
  } else if (err) {
    if (frame.cb) frame.cb->sendDone(err.get());
    if (!interrupted_.load()) fail(*err);
  } else if (done && frame.cb) {
    frame.cb->sendDone(nullptr);
  }
}

bool Connection::writeNow(SendFrame& f) {
  iovec iov[2];
  int n = 0;
  size_t skip = f.sent;
  if (skip < kFrameHeaderBytes) {
    iov[n++] = {f.header + skip, kFrameHeaderBytes - skip};
    skip = 0;
  } else {
    skip -= kFrameHeaderBytes;
  }
  if (f.wireLength() > skip) {
    iov[n++] = {const_cast<uint8_t*>(f.wirePayload()) + skip, f.wireLength() - skip};
  }
  f.sent += sock_.sendIovNow(iov, n);
  return f.sent == kFrameHeaderBytes + f.wireLength();
}

void Connection::postClose(const FrameHeader& h) {
  SendFrame f;
  encodeFrame(h, f.header);
  std::lock_guard<std::mutex> lock(mu_);
  if (closeQueued_ || error_ || stopping_) return;
  queue_.push_back(f);
  closeQueued_ = true;
  cv_.notify_one();
}

void Connection::postAbort(const FrameHeader& h, const Error& why) { queueAbort(h, why, true); }

void Connection::postGroupAbort(const FrameHeader& h, const Error& why) { queueAbort(h, why, false); }

void Connection::queueAbort(const FrameHeader& h, const Error& why, bool terminal) {
  std::deque<SendFrame> dropped;
  std::vector<SendCallback*> droppedRefs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_ || stopping_ || endingAbort_ || (!terminal && closeQueued_)) return;
    // Frames not yet on the wire are dropped: all of them when the
    // connection ends, else the aborted group's traffic. The connection's
    // own frames (the same-host hello and its answers) stay: the connection
    // outlives the group. A frame already partly written must be finished
    // first.
    std::deque<SendFrame> kept;
    for (size_t i = 0; i < queue_.size(); ++i) {
      SendFrame& f = queue_[i];
      const bool started = i == 0 && f.sent > 0;
      const auto type = static_cast<FrameType>(f.header[kTypeOffset]);
      const bool groupTraffic = type == FrameType::kData || type == FrameType::kRef ||
                                type == FrameType::kRts || type == FrameType::kCts;
      if (!started && (terminal || (groupTraffic && getLE<uint64_t>(f.header + 8) == h.group))) {
        dropped.push_back(f);
      } else {
        kept.push_back(f);
      }
    }
    queue_.swap(kept);
    for (const auto& f : dropped) {
      if (!f.byRef) continue;
      auto it = pendingRefs_.find(getLE<uint64_t>(f.desc + 8));
      if (it == pendingRefs_.end()) continue;
      if (it->second) droppedRefs.push_back(it->second);
      pendingRefs_.erase(it);
    }
    // The frame owns its text: freed once it is written (or dropped).
    auto text = std::make_shared<const std::string>(std::string(why.what()).substr(0, kMaxAbortMessage));
    FrameHeader a = h;
    a.type = FrameType::kAbort;
    a.slot = static_cast<uint32_t>(why.kind());  // the receiver re-raises the same kind
    a.length = static_cast<uint32_t>(text->size());
    SendFrame f;
    encodeFrame(a, f.header);
    f.payload = text->data();
    f.length = text->size();
    f.owned = std::move(text);
    queue_.push_back(f);
    if (terminal) closeQueued_ = endingAbort_ = true;
  }
  cv_.notify_one();
  for (auto& f : dropped) {
    if (f.cb) f.cb->sendDone(&why);
  }
  for (auto* cb : droppedRefs) cb->sendDone(&why);
}

void Connection::interrupt() {
  interrupted_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  sock_.shutdownBoth();
}

void Connection::close() {
  interrupt();
  if (recvThread_.joinable()) recvThread_.join();
  if (sendThread_.joinable()) sendThread_.join();
  if (offer_) withdrawLocalReads(*offer_);
  // Frames still queued never reached the wire.
  std::deque<SendFrame> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  Error e(ErrorKind::kAborted, strCat(name_, " was closed"));
  for (auto& f : left) {
    if (f.cb) f.cb->sendDone(&e);
  }
  failPendingRefs(e);
}

void Connection::failPendingRefs(const Error& e) {
  std::map<uint64_t, SendCallback*> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refsClosed_ = true;
    left.swap(pendingRefs_);
  }
  for (auto& [token, cb] : left) {
    if (cb) cb->sendDone(&e);
  }
}

void Connection::fail(const Error& e) {
  std::deque<SendFrame> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::make_unique<Error>(e);
    left.swap(queue_);
  }
  cv_.notify_all();
  sock_.shutdownBoth();
  for (auto& f : left) {
    if (f.cb) f.cb->sendDone(&e);
  }
  failPendingRefs(e);
  reportEnd(&e);
}

Error Connection::sendFailure(const Error& e) {
  // If the peer said goodbye, that is the cause: its CLOSE may still sit
  // unread in the socket, so let the receive thread read it first (bounded;
  // never from the receive thread itself).
  if (!interrupted_.load() && std::this_thread::get_id() != recvThreadId_.load()) {
    for (int i = 0; i < 100 && !recvDone_.load() && !peerClosed_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (peerClosed_.load()) return goodbye(strCat("this rank's frames reached it (", e.what(), ")"));
  return Error(e.kind(), strCat(name_, ": ", e.what()));
}

Error Connection::closing() const { return Error(ErrorKind::kAborted, strCat(name_, " is closing")); }

Error Connection::goodbye(const std::string& before) const {
  return Error(ErrorKind::kRemote,
               strCat(name_, ": the peer has shut down its process group (it said goodbye) before ", before));
}

void Connection::reportEnd(const Error* err) {
  if (!ended_.exchange(true)) sink_.connectionEnded(*this, err);
}

void Connection::sendLoop() {
  std::vector<SendFrame> batch;
  batch.reserve(kMaxBatch);
  iovec iov[3 * kMaxBatch];
  for (;;) {
    bool halfClose = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (!queue_.empty() && !writing_) || stopping_ || error_; });
      if (stopping_ || error_) break;
      size_t bytes = 0;  // bounds the ciphertext arena when encrypting
      while (!queue_.empty() && static_cast<int>(batch.size()) < kMaxBatch &&
             (batch.empty() || !encrypt_ || bytes + queue_.front().wireLength() <= kSealArenaBytes)) {
        bytes += queue_.front().wireLength();
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      halfClose = closeQueued_ && queue_.empty();
      writing_ = true;
    }
    int n = 0;
    for (auto& f : batch) {
      if (sealer_) break;  // writeSealed builds its own
      size_t skip = f.sent;  // only the first frame can be partly written
      if (skip < kFrameHeaderBytes) {
        iov[n++] = {f.header + skip, kFrameHeaderBytes - skip};
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      if (f.wireLength() > skip) {
        iov[n++] = {const_cast<uint8_t*>(f.wirePayload()) + skip, f.wireLength() - skip};
      }
    }
    std::unique_ptr<Error> err;
    try {
      if (sealer_) {
        writeSealed(batch);  // never partly written: no inline writes when sealed
      } else {
        sock_.sendIov(iov, n);
      }
    } catch (const Error& e) {
      err = std::make_unique<Error>(sendFailure(e));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
    }
    // Callbacks may post more frames (inline, now that writing_ is clear).
    for (auto& f : batch) {
      if (f.cb) f.cb->sendDone(err.get());
    }
    batch.clear();
    if (err) {
      if (!interrupted_.load()) fail(*err);
      break;
    }
    if (halfClose) {
      ::shutdown(sock_.fd(), SHUT_WR);
      break;
    }
  }
  sendDone_.store(true);
}

void Connection::writeSealed(std::vector<SendFrame>& batch) {
  // Small frames are sealed together and written with one sendmsg; a large
  // one is sealed piece by piece, each piece written as soon as it is
  // sealed, so sealing overlaps the network instead of preceding it.
  size_t small = 0;
  for (const auto& f : batch) {
    if (f.wireLength() <= kSealPieceBytes) small += f.wireLength();
  }
  if (encrypt_ && sealArena_.size() < small) sealArena_.resize(small);
  std::vector<iovec> iov;
  iov.reserve(3 * batch.size());
  size_t at = 0;
  auto flush = [&] {
    if (!iov.empty()) sock_.sendIov(iov.data(), static_cast<int>(iov.size()));
    iov.clear();
  };
  for (auto& f : batch) {
    const size_t len = f.wireLength();
    const uint8_t* body = f.wirePayload();
    if (len <= kSealPieceBytes) {
      uint8_t* out = encrypt_ && len > 0 ? sealArena_.data() + at : nullptr;
      sealer_->seal(f.header, kFrameHeaderBytes, body, len, out, f.tag);
      iov.push_back({f.header, kFrameHeaderBytes});
      if (len > 0) iov.push_back({out ? out : const_cast<uint8_t*>(body), len});
      iov.push_back({f.tag, kAeadTagBytes});
      if (out) at += len;
      continue;
    }
    flush();
    if (encrypt_ && sealPiece_.size() < kSealPieceBytes) sealPiece_.resize(kSealPieceBytes);
    sealer_->beginSeal(f.header, kFrameHeaderBytes);
    sock_.sendAll(f.header, kFrameHeaderBytes);
    for (size_t off = 0; off < len; off += kSealPieceBytes) {
      const size_t n = std::min(kSealPieceBytes, len - off);
      uint8_t* out = encrypt_ ? sealPiece_.data() : nullptr;
      sealer_->sealPiece(body + off, n, out);
      sock_.sendAll(out ? out : body + off, n);
    }
    sealer_->endSeal(f.tag);
    sock_.sendAll(f.tag, kAeadTagBytes);
  }
  flush();
}

void Connection::openBuffered(const uint8_t* header, size_t len, const FrameHeader* h) {
  fill(len + kAeadTagBytes);
  uint8_t* p = rbuf_.data() + rstart_;
  if (opener_->open(header, kFrameHeaderBytes, p, len, encrypt_, p + len)) {
    opened_.fetch_add(1, std::memory_order_relaxed);
  } else {
    protocolFault_ = true;
    throwError(ErrorKind::kRemote, name_, ": ", h ? h->describe() : std::string("a frame"),
               " failed authentication (MCCL_WIRE_SECURITY): "
               "forged, altered, replayed or reordered on the way, or the peer's keys differ");
  }
}

bool Connection::closeOpened() {
  fill(kAeadTagBytes);
  uint8_t tag[kAeadTagBytes];
  std::memcpy(tag, rbuf_.data() + rstart_, kAeadTagBytes);
  rstart_ += kAeadTagBytes;
  const bool ok = opener_->endOpen(tag);
  if (ok) opened_.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

void Connection::fill(size_t need, bool atFrameStart) {
  // Ensure `need` contiguous bytes are buffered at rstart_.
  if (rend_ - rstart_ >= need) return;
  if (rstart_ > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + rstart_, rend_ - rstart_);
    rend_ -= rstart_;
    rstart_ = 0;
  }
  while (rend_ < need) {
    // Read greedily to batch small frames, but right after a large payload
    // read just what is needed: the next frame is likely large too, and bytes
    // pulled into this buffer must be copied out again.
    size_t room = rbuf_.size() - rend_;
    if (afterLarge_) room = std::min(room, need - rend_);
    size_t n = sock_.recvSome(rbuf_.data() + rend_, room);
    if (n == 0) {
      if (atFrameStart && rend_ == 0) throw std::out_of_range("eof");  // clean EOF
      throwError(ErrorKind::kRemote, "connection closed in the middle of a frame (",
                 rend_, " of ", need, " bytes)");
    }
    rend_ += n;
  }
}

template <typename F>
void Connection::sinkCall(F&& f) {
  try {
    f();
  } catch (...) {
    protocolFault_ = true;
    throw;
  }
}

bool Connection::readFrame() {
  try {
    fill(kFrameHeaderBytes, /*atFrameStart=*/true);
  } catch (const std::out_of_range&) {
    return false;
  }
  FrameHeader h;
  std::string why;
  if (!decodeFrame(rbuf_.data() + rstart_, maxPayload_, &h, &why)) {
    protocolFault_ = true;
    throwError(ErrorKind::kRemote, name_, ": malformed frame: ", why);
  }
  uint8_t raw[kFrameHeaderBytes];  // what a sealed frame's tag covers
  std::memcpy(raw, rbuf_.data() + rstart_, kFrameHeaderBytes);
  rstart_ += kFrameHeaderBytes;
  const size_t tagBytes = opener_ ? kAeadTagBytes : 0;
  if (h.src != static_cast<uint32_t>(peer_)) {
    protocolFault_ = true;
    throwError(ErrorKind::kRemote, name_, ": frame claims to come from rank ", h.src);
  }
  if (h.type == FrameType::kLocalHello || h.type == FrameType::kLocalOk ||
      h.type == FrameType::kRefDone) {
    localControl(h, raw);
    return true;
  }
  const bool byRef = h.type == FrameType::kRef;
  if (h.type != FrameType::kData && !byRef) {
    std::string text;
    if (opener_) openBuffered(raw, h.length);  // bounded by kMaxAbortMessage < kReadBuffer
    if (h.length > 0) {
      fill(h.length);
      text.assign(reinterpret_cast<const char*>(rbuf_.data() + rstart_), h.length);
      rstart_ += h.length;
    }
    rstart_ += tagBytes;
    if (h.type == FrameType::kClose) {
      peerCloseCount_.store(h.offset);  // before peerClosed_, which readers check first
      peerClosed_.store(true);
    }
    sinkCall([&] { sink_.control(*this, h, text); });
    return true;
  }
  uint64_t refAddr = 0, refToken = 0;
  if (byRef) {
    if (!readsPeer_.load()) {
      protocolFault_ = true;
      throwError(ErrorKind::kRemote, name_, ": ", h.describe(),
                 " came by reference, but this end never confirmed it can read the peer's memory");
    }
    if (opener_) openBuffered(raw, kRefDescriptorBytes);
    fill(kRefDescriptorBytes);
    refAddr = getLE<uint64_t>(rbuf_.data() + rstart_);
    refToken = getLE<uint64_t>(rbuf_.data() + rstart_ + 8);
    rstart_ += kRefDescriptorBytes + tagBytes;
  }
  // A sealed frame that fits the read buffer's direct-read limit is opened
  // and its tag checked there before the sink is asked where it goes: a
  // forged or altered one never reaches a posted buffer. Larger ones are
  // opened as they land in the destination, the tag checked at the end (a
  // failed one is aborted there: its op fails, and the bytes written into
  // its buffer are the forger's).
  const bool verifiedFirst = opener_ && !byRef && h.length < kDirectReadMin;
  if (verifiedFirst) {
    afterLarge_ = false;  // fill greedily again: the next frame is likely small too
    openBuffered(raw, h.length, &h);
  }
  uint8_t* base = nullptr;
  sinkCall([&] { base = static_cast<uint8_t*>(sink_.payloadDest(*this, h)); });
  try {
    if (verifiedFirst) {
      if (h.length > 0) std::memcpy(base, rbuf_.data() + rstart_, h.length);
      rstart_ += h.length + kAeadTagBytes;
    } else if (byRef) {
      afterLarge_ = false;  // only the descriptor came over the socket
      try {
        peerMemory_.read(refAddr, base, h.length);
      } catch (const Error& e) {
        throwError(e.kind(), "reading ", h.describe(), " from the peer's memory: ", e.what());
      }
    } else {
      // Sealed: opened piece by piece as the bytes land (in cache, and
      // overlapping the network), the tag checked at the end.
      if (opener_) opener_->beginOpen(raw, kFrameHeaderBytes);
      uint8_t* dst = base;
      size_t left = h.length;
      size_t buffered = std::min(left, rend_ - rstart_);
      if (buffered > 0) {
        std::memcpy(dst, rbuf_.data() + rstart_, buffered);
        if (opener_) opener_->openPiece(dst, buffered, encrypt_);
        rstart_ += buffered;
        left -= buffered;
        dst += buffered;
      }
      afterLarge_ = left >= kDirectReadMin;
      if (left >= kDirectReadMin) {
        const size_t piece = opener_ ? kSealPieceBytes : left;
        while (left > 0) {
          const size_t n = std::min(piece, left);
          if (!sock_.recvAll(dst, n)) {
            throwError(ErrorKind::kRemote, "connection closed in the middle of a frame payload");
          }
          if (opener_) opener_->openPiece(dst, n, encrypt_);
          dst += n;
          left -= n;
        }
      } else if (left > 0) {
        fill(left);
        std::memcpy(dst, rbuf_.data() + rstart_, left);
        if (opener_) opener_->openPiece(dst, left, encrypt_);
        rstart_ += left;
      }
      if (opener_ && !closeOpened()) {
        protocolFault_ = true;
        throwError(ErrorKind::kRemote, name_, ": ", h.describe(),
                   " failed authentication (MCCL_WIRE_SECURITY): forged, altered, replayed or "
                   "reordered on the way, or the peer's keys differ");
      }
    }
  } catch (...) {
    sink_.payloadAborted(*this, h, base);
    throw;
  }
  if (byRef) postLocal(FrameType::kRefDone, refToken, nullptr, 0);  // the sender's memory is free
  if (h.hasChecksum()) {
    uint32_t got = crc32c(base, h.length);
    if (got != h.checksum) {
      sink_.payloadAborted(*this, h, base);
      protocolFault_ = true;  // keep the socket: the ABORT that follows names the cause
      throwError(ErrorKind::kRemote, name_, ": CRC32C mismatch in ", h.describe(), ": computed ",
                 hex32(got), ", the sender's was ", hex32(h.checksum),
                 "; the payload was corrupted between the two hosts (MCCL_CHECKSUM=1)");
    }
  }
  sinkCall([&] { sink_.payloadDone(*this, h, base); });
  return true;
}

void Connection::localControl(const FrameHeader& h, const uint8_t* raw) {
  if (opener_) {
    openBuffered(raw, h.type == FrameType::kLocalHello ? kLocalHelloBytes : 0);
  }
  const size_t tagBytes = opener_ ? kAeadTagBytes : 0;
  if (h.type == FrameType::kLocalHello) {
    fill(kLocalHelloBytes);
    uint8_t hello[kLocalHelloBytes];
    std::memcpy(hello, rbuf_.data() + rstart_, kLocalHelloBytes);
    rstart_ += kLocalHelloBytes + tagBytes;
    if (refMin_ == 0) return;  // reads are off here: never answer
    if (helloSeen_) {
      protocolFault_ = true;
      throwError(ErrorKind::kRemote, name_, ": a second LOCAL_HELLO");
    }
    helloSeen_ = true;
    if (std::memcmp(hello + 16, offer_->token.data(), offer_->token.size()) == 0) {
      protocolFault_ = true;
      throwError(ErrorKind::kRemote, name_,
                 ": LOCAL_HELLO carries this end's own token: the peer replayed this "
                 "process's hello back to it");
    }
    std::string why;
    if (attestPeer(hello, *offer_, &peerMemory_, &why)) {
      readsPeer_.store(true);
      MCCL_LOG(kDebug, name_, ": same host (pid ", peerMemory_.pid(),
               ", attested by the kernel); payloads from the peer are read from its memory");
      postLocal(FrameType::kLocalOk, 0, nullptr, 0);
    } else {
      MCCL_LOG(kDebug, name_, ": payloads from the peer stay on TCP: ", why);
    }
    return;
  }
  rstart_ += tagBytes;
  if (refMin_ == 0) {
    protocolFault_ = true;
    throwError(ErrorKind::kRemote, name_, ": same-host frame (type ", static_cast<int>(h.type),
               ") on a connection that offered no local reads");
  }
  if (h.type == FrameType::kLocalOk) {
    if (!offer_->attested.load()) {
      protocolFault_ = true;
      throwError(ErrorKind::kRemote, name_,
                 ": LOCAL_OK from a peer that never proved, on this host's attestation socket, "
                 "that it is a local process of this connection; nothing goes to it by reference");
    }
    peerReadsUs_.store(true);
    return;
  }
  SendCallback* cb = nullptr;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pendingRefs_.find(h.offset);
    if (it != pendingRefs_.end()) {
      known = true;
      cb = it->second;
      pendingRefs_.erase(it);
    }
  }
  if (!known) {
    protocolFault_ = true;
    throwError(ErrorKind::kRemote, name_, ": REF_DONE for token ", h.offset,
               ", which no frame in flight carries");
  }
  if (cb) cb->sendDone(nullptr);
}

void Connection::recvLoop() {
  try {
    while (readFrame()) {
    }
    // Clean EOF at a frame boundary.
    if (peerClosed_.load() || interrupted_.load()) {
      reportEnd(nullptr);
    } else {
      fail(Error(ErrorKind::kRemote,
                 strCat(name_, ": the peer closed the connection without shutting down "
                               "(its process exited or crashed)")));
    }
  } catch (const Error& e) {
    if (interrupted_.load()) {
      reportEnd(nullptr);
    } else if (protocolFault_) {
      // The bytes were fine but their meaning was not (a mismatch, a bad
      // header): keep the socket so the ABORT that follows reaches the peer.
      reportEnd(&e);
    } else if (peerClosed_.load()) {
      // The peer said goodbye; a reset after that is its close racing frames
      // of ours it never read, not a failure of the link.
      reportEnd(nullptr);
    } else {
      fail(Error(e.kind(), strCat(name_, ": ", e.what())));
    }
  } catch (const std::exception& e) {
    fail(Error(ErrorKind::kSystem, strCat(name_, ": ", e.what())));
  }
  // No REF_DONE can arrive any more. A peer that said goodbye shut down
  // before it read them: that is the cause, as for any other pending op.
  failPendingRefs(peerClosed_.load()
                      ? goodbye("it copied a payload offered to it by reference")
                      : Error(ErrorKind::kRemote, strCat(name_, ": the connection ended before the peer copied a "
                                                                "payload offered by reference")));
  recvDone_.store(true);
}

}  // namespace mccl
