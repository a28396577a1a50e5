// The wire format of MCCL's data plane.
//
// Every frame is a fixed 72-byte header followed by `length` payload bytes:
//
//   off size field      meaning
//   0   4    magic      kFrameMagic
//   4   2    version    kProtocolVersion
//   6   1    type       FrameType (DATA, CLOSE, ABORT, RTS, CTS, REF, REF_DONE,
//                       LOCAL_HELLO, LOCAL_OK)
//   7   1    flags      kFlagP2P: seq/slot are a p2p counter and user tag;
//                       kFlagChecksum: `checksum` holds the payload's CRC32C
//   8   8    group      communicator id (random, agreed through the store)
//   16  8    seq        collective sequence number, or p2p counter
//   24  8    offset     byte offset of this payload within its message
//   32  8    msgBytes   total bytes of the message this frame belongs to
//   40  8    count      element count of the collective (its signature)
//   48  4    slot       algorithm step/chunk index, or p2p tag
//   52  4    length     payload bytes that follow
//   56  4    root       root rank of the collective, or -1
//   60  4    src        sender's rank
//   64  1    op         OpKind
//   65  1    dtype      DataType
//   66  1    redop      ReduceOp
//   67  1    algo       algorithm id chosen by the sender
//   68  4    checksum   CRC32C of the payload (MCCL_CHECKSUM=1), else zero
//
// A REF frame is a DATA frame whose payload stays in the sender's memory:
// `length` counts the payload as usual, but what follows the header on the
// wire is a 16-byte descriptor (address, token); the receiver copies the
// payload with process_vm_readv and answers REF_DONE carrying the token in
// `offset`. Only sent after the receiver said LOCAL_OK (transport/local_read.h).
//
// All integers are little-endian. decodeFrame() checks every field before the
// receiver allocates or writes anything, so a malformed or hostile header is
// rejected without touching memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/dtype.h"

namespace mccl {

constexpr uint32_t kFrameMagic = 0x4C43434Du;  // "MCCL" in memory order
// 3: an ABORT fails its group, not the connection (links.h); `src` is the
// sender's family rank (the rank in the group that made the links).
// 4: the handshake's MAC covers the connector's listening port and yields
// the session key. 5: recursive doubling folds onto the cost model's
// leaders (rdLeaders): its messages go elsewhere than a version 4 rank
// expects, so the two must not share a job. 6: the wire dtypes' algorithms
// carry ids of their own (ring_wire, pairwise_wire, pairwise_int8), where a
// version 5 rank stamps the ring's.
constexpr uint16_t kProtocolVersion = 6;
constexpr size_t kFrameHeaderBytes = 72;
// Hard ceiling on one frame's payload whatever MCCL_FRAME_BYTES says; frames
// are also bounded by the receiver's configured limit.
constexpr uint32_t kMaxFramePayload = 1u << 30;
constexpr uint32_t kMaxAbortMessage = 64 * 1024;

enum class FrameType : uint8_t {
  kData = 1,   // payload is part of a message
  kClose = 2,  // the sender is shutting down cleanly; no payload. `offset`: how
               // many connections to this peer it closes (0: not counted)
  kAbort = 3,  // the sender's communicator failed; payload is the reason
  kRts = 4,    // p2p rendezvous: a large message is ready to send; no payload
  kCts = 5,    // p2p rendezvous: its receive is posted, send it; no payload
  kRef = 6,         // DATA by reference: a descriptor follows, not the payload
  kRefDone = 7,     // a REF's payload was copied; token in `offset`, no payload
  kLocalHello = 8,  // the attestation socket and this end's token (same-host probe)
  kLocalOk = 9,     // the sender can read the receiver's memory; no payload
};
constexpr uint8_t kMaxFrameType = 9;
// Wire bytes after a REF header: the payload's address and a token.
constexpr size_t kRefDescriptorBytes = 16;

constexpr uint8_t kFlagP2P = 0x01;
constexpr uint8_t kFlagChecksum = 0x02;
// Byte offsets the sender patches after encoding (see Connection::post).
constexpr size_t kTypeOffset = 6;
constexpr size_t kFlagsOffset = 7;
constexpr size_t kChecksumOffset = 68;
constexpr uint8_t kKnownFlags = kFlagP2P | kFlagChecksum;

// Values travel in frames: append only.
enum class OpKind : uint8_t {
  kNone = 0,
  kAllreduce = 1,
  kBroadcast = 2,
  kReduce = 3,
  kAllgather = 4,
  kGather = 5,
  kScatter = 6,
  kReduceScatter = 7,
  kAlltoall = 8,
  kBarrier = 9,
  kSendRecv = 10,
};
constexpr int kNumOpKinds = 11;
const char* opKindName(OpKind op);

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint8_t flags = 0;
  uint64_t group = 0;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t msgBytes = 0;
  uint64_t count = 0;
  uint32_t slot = 0;
  uint32_t length = 0;
  int32_t root = -1;
  uint32_t src = 0;
  OpKind op = OpKind::kNone;
  DataType dtype = DataType::kUInt8;
  ReduceOp redop = ReduceOp::kSum;
  uint8_t algo = 0;
  uint32_t checksum = 0;  // valid when flags has kFlagChecksum

  bool isP2P() const { return (flags & kFlagP2P) != 0; }
  bool hasChecksum() const { return (flags & kFlagChecksum) != 0; }
  // "allreduce #12 slot 3 [offset 0, 4096 of 8192 bytes] from rank 1"
  std::string describe() const;
};

void encodeFrame(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);

// Decodes and validates a header. On failure returns false and sets *why to
// a sentence naming the bad field and its value. `maxPayload` bounds length.
bool decodeFrame(const uint8_t in[kFrameHeaderBytes], uint32_t maxPayload,
                 FrameHeader* out, std::string* why);

}  // namespace mccl
