#include "transport/frame.h"

#include <algorithm>

#include "transport/local_read.h"
#include "util/bytes.h"
#include "util/error.h"

namespace mccl {

const char* opKindName(OpKind op) {
  switch (op) {
    case OpKind::kNone: return "none";
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSendRecv: return "send/recv";
  }
  return "invalid-op";
}

std::string FrameHeader::describe() const {
  if (type == FrameType::kClose) return strCat("close from rank ", src);
  if (type == FrameType::kRts) return strCat("ready-to-send #", seq, " tag ", slot, " (", msgBytes, " bytes) from rank ", src);
  if (type == FrameType::kCts) return strCat("clear-to-send #", seq, " tag ", slot, " from rank ", src);
  if (type == FrameType::kAbort) return strCat("abort from rank ", src);
  if (isP2P()) {
    return strCat("send #", seq, " tag ", slot, " [offset ", offset, ", ", length,
                  " of ", msgBytes, " bytes] from rank ", src);
  }
  return strCat(opKindName(op), " #", seq, " slot ", slot, " [offset ", offset, ", ",
                length, " of ", msgBytes, " bytes] from rank ", src);
}

void encodeFrame(const FrameHeader& h, uint8_t* out) {
  putLE<uint32_t>(out + 0, kFrameMagic);
  putLE<uint16_t>(out + 4, kProtocolVersion);
  out[6] = static_cast<uint8_t>(h.type);
  out[7] = h.flags;
  putLE<uint64_t>(out + 8, h.group);
  putLE<uint64_t>(out + 16, h.seq);
  putLE<uint64_t>(out + 24, h.offset);
  putLE<uint64_t>(out + 32, h.msgBytes);
  putLE<uint64_t>(out + 40, h.count);
  putLE<uint32_t>(out + 48, h.slot);
  putLE<uint32_t>(out + 52, h.length);
  putLE<uint32_t>(out + 56, static_cast<uint32_t>(h.root));
  putLE<uint32_t>(out + 60, h.src);
  out[64] = static_cast<uint8_t>(h.op);
  out[65] = static_cast<uint8_t>(h.dtype);
  out[66] = static_cast<uint8_t>(h.redop);
  out[67] = h.algo;
  putLE<uint32_t>(out + kChecksumOffset, h.hasChecksum() ? h.checksum : 0);
}

bool decodeFrame(const uint8_t* in, uint32_t maxPayload, FrameHeader* h, std::string* why) {
  const uint32_t magic = getLE<uint32_t>(in);
  if (magic != kFrameMagic) {
    *why = strCat("bad magic 0x", std::hex, magic, " (not an MCCL frame)");
    return false;
  }
  const uint16_t version = getLE<uint16_t>(in + 4);
  if (version != kProtocolVersion) {
    *why = strCat("protocol version ", version, " (this build speaks ", kProtocolVersion, ")");
    return false;
  }
  const uint8_t type = in[6];
  if (type < 1 || type > kMaxFrameType) {
    *why = strCat("unknown frame type ", int{type});
    return false;
  }
  h->type = static_cast<FrameType>(type);
  h->flags = in[7];
  if ((h->flags & ~kKnownFlags) != 0) {
    *why = strCat("unknown flags 0x", std::hex, int{h->flags});
    return false;
  }
  h->group = getLE<uint64_t>(in + 8);
  h->seq = getLE<uint64_t>(in + 16);
  h->offset = getLE<uint64_t>(in + 24);
  h->msgBytes = getLE<uint64_t>(in + 32);
  h->count = getLE<uint64_t>(in + 40);
  h->slot = getLE<uint32_t>(in + 48);
  h->length = getLE<uint32_t>(in + 52);
  h->root = static_cast<int32_t>(getLE<uint32_t>(in + 56));
  h->src = getLE<uint32_t>(in + 60);
  const uint8_t op = in[64], dtype = in[65], redop = in[66];
  h->algo = in[67];
  if (op >= kNumOpKinds) {
    *why = strCat("unknown op kind ", int{op});
    return false;
  }
  if (!isValidDataType(dtype)) {
    *why = strCat("unknown dtype ", int{dtype});
    return false;
  }
  if (!isValidReduceOp(redop)) {
    *why = strCat("unknown reduce op ", int{redop});
    return false;
  }
  h->op = static_cast<OpKind>(op);
  h->dtype = static_cast<DataType>(dtype);
  h->redop = static_cast<ReduceOp>(redop);
  h->checksum = getLE<uint32_t>(in + kChecksumOffset);
  if (!h->hasChecksum() && h->checksum != 0) {
    *why = "checksum field is set without the checksum flag";
    return false;
  }
  switch (h->type) {
    case FrameType::kRts:
    case FrameType::kCts:
      if (h->length != 0 || !h->isP2P()) {
        *why = strCat("rendezvous frame with ", h->length, " payload bytes or without the p2p flag");
        return false;
      }
      return true;
    case FrameType::kClose:
      if (h->length != 0) {
        *why = strCat("close frame with ", h->length, " payload bytes");
        return false;
      }
      return true;
    case FrameType::kAbort:
      if (h->length > kMaxAbortMessage) {
        *why = strCat("abort message of ", h->length, " bytes (limit ", kMaxAbortMessage, ")");
        return false;
      }
      return true;
    case FrameType::kRefDone:
    case FrameType::kLocalOk:
      if (h->length != 0) {
        *why = strCat("control frame of type ", int{type}, " with ", h->length, " payload bytes");
        return false;
      }
      return true;
    case FrameType::kLocalHello:
      if (h->length != kLocalHelloBytes) {
        *why = strCat("local hello of ", h->length, " bytes (expected ", kLocalHelloBytes, ")");
        return false;
      }
      return true;
    case FrameType::kData:
    case FrameType::kRef:
      break;
  }
  if (h->length > maxPayload || h->length > kMaxFramePayload) {
    *why = strCat("payload length ", h->length, " exceeds the frame limit of ",
                  std::min(maxPayload, kMaxFramePayload), " bytes");
    return false;
  }
  if (h->offset > h->msgBytes || h->length > h->msgBytes - h->offset) {
    *why = strCat("payload [", h->offset, ", +", h->length, ") lies outside its ",
                  h->msgBytes, "-byte message");
    return false;
  }
  if (h->length == 0 && h->msgBytes != 0) {
    *why = "empty data frame of a non-empty message";
    return false;
  }
  if (!h->isP2P() && h->op == OpKind::kNone) {
    *why = "collective frame without an op kind";
    return false;
  }
  return true;
}

}  // namespace mccl
