// Everything a communicator is configured with, snapshotted at creation.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "comm/cost_model.h"

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

  // From the MCCL_* environment (util/params.def); see fromEnv().
  std::string socketIfname;
  std::string portRange;
  int nsocksPerPeer = 1;
  int socketBuffer = 0;
  size_t chunkBytes = 1 << 20;
  size_t frameBytes = 4 << 20;
  size_t inlineBytes = 64 << 10;
  bool checksum = false;  // CRC32C on every data frame (MCCL_CHECKSUM)
  // Frames of at least this size to a rank on this host are read from the
  // sender's memory (MCCL_LOCAL_READ_BYTES; 0: always TCP).
  size_t localReadBytes = 256 << 10;
  size_t unexpectedBytes = 32 << 20;
  size_t p2pEagerBytes = 1 << 20;
  size_t smallBytes = 64 << 10;
  std::string algo;
  // Chooses algorithms. Rank 0's is published to the group at bootstrap, so
  // on other ranks this is replaced by rank 0's.
  CostModel model;
  int inflightOps = 2;
  // all_reduce larger than twice this runs in pieces (0: never).
  size_t pieceBytes = 4 << 20;
  std::chrono::milliseconds handshakeTimeout{10000};
  // Tests only: the listener waits this long after a handshake before the
  // connection joins the group (a listener descheduled at the wrong moment).
  std::chrono::milliseconds adoptDelayForTesting{0};

  // Reads the MCCL_* variables; throws a usage error naming a bad value.
  static CommConfig fromEnv(int rank, int size);
  // Checks ranges; throws a usage error naming the setting.
  void validate() const;
};

}  // namespace mccl
