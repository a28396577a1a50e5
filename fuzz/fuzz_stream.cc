// libFuzzer target: a Connection's receive path (framing, buffering, direct
// reads, abort texts, checksums, same-host control frames) fed an arbitrary
// byte stream by a fake peer over a socket pair. It must end the connection
// once, with or without an error, never crash, and never ask for more
// payload memory than the frame limit.
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "transport/connection.h"

using namespace mccl;

namespace {

constexpr uint32_t kLimit = 64 * 1024;

class Sink : public FrameSink {
 public:
  void* payloadDest(Connection&, const FrameHeader& h) override {
    if (h.length > kLimit) std::abort();
    buf.resize(h.length);
    return h.length ? buf.data() : nullptr;
  }
  void payloadDone(Connection&, const FrameHeader&, void*) override {}
  void payloadAborted(Connection&, const FrameHeader&, void*) override {}
  void control(Connection&, const FrameHeader&, const std::string&) override {}
  void connectionEnded(Connection&, const Error*) override {
    std::lock_guard<std::mutex> lock(mu);
    if (++ends > 1) std::abort();
    cv.notify_all();
  }
  std::vector<uint8_t> buf;
  std::mutex mu;
  std::condition_variable cv;
  int ends = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  Sink sink;
  {
    Connection conn(Socket(fds[0]), 1, sink, kLimit, 0, "fuzz");
    FrameHeader tmpl;  // same-host frames are parsed too (attestation fails: no such peer)
    tmpl.src = 0;
    conn.enableLocalReads(1024, tmpl, Digest{});
    conn.start();
    // Non-blocking: once the connection has rejected the stream it stops
    // reading, and the rest is dropped (EAGAIN) instead of blocking here.
    size_t sent = 0;
    while (sent < size) {
      ssize_t n = ::send(fds[1], data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::close(fds[1]);
    std::unique_lock<std::mutex> lock(sink.mu);
    sink.cv.wait(lock, [&] { return sink.ends > 0; });
    lock.unlock();
    conn.close();
  }
  return 0;
}
