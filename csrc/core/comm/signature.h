// What a collective is, as every participating rank must agree on it. It
// travels in each frame's header so a receiver can tell "ranks disagree on
// the collective" apart from a slow peer.
#pragma once

#include <cstdint>
#include <string>

#include "transport/frame.h"
#include "util/dtype.h"

namespace mccl {

// Algorithm ids (frame header `algo`): wire values, append only. Which
// collective runs which algorithm, by what name, is the algo layer's table
// (algo/registry.h); it installs the namer that algoName() asks.
enum class Algo : uint8_t {
  kNone = 0,
  kRing = 1,
  kRecursiveDoubling = 2,
  kDirect = 3,
  kBinomial = 4,
  kChain = 5,
  kPairwise = 6,
  kDissemination = 7,
  kBruck = 8,
  kRabenseifner = 9,
  kRecursiveMultiplying = 10,
  kTorus = 11,
  kRingWire = 12,      // the float32 sums of MCCL_WIRE_DTYPE=bf16|fp16, by ring
  kPairwiseWire = 13,  // the same by pairwise exchange (MCCL_WIRE_REDUCE)
  kPairwiseInt8 = 14,  // the float32 sums of MCCL_WIRE_DTYPE=int8
};
// "ring"; "none" for kNone; "algorithm #N" for an id no table names.
std::string algoName(Algo a);
// Installed once by the algorithm table; returns null for unknown ids.
void setAlgoNamer(const char* (*namer)(Algo));

struct OpSignature {
  OpKind op = OpKind::kNone;
  DataType dtype = DataType::kUInt8;
  ReduceOp redop = ReduceOp::kSum;
  int32_t root = -1;
  uint64_t count = 0;  // elements; meaning per op (see algo/collectives.h)
  Algo algo = Algo::kNone;

  // "allreduce(op=SUM, dtype=float32, count=1000, algorithm=ring)"
  std::string describe() const;
  // Fills the signature fields of a frame header.
  void stamp(FrameHeader* h) const;
  bool matches(const FrameHeader& h) const;
  // The same text for the signature a frame carries.
  static std::string describeFrame(const FrameHeader& h);
  // Names the fields that differ, e.g. "count and dtype differ".
  std::string difference(const FrameHeader& h) const;
};

}  // namespace mccl
