// libFuzzer target: the frame header parser. Whatever the bytes, decodeFrame
// must not crash, and what it accepts must be self-consistent and survive a
// round trip through encodeFrame.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "transport/frame.h"

using namespace mccl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kFrameHeaderBytes) return 0;
  // The receiver's limit varies with MCCL_FRAME_BYTES: take it from the tail.
  uint32_t maxPayload = 1u << 20;
  if (size >= kFrameHeaderBytes + 4) std::memcpy(&maxPayload, data + kFrameHeaderBytes, 4);
  FrameHeader h;
  std::string why;
  if (!decodeFrame(data, maxPayload, &h, &why)) {
    if (why.empty()) std::abort();  // every rejection says why
    return 0;
  }
  (void)h.describe();
  if (h.type == FrameType::kData) {
    if (h.length > maxPayload || h.length > kMaxFramePayload) std::abort();
    if (h.offset > h.msgBytes || h.length > h.msgBytes - h.offset) std::abort();
  }
  if (h.type == FrameType::kAbort && h.length > kMaxAbortMessage) std::abort();
  uint8_t again[kFrameHeaderBytes];
  encodeFrame(h, again);
  if (std::memcmp(again, data, kFrameHeaderBytes) != 0) std::abort();  // lossless
  return 0;
}
