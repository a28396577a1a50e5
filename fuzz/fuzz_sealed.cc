// libFuzzer target: a sealed connection's receive path (MCCL_WIRE_SECURITY).
// Random bytes never pass a tag, so the harness seals what the fuzzer
// writes the way an honest peer would, to reach the parser behind it:
//   byte 0: bit 0 encrypt, bit 1 flip one bit of the sealed stream
//   byte 1: where to flip it (scaled to the stream's length)
//   rest:   frames, each a 72-byte header as given, then min(its length
//           field, what is left) payload bytes
// The connection must end once, never crash, never ask for more payload
// memory than the frame limit, and deliver nothing from a flipped frame.
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "transport/connection.h"
#include "util/aead.h"
#include "util/bytes.h"

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
  void payloadDone(Connection&, const FrameHeader& h, void*) override {
    std::lock_guard<std::mutex> lock(mu);
    delivered.push_back(h.offset);
  }
  void payloadAborted(Connection&, const FrameHeader&, void*) override {}
  void control(Connection&, const FrameHeader&, const std::string&) override {}
  void connectionEnded(Connection&, const Error*) override {
    std::lock_guard<std::mutex> lock(mu);
    if (++ends > 1) std::abort();
    cv.notify_all();
  }
  std::vector<uint8_t> buf;
  std::vector<uint64_t> delivered;
  std::mutex mu;
  std::condition_variable cv;
  int ends = 0;
};

Digest key(uint8_t b) {
  Digest k;
  k.fill(b);
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool encrypt = data[0] & 1, flip = data[0] & 2;
  const uint8_t where = data[1];
  data += 2;
  size -= 2;
  // Seal the fuzzer's frames as the peer (rank 1) would.
  Aead peer(key(2));
  std::vector<uint8_t> stream;
  std::vector<std::pair<size_t, size_t>> spans;  // each frame's place in the stream
  size_t pos = 0;
  while (size - pos >= kFrameHeaderBytes) {
    const uint8_t* h = data + pos;
    const size_t len = std::min<size_t>(getLE<uint32_t>(h + 52), size - pos - kFrameHeaderBytes);
    const size_t start = stream.size();
    stream.insert(stream.end(), h, h + kFrameHeaderBytes);
    std::vector<uint8_t> body(h + kFrameHeaderBytes, h + kFrameHeaderBytes + len);
    uint8_t tag[kAeadTagBytes];
    peer.seal(h, kFrameHeaderBytes, body.data(), body.size(), encrypt ? body.data() : nullptr, tag);
    stream.insert(stream.end(), body.begin(), body.end());
    stream.insert(stream.end(), tag, tag + kAeadTagBytes);
    spans.emplace_back(start, stream.size());
    pos += kFrameHeaderBytes + len;
  }
  size_t flipped = SIZE_MAX;
  if (flip && !stream.empty()) {
    flipped = stream.size() * where / 256;
    stream[flipped] ^= 1;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  Sink sink;
  {
    Connection conn(Socket(fds[0]), 1, sink, kLimit, 0, "fuzz");
    conn.enableSealing(encrypt, key(1), key(2));
    conn.start();
    size_t sent = 0;
    while (sent < stream.size()) {
      ssize_t n = ::send(fds[1], stream.data() + sent, stream.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::close(fds[1]);
    std::unique_lock<std::mutex> lock(sink.mu);
    sink.cv.wait(lock, [&] { return sink.ends > 0; });
    lock.unlock();
    conn.close();
  }
  // A frame holding the flipped bit was never delivered: frames are
  // delivered in order, so at most those before it were.
  if (flipped != SIZE_MAX) {
    size_t before = 0;
    while (before < spans.size() && spans[before].second <= flipped) ++before;
    if (sink.delivered.size() > before) std::abort();
  }
  return 0;
}
