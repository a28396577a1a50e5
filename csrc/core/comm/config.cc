#include "comm/config.h"

#include <map>
#include <sstream>

#include "comm/job_secret.h"
#include "reduce/wire.h"
#include "transport/listener.h"
#include "transport/socket.h"
#include "util/aead.h"
#include "util/logging.h"
#include "util/check.h"
#include "util/params.h"
#include "util/thread_priority.h"
#include "util/trace.h"

namespace mccl {

CommConfig CommConfig::fromEnv(int rank, int size) {
  CommConfig c;
  c.rank = rank;
  c.size = size;
  c.socketIfname = params::socketIfname();
  c.portRange = params::portRange();
  c.nsocksPerPeer = static_cast<int>(params::nsocksPerPeer());
  c.socketBuffer = static_cast<int>(params::socketBuffer());
  c.tcpCongestion = params::tcpCongestion();
  c.keepaliveS = static_cast<int>(params::keepaliveS());
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
  c.jobSecret = loadJobSecret();
  c.wireSecurity = params::wireSecurity();
  c.wireDtype = params::wireDtype();
  c.wireDtypeMinBytes = static_cast<size_t>(params::wireDtypeMinBytes());
  c.wireReduce = params::wireReduce();
  // The process's reduction helpers read MCCL_REDUCE_THREADS at the first
  // reduction; parsed here too, so a malformed value fails at init.
  (void)params::reduceThreads();
  // MCCL_THREAD_PRIORITY is read as each data-path thread starts: parsed
  // here too, so a malformed value fails at init.
  (void)parseThreadPriority(params::threadPriority());
  c.validate();
  return c;
}

void CommConfig::checkPieceBytes(size_t pieceBytes) {
  MCCL_USAGE_CHECK(pieceBytes == 0 || pieceBytes >= 1024,
                   "MCCL_PIECE_BYTES must be 0 (off) or at least 1K, got ", pieceBytes);
}

void CommConfig::validate() const {
  namespace spec = params::spec;
  MCCL_USAGE_CHECK(size >= 1, "world size must be at least 1, got ", size);
  MCCL_USAGE_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside [0, ", size, ")");
  params::checkRange(spec::nsocksPerPeer, nsocksPerPeer);
  params::checkRange(spec::socketBuffer, socketBuffer);
  params::checkRange(spec::keepaliveS, keepaliveS);
  if (!tcpCongestion.empty()) Socket::checkCongestion(tcpCongestion);
  params::checkRange(spec::chunkBytes, chunkBytes);
  params::checkRange(spec::frameBytes, frameBytes);
  params::checkRange(spec::inlineBytes, inlineBytes);
  params::checkRange(spec::localReadBytes, localReadBytes);
  params::checkRange(spec::unexpectedBytes, unexpectedBytes);
  params::checkRange(spec::p2pEagerBytes, p2pEagerBytes);
  params::checkRange(spec::smallBytes, smallBytes);
  params::checkRange(spec::inflightOps, inflightOps);
  params::checkRange(spec::pieceBytes, pieceBytes);
  params::checkRange(spec::handshakeTimeoutMs, handshakeTimeout.count());
  checkPieceBytes(pieceBytes);
  int lo = 0, hi = 0;
  MCCL_USAGE_CHECK(portRange.empty() || parsePortRange(portRange, &lo, &hi), "MCCL_PORT_RANGE=",
                   portRange, " is not LOW-HIGH with 1 <= LOW <= HIGH <= 65535 (decimal digits only)");
  trace::checkDir(params::traceDir());
  LogLevel level;
  MCCL_USAGE_CHECK(parseLogLevel(params::logLevel(), &level), "MCCL_LOG_LEVEL=", params::logLevel(),
                   " is not one of ERROR, WARN, INFO, DEBUG, TRACE");
  MCCL_USAGE_CHECK(wireSecurity == "off" || wireSecurity == "integrity" || wireSecurity == "encrypt",
                   "MCCL_WIRE_SECURITY=", wireSecurity, " is not one of off, integrity, encrypt");
  if (wireSecurity != "off") {
    std::string why;
    MCCL_USAGE_CHECK(Aead::available(&why), "MCCL_WIRE_SECURITY=", wireSecurity, " needs AES-GCM: ", why);
  }
  kernels::WireDtype wd;
  MCCL_USAGE_CHECK(kernels::parseWireDtype(wireDtype, &wd), "MCCL_WIRE_DTYPE=", wireDtype,
                   " is not one of fp32, bf16, fp16, int8");
  params::checkRange(spec::wireDtypeMinBytes, wireDtypeMinBytes);
  MCCL_USAGE_CHECK(wireReduce == "ring" || wireReduce == "pairwise" || wireReduce == "auto",
                   "MCCL_WIRE_REDUCE=", wireReduce, " is not one of ring, pairwise, auto");
  MCCL_USAGE_CHECK(unexpectedBytes >= frameBytes, "MCCL_UNEXPECTED_BYTES (", unexpectedBytes,
                   ") must be at least MCCL_FRAME_BYTES (", frameBytes, ")");
}

void CommConfig::applySetting(const std::string& env, const std::string& value) {
  namespace spec = params::spec;
  if (env == spec::wireDtype.env) {
    kernels::WireDtype w;
    MCCL_USAGE_CHECK(kernels::parseWireDtype(value, &w), "mccl.Options: wire_dtype '", value,
                     "' is not one of fp32, bf16, fp16, int8");
    wireDtype = value;
  } else if (env == spec::wireReduce.env) {
    MCCL_USAGE_CHECK(value == "ring" || value == "pairwise" || value == "auto", "mccl.Options: wire_reduce '",
                     value, "' is not one of ring, pairwise, auto");
    wireReduce = value;
  } else if (env == spec::wireDtypeMinBytes.env) {
    try {
      const int64_t v = parseSize(value, spec::wireDtypeMinBytes.env);
      params::checkRange(spec::wireDtypeMinBytes, v);
      wireDtypeMinBytes = static_cast<size_t>(v);
    } catch (const Error& e) {  // name the argument the caller gave, not only the variable
      throwError(e.kind(), "mccl.Options: wire_dtype_min_bytes '", value, "': ", e.what());
    }
  } else {
    throwError(ErrorKind::kUsage, "mccl.Options: ", env, " is not a setting a group may choose for itself");
  }
}

std::string CommConfig::wireSettings() const {
  namespace spec = params::spec;
  std::ostringstream out;
  out << spec::chunkBytes.env << "=" << chunkBytes << "\n"
      << spec::frameBytes.env << "=" << frameBytes << "\n"
      << spec::pieceBytes.env << "=" << pieceBytes << "\n"
      << spec::smallBytes.env << "=" << smallBytes << "\n"
      << spec::p2pEagerBytes.env << "=" << p2pEagerBytes << "\n"
      << spec::nsocksPerPeer.env << "=" << nsocksPerPeer << "\n"
      << spec::checksum.env << "=" << (checksum ? 1 : 0) << "\n"
      << spec::algo.env << "=" << algo << "\n"
      << spec::wireSecurity.env << "=" << wireSecurity << "\n"
      << spec::wireDtype.env << "=" << wireDtype << "\n"
      << spec::wireDtypeMinBytes.env << "=" << wireDtypeMinBytes << "\n"
      << spec::wireReduce.env << "=" << wireReduce << "\n";
  return out.str();
}

std::string CommConfig::wireMismatch(const std::string& rank0) const {
  auto parse = [](const std::string& text) {
    std::map<std::string, std::string> kv;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv;
  };
  const auto theirs = parse(rank0), mine = parse(wireSettings());
  for (const auto& [env, value] : mine) {
    auto it = theirs.find(env);
    const std::string other = it == theirs.end() ? "(not sent)" : it->second;
    if (other != value) {
      return strCat(env, " is '", value, "' on this rank but '", other,
                    "' on rank 0; settings that shape the wire must be the same on every rank");
    }
  }
  return "";
}

}  // namespace mccl
