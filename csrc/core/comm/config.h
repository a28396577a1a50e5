// Everything a communicator is configured with, snapshotted at creation.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "comm/cost_model.h"
#include "transport/handshake.h"
#include "util/params.h"

namespace mccl {

struct CommConfig {
  int rank = 0;
  int size = 1;
  // For messages only: "group 'default_pg'".
  std::string groupName = "group";
  // Default deadline of an operation, counted from when it starts executing.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Host of the rendezvous (master) address; picks the default interface.
  std::string routeHost;

  // From the MCCL_* environment; defaults and ranges are declared once, in
  // util/params.def (params::spec). See fromEnv() and validate().
  std::string socketIfname = params::spec::socketIfname.def;
  std::string portRange = params::spec::portRange.def;
  int nsocksPerPeer = static_cast<int>(params::spec::nsocksPerPeer.def);
  int socketBuffer = static_cast<int>(params::spec::socketBuffer.def);
  std::string tcpCongestion = params::spec::tcpCongestion.def;  // "": the system's
  int keepaliveS = static_cast<int>(params::spec::keepaliveS.def);  // 0: the kernel's
  size_t chunkBytes = params::spec::chunkBytes.def;
  size_t frameBytes = params::spec::frameBytes.def;
  size_t inlineBytes = params::spec::inlineBytes.def;
  bool checksum = params::spec::checksum.def != 0;  // CRC32C on every data frame
  // Frames of at least this size to a rank on this host are read from the
  // sender's memory (0: always TCP).
  size_t localReadBytes = params::spec::localReadBytes.def;
  size_t unexpectedBytes = params::spec::unexpectedBytes.def;
  size_t p2pEagerBytes = params::spec::p2pEagerBytes.def;
  size_t smallBytes = params::spec::smallBytes.def;
  std::string algo = params::spec::algo.def;
  // Chooses algorithms. Rank 0's is published to the group at bootstrap, so
  // on other ranks this is replaced by rank 0's.
  CostModel model;
  int inflightOps = static_cast<int>(params::spec::inflightOps.def);
  // all_reduce larger than twice this runs in pieces (0: never).
  size_t pieceBytes = params::spec::pieceBytes.def;
  std::chrono::milliseconds handshakeTimeout{params::spec::handshakeTimeoutMs.def};
  // MCCL_SECRET_FILE / MCCL_SECRET (comm/job_secret.h); empty: the store
  // carries each group's secret.
  std::optional<Secret> jobSecret;
  // MCCL_WIRE_SECURITY: "off", "integrity" or "encrypt".
  std::string wireSecurity = params::spec::wireSecurity.def;
  // MCCL_WIRE_DTYPE ("fp32", "bf16", "fp16") for float32 SUM/AVG all_reduce
  // of at least wireDtypeMinBytes.
  std::string wireDtype = params::spec::wireDtype.def;
  size_t wireDtypeMinBytes = params::spec::wireDtypeMinBytes.def;
  // MCCL_WIRE_REDUCE: "ring", "pairwise" or "auto".
  std::string wireReduce = params::spec::wireReduce.def;
  // Tests only: the listener waits this long after a handshake before the
  // connection joins the group (a listener descheduled at the wrong moment).
  std::chrono::milliseconds adoptDelayForTesting{0};

  // Reads the MCCL_* variables; throws a usage error naming a bad value.
  static CommConfig fromEnv(int rank, int size);
  // One group's own value of a setting (pg_options: mccl.Options), given by
  // its variable's name; only the settings a group may choose for itself
  // (MCCL_WIRE_DTYPE, MCCL_WIRE_DTYPE_MIN_BYTES, MCCL_WIRE_REDUCE). Throws a usage error for
  // another name or a malformed value.
  void applySetting(const std::string& env, const std::string& value);
  // MCCL_PIECE_BYTES beyond its declared range: 0 (off) or at least 1K.
  static void checkPieceBytes(size_t pieceBytes);
  // Checks every setting against its declared range (params.def) and the
  // rules between settings; throws a usage error naming the setting.
  void validate() const;
  // The settings that shape what goes on the wire, as "ENV=value" lines:
  // rank 0 publishes its own at bootstrap and every rank must match them.
  std::string wireSettings() const;
  // Empty when `rank0` (rank 0's wireSettings()) equals this rank's, else
  // which setting differs, with both values.
  std::string wireMismatch(const std::string& rank0) const;
};

}  // namespace mccl
