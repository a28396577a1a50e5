#include "comm/config.h"

#include "util/check.h"
#include "util/params.h"

namespace mccl {

CommConfig CommConfig::fromEnv(int rank, int size) {
  CommConfig c;
  c.rank = rank;
  c.size = size;
  c.socketIfname = params::socketIfname();
  c.portRange = params::portRange();
  c.nsocksPerPeer = static_cast<int>(params::nsocksPerPeer());
  c.socketBuffer = static_cast<int>(params::socketBuffer());
  c.chunkBytes = static_cast<size_t>(params::chunkBytes());
  c.frameBytes = static_cast<size_t>(params::frameBytes());
  c.inlineBytes = static_cast<size_t>(params::inlineBytes());
  c.unexpectedBytes = static_cast<size_t>(params::unexpectedBytes());
  c.p2pEagerBytes = static_cast<size_t>(params::p2pEagerBytes());
  c.smallBytes = static_cast<size_t>(params::smallBytes());
  c.algo = params::algo();
  c.checksum = params::checksum() != 0;
  c.localReadBytes = static_cast<size_t>(params::localReadBytes());
  c.model = CostModel::load();
  c.inflightOps = static_cast<int>(params::inflightOps());
  c.pieceBytes = static_cast<size_t>(params::pieceBytes());
  c.handshakeTimeout = std::chrono::milliseconds(params::handshakeTimeoutMs());
  c.validate();
  return c;
}

void CommConfig::validate() const {
  MCCL_USAGE_CHECK(size >= 1, "world size must be at least 1, got ", size);
  MCCL_USAGE_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside [0, ", size, ")");
  MCCL_USAGE_CHECK(nsocksPerPeer >= 1 && nsocksPerPeer <= 64,
                   "MCCL_NSOCKS_PER_PEER must be in [1, 64], got ", nsocksPerPeer);
  MCCL_USAGE_CHECK(socketBuffer >= 0, "MCCL_SOCKET_BUFFER must be >= 0, got ", socketBuffer);
  MCCL_USAGE_CHECK(chunkBytes >= 4096 && chunkBytes <= (size_t{1} << 30),
                   "MCCL_CHUNK_BYTES must be in [4K, 1G], got ", chunkBytes);
  MCCL_USAGE_CHECK(pieceBytes == 0 || pieceBytes >= 1024,
                   "MCCL_PIECE_BYTES must be 0 (off) or at least 1K, got ", pieceBytes);
  MCCL_USAGE_CHECK(frameBytes >= 4096 && frameBytes <= (size_t{1} << 30),
                   "MCCL_FRAME_BYTES must be in [4K, 1G], got ", frameBytes);
  MCCL_USAGE_CHECK(unexpectedBytes >= frameBytes, "MCCL_UNEXPECTED_BYTES (", unexpectedBytes,
                   ") must be at least MCCL_FRAME_BYTES (", frameBytes, ")");
  MCCL_USAGE_CHECK(inflightOps >= 1 && inflightOps <= 64,
                   "MCCL_INFLIGHT_OPS must be in [1, 64], got ", inflightOps);
  MCCL_USAGE_CHECK(handshakeTimeout.count() > 0, "MCCL_HANDSHAKE_TIMEOUT_MS must be positive");
}

}  // namespace mccl
