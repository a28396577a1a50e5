// The parameters of MCCL's cost model (LogP-style α–β–γ with a per-message
// CPU overhead), measured by `mccl-bench --tune` and cached in a file.
//
// Every rank must choose algorithms alike, so only rank 0's model counts: it
// travels to the other ranks in the bootstrap record (comm/rendezvous.h).
#pragma once

#include <string>

namespace mccl {

struct CostModel {
  double alphaUs = 30.0;       // network latency of one message
  double overheadUs = 10.0;    // CPU time to send or to receive one message
  double betaNsPerByte = 0.8;  // link transfer time per byte (10 GbE ~ 0.8)
  double gammaNsPerByte = 0.1; // local reduction time per byte
  // Every rank runs on one host (rank 0 talks over loopback): the "links"
  // then share that host's cores and memory, so a step with fewer transfers
  // at once runs faster per byte than the ring (all n at once) under which
  // β was measured. Set at bootstrap, not read from tune files.
  bool sharedHost = false;
  // On a shared host, rank 0's MCCL_LOCAL_READ_BYTES: payloads from this size
  // are read from the sender's memory (β was measured on those), smaller ones
  // go over TCP loopback, so chain chunks stay at least this large. Set at
  // bootstrap; 0 elsewhere.
  size_t localReadBytes = 0;
  std::string source = "built-in defaults";

  // Defaults, then the tune file (MCCL_TUNE_FILE or ~/.cache/mccl/tune.conf)
  // when it exists, then MCCL_ALPHA_US & co. when set. Throws a usage error
  // for a malformed file.
  static CostModel load();
  // Parses "key=value" lines (alpha_us, overhead_us, beta_ns_per_byte,
  // gamma_ns_per_byte; shared_host, 0 or 1, and local_read_bytes in the
  // bootstrap record); '#' starts a comment.
  static CostModel parse(const std::string& text, const std::string& source);
  std::string serialize() const;
  // ~/.cache/mccl/tune.conf
  static std::string defaultPath();
  // The tune file to read and write: MCCL_TUNE_FILE, else defaultPath().
  static std::string tunePath();
};

}  // namespace mccl
