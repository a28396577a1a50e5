// Test rig of the transport layer: a FrameSink that records what arrives, a
// connected pair of loopback sockets, and a Connection to "rank 1" whose
// peer is a raw socket the test writes bytes into.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/connection.h"
#include "transport/frame.h"

namespace mccl {

using namespace std::chrono_literals;

class RecordingSink : public FrameSink {
 public:
  void* payloadDest(Connection&, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lock(mu);
    ++dests;
    buffers.emplace_back(h.length);
    return h.length ? buffers.back().data() : nullptr;
  }
  void payloadDone(Connection&, const FrameHeader& h, void* dst) override {
    std::lock_guard<std::mutex> lock(mu);
    auto* p = static_cast<uint8_t*>(dst);
    done.emplace_back(p, p + h.length);
    headers.push_back(h);
    cv.notify_all();
  }
  void payloadAborted(Connection&, const FrameHeader&, void*) override {
    std::lock_guard<std::mutex> lock(mu);
    ++aborted;
  }
  void control(Connection&, const FrameHeader&, const std::string&) override {}
  void connectionEnded(Connection&, const Error* err) override {
    std::lock_guard<std::mutex> lock(mu);
    ++ends;
    error = err ? err->what() : "";
    cv.notify_all();
  }
  // Waits for the end of the connection; returns its error text.
  std::string waitEnd() {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 5s, [&] { return ends > 0; })) << "the connection did not end";
    return error;
  }
  bool waitFrames(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 5s, [&] { return done.size() >= n; });
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<uint8_t>> buffers, done;
  std::vector<FrameHeader> headers;
  int dests = 0, aborted = 0, ends = 0;
  std::string error;
};

// A connected pair of loopback TCP sockets.
inline std::pair<Socket, Socket> socketPair() {
  Socket listener;
  EXPECT_TRUE(Socket::tryListen(SockAddr::parse("127.0.0.1:0"), 4, &listener));
  Socket a = Socket::connect(listener.localAddr(), Deadline::after(2s), "test");
  int fd = ::accept(listener.fd(), nullptr, nullptr);
  EXPECT_GE(fd, 0);
  return {std::move(a), Socket(fd)};
}

inline FrameHeader dataHeader(uint32_t length) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.group = 77;
  h.seq = 5;
  h.msgBytes = length;
  h.count = length / 4;
  h.length = length;
  h.src = 1;
  h.op = OpKind::kAllreduce;
  h.dtype = DataType::kFloat32;
  return h;
}

inline std::vector<uint8_t> encoded(const FrameHeader& h) {
  std::vector<uint8_t> out(kFrameHeaderBytes);
  encodeFrame(h, out.data());
  return out;
}

// A Connection to "rank 1" reading from the fake peer's socket.
struct Rig {
  RecordingSink sink;
  Socket fake;
  std::unique_ptr<Connection> conn;

  // localReads > 0: the connection offers same-host reads from that size,
  // with session key `key`.
  // `setup` runs on the connection before it starts. Frames of at most
  // `inlineBytes` may be written by the posting thread (0: none).
  explicit Rig(size_t localReads = 0, const Digest& key = Digest{},
               const std::function<void(Connection&)>& setup = nullptr, size_t inlineBytes = 0) {
    auto [mine, theirs] = socketPair();
    fake = std::move(theirs);
    conn = std::make_unique<Connection>(std::move(mine), 1, sink, 1u << 20, inlineBytes,
                                        "connection to rank 1 (fake)");
    if (localReads > 0) {
      FrameHeader tmpl;
      tmpl.group = 77;
      tmpl.src = 0;
      conn->enableLocalReads(localReads, tmpl, key);
    }
    if (setup) setup(*conn);
    conn->start();
  }
  ~Rig() { conn->close(); }
  void send(const std::vector<uint8_t>& bytes) { fake.sendAll(bytes.data(), bytes.size()); }
};

}  // namespace mccl
