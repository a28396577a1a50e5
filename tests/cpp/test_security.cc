// The job secret (comm/job_secret.h) and the wire settings agreed at
// bootstrap: a keyed group works and its store holds nothing that passes
// the handshake; a rank whose secret or wire settings differ from rank 0's
// is refused at creation, naming what differs; secret files are checked.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/job_secret.h"
#include "connection_rig.h"
#include "scoped_env.h"
#include "harness.h"
#include "transport/handshake.h"
#include "util/bytes.h"

namespace mccl::test {
namespace {

Secret jobSecretOf(char c) {
  const std::string text(40, c);
  return deriveJobSecret(text.data(), text.size());
}

// Creates `n` communicators on one store, each configured by `configure`;
// returns each rank's creation error ("" when it succeeded) and runs `fn`
// on the ones that were created.
std::vector<std::string> createRanks(int n, const std::function<void(int, CommConfig&)>& configure,
                                     const std::function<void(Communicator&)>& fn,
                                     std::shared_ptr<MemoryStore> store = nullptr) {
  if (!store) store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<Communicator> comm;
      try {
        CommConfig cfg = baseConfig(r, n);
        cfg.timeout = std::chrono::seconds(10);
        configure(r, cfg);
        comm = Communicator::create(store, cfg);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        return;
      }
      if (fn) fn(*comm);
      comm->shutdown();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(JobSecret, KeyedGroupWorksAndTheStoreHoldsNothingThatPassesTheHandshake) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<int> ok{0};
  std::vector<uint8_t> boot;
  auto errors = createRanks(
      3, [](int, CommConfig& c) { c.jobSecret = jobSecretOf('k'); },
      [&](Communicator& comm) {
        std::vector<int32_t> v{comm.rank() + 1, 7};
        AllreduceOptions o;
        o.buf = v.data();
        o.count = v.size();
        o.dtype = DataType::kInt32;
        o.op = ReduceOp::kSum;
        allreduce(comm, o)->wait();
        if (v[0] == 6 && v[1] == 21) ++ok;
        if (comm.rank() == 2) {
          // A reader of the store: it knows the group id, the salt and rank
          // 0's address, and tries the salt as the group's secret.
          boot = store->get("mccl/v1/bootstrap", std::chrono::seconds(1));
          Identity thief;
          thief.group = getLE<uint64_t>(boot.data());
          thief.rank = 2;
          thief.size = 3;
          std::memcpy(thief.secret.data(), boot.data() + 8, 32);
          auto addr = store->get("mccl/v1/addr/0", std::chrono::seconds(1));
          Socket s = Socket::connect(SockAddr::parse(std::string(addr.begin(), addr.end())),
                                     Deadline::after(std::chrono::seconds(2)), "thief");
          EXPECT_THROW(handshakeAsConnector(s, thief, 0, Deadline::after(std::chrono::seconds(5))),
                       Error);
        }
        // Keep every rank alive until the thief is done.
        std::vector<int32_t> w{1};
        AllreduceOptions b = o;
        b.buf = w.data();
        b.count = 1;
        allreduce(comm, b)->wait();
      },
      store);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(ok.load(), 3);
  ASSERT_GE(boot.size(), 41u);
  EXPECT_EQ(boot[40], 1) << "the record says the group is keyed";
  // The group's secret is derived, never stored.
  Secret salt;
  std::memcpy(salt.data(), boot.data() + 8, 32);
  const Secret derived = groupSecret(jobSecretOf('k'), getLE<uint64_t>(boot.data()), salt);
  EXPECT_EQ(std::search(boot.begin(), boot.end(), derived.begin(), derived.end()), boot.end());
}

TEST(JobSecret, RanksWithDifferentSecretsOrNoneAreRefused) {
  // Rank 1 has none while rank 0 has one: refused at creation, clearly.
  auto errors = createRanks(
      2, [](int r, CommConfig& c) { if (r == 0) c.jobSecret = jobSecretOf('a'); }, nullptr);
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("rank 0 has a job secret"), std::string::npos) << errors[1];
  // Both have one, but not the same: the handshake fails (each side learns
  // only that the other cannot prove the secret), and the collective fails
  // at once with that cause instead of waiting for its timeout.
  std::atomic<int> failed{0};
  std::mutex mu;
  std::vector<std::string> whys;
  const auto start = std::chrono::steady_clock::now();
  errors = createRanks(
      2, [](int r, CommConfig& c) { c.jobSecret = jobSecretOf(r == 0 ? 'a' : 'b'); },
      [&](Communicator& comm) {
        std::vector<float> v(3, 1.0f);
        AllreduceOptions o;
        o.buf = v.data();
        o.count = v.size();
        o.dtype = DataType::kFloat32;
        o.op = ReduceOp::kSum;
        // Rank 1 starts late, so rank 0 has failed and closed its listener:
        // rank 1's send is refused while it waits for rank 0's data, and
        // that refusal (not the timeout) must end its collective.
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        try {
          allreduce(comm, o)->wait();
        } catch (const Error& e) {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          whys.push_back(e.what());
        }
      });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(failed.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8))
      << "the ranks' 10 s timeout must not be what ends the collective";
  // At least one side names the cause; the other may instead see its peer
  // hang up mid-handshake (the peer already failed and shut down).
  int named = 0;
  for (const auto& w : whys) {
    named += w.find("MCCL_SECRET_FILE") != std::string::npos;
    EXPECT_NE(w.find("connection to rank"), std::string::npos) << w;
  }
  EXPECT_GE(named, 1) << whys[0];
}

TEST(WireSettings, DifferentChunkOrFrameSizesAreRefusedAtCreation) {
  auto errors = createRanks(
      3, [](int r, CommConfig& c) { if (r == 2) c.chunkBytes = 65536; }, nullptr);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[2].find("MCCL_CHUNK_BYTES is '65536' on this rank but '"), std::string::npos)
      << errors[2];
  EXPECT_NE(errors[2].find("rank 2/3"), std::string::npos) << errors[2];
  errors = createRanks(
      2, [](int r, CommConfig& c) { if (r == 1) c.algo = "allreduce=ring"; }, nullptr);
  EXPECT_NE(errors[1].find("MCCL_ALGO"), std::string::npos) << errors[1];
}

using Env = test::ScopedEnv;

std::string loadError() {
  try {
    loadJobSecret();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobSecret, SecretFilesAreCheckedStrictly) {
  char dir[] = "/tmp/mccl-secret-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/job.secret";
  auto write = [&](const std::string& body, mode_t mode) {
    ::unlink(path.c_str());
    int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
    ::close(fd);
    ::chmod(path.c_str(), mode);
  };
  const std::string good(64, 'x');
  {
    Env e("MCCL_SECRET_FILE", path);
    write(good, 0600);
    EXPECT_EQ(loadError(), "");
    EXPECT_EQ(*loadJobSecret(), deriveJobSecret(good.data(), good.size()));
    write(good, 0640);
    EXPECT_NE(loadError().find("chmod 600"), std::string::npos) << loadError();
    write(good, 0604);
    EXPECT_NE(loadError().find("mode is 0604"), std::string::npos) << loadError();
    write("short", 0600);
    EXPECT_NE(loadError().find("at least 32"), std::string::npos) << loadError();
    const std::string link = std::string(dir) + "/link";
    write(good, 0600);
    ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
    Env l("MCCL_SECRET_FILE", link);
    EXPECT_NE(loadError().find("symbolic links"), std::string::npos) << loadError();
    ::unlink(link.c_str());
  }
  {
    Env e("MCCL_SECRET_FILE", std::string(dir) + "/missing");
    EXPECT_NE(loadError().find("cannot open"), std::string::npos) << loadError();
  }
  {
    Env e("MCCL_SECRET", "too short");
    EXPECT_NE(loadError().find("at least 32"), std::string::npos) << loadError();
    EXPECT_EQ(loadError().find("too short"), std::string::npos) << "the value must not be shown";
    Env f("MCCL_SECRET_FILE", path);
    EXPECT_NE(loadError().find("both set"), std::string::npos) << loadError();
  }
  {
    Env e("MCCL_SECRET", std::string(32, 's'));
    EXPECT_EQ(loadError(), "");
  }
  EXPECT_FALSE(loadJobSecret().has_value());
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace mccl::test

namespace mccl::test {
namespace {

// A malicious member: it passes the handshake as rank 1 (it read the
// group's secret from the store) and then attacks rank 0's same-host reads.
// Rank 0's pending collective fails at once with the cause, and the group
// is poisoned; nothing of rank 0's memory is read for the attacker.
enum class LocalAttack { kReplayOwnHello, kRefWithoutAttestation, kLocalOkWithoutAttestation };

// Rank 1 played by the test: it read the group's secret from the store,
// passes the handshake with rank 0 and then writes raw frames.
struct RawRankOne {
  Identity me;
  Socket sock;
};

RawRankOne joinAsRankOne(Store& store) {
  auto boot = store.get("mccl/v1/bootstrap", std::chrono::seconds(5));
  RawRankOne one;
  one.me.group = getLE<uint64_t>(boot.data());
  one.me.rank = 1;
  one.me.size = 2;
  std::memcpy(one.me.secret.data(), boot.data() + 8, 32);
  auto addr = store.get("mccl/v1/addr/0", std::chrono::seconds(5));
  one.sock = Socket::connect(SockAddr::parse(std::string(addr.begin(), addr.end())),
                             Deadline::after(std::chrono::seconds(5)), "rank 1 (test)");
  handshakeAsConnector(one.sock, one.me, 0, Deadline::after(std::chrono::seconds(5)));
  return one;
}

void attackRankZero(LocalAttack attack, const std::string& expect) {
  auto store = std::make_shared<MemoryStore>();
  CommConfig cfg = baseConfig(0, 2);
  cfg.timeout = std::chrono::seconds(20);
  cfg.localReadBytes = 1;  // every frame would go by reference
  cfg.wireSecurity = "off";  // the attacker writes plain frames
  auto comm = Communicator::create(store, cfg);
  auto [me, s] = joinAsRankOne(*store);
  // Rank 0 greets with its LOCAL_HELLO.
  std::vector<uint8_t> hello(kFrameHeaderBytes + kLocalHelloBytes);
  ASSERT_TRUE(s.recvAll(hello.data(), hello.size(), Deadline::after(std::chrono::seconds(5))));
  FrameHeader h;
  std::string why;
  ASSERT_TRUE(decodeFrame(hello.data(), 1u << 30, &h, &why)) << why;
  ASSERT_EQ(h.type, FrameType::kLocalHello);
  // Rank 0 waits in a collective with rank 1.
  std::vector<float> v(1024, 1.0f);
  AllreduceOptions o;
  o.buf = v.data();
  o.count = v.size();
  o.dtype = DataType::kFloat32;
  o.op = ReduceOp::kSum;
  auto work = allreduce(*comm, o);
  std::vector<uint8_t> bytes;
  h.src = 1;
  h.group = me.group;
  switch (attack) {
    case LocalAttack::kReplayOwnHello:
      bytes = encoded(h);
      bytes.insert(bytes.end(), hello.begin() + kFrameHeaderBytes, hello.end());
      break;
    case LocalAttack::kRefWithoutAttestation: {
      FrameHeader r = h;
      r.type = FrameType::kRef;
      r.op = OpKind::kAllreduce;
      r.dtype = DataType::kFloat32;
      r.count = v.size();
      r.msgBytes = r.length = 4096;
      bytes = encoded(r);
      uint8_t desc[kRefDescriptorBytes] = {};
      putLE<uint64_t>(desc, reinterpret_cast<uintptr_t>(v.data()));  // "read your own buffer"
      bytes.insert(bytes.end(), desc, desc + sizeof(desc));
      break;
    }
    case LocalAttack::kLocalOkWithoutAttestation: {
      FrameHeader ok = h;
      ok.type = FrameType::kLocalOk;
      ok.length = 0;
      bytes = encoded(ok);
      break;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  s.sendAll(bytes.data(), bytes.size());
  try {
    work->wait();
    ADD_FAILURE() << "the collective survived the attack";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("connection to rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(comm->poisoned());
  comm->abort();
}

TEST(LocalReadAttack, ReplayedHelloFailsTheGroup) {
  attackRankZero(LocalAttack::kReplayOwnHello, "replayed");
}

TEST(LocalReadAttack, ReferenceFromAnUnattestedPeerFailsTheGroup) {
  attackRankZero(LocalAttack::kRefWithoutAttestation, "came by reference");
}

TEST(LocalReadAttack, LocalOkFromAnUnattestedPeerFailsTheGroup) {
  attackRankZero(LocalAttack::kLocalOkWithoutAttestation, "never proved");
}

// Rank 1 says goodbye but its socket stays open (its process is still
// closing). A send to it from then on fails at once naming the shutdown; it
// must not dial rank 1 again (whose listener is gone: a refused connect, or
// here a wait for an address that never comes).
TEST(PeerShutdown, GoodbyeBeforeTheSocketClosesIsAShutDownNotARedial) {
  auto store = std::make_shared<MemoryStore>();
  CommConfig cfg = baseConfig(0, 2);
  cfg.timeout = std::chrono::seconds(20);
  cfg.localReadBytes = 0;
  cfg.wireSecurity = "off";
  auto comm = Communicator::create(store, cfg);
  auto one = joinAsRankOne(*store);
  // A message first: once rank 0 has it, rank 0 reads this connection (its
  // listener hands a connection over after the handshake, so a send posted
  // before that would dial rank 1 itself).
  FrameHeader hello;
  hello.flags = kFlagP2P;
  hello.group = one.me.group;
  hello.src = 1;
  hello.slot = 2;  // the tag
  hello.op = OpKind::kSendRecv;
  hello.dtype = DataType::kInt32;
  hello.count = 1;
  hello.msgBytes = hello.length = 4;
  auto frame = encoded(hello);
  const int32_t answer = 42;
  frame.insert(frame.end(), reinterpret_cast<const uint8_t*>(&answer),
               reinterpret_cast<const uint8_t*>(&answer) + 4);
  one.sock.sendAll(frame.data(), frame.size());
  int32_t got = 0;
  recv(*comm, 1, 2, &got, 1, DataType::kInt32)->wait();
  ASSERT_EQ(got, 42);
  FrameHeader bye;
  bye.group = one.me.group;
  bye.src = 1;
  bye.type = FrameType::kClose;
  bye.offset = 1;  // it closes one connection: this one
  auto bytes = encoded(bye);
  one.sock.sendAll(bytes.data(), bytes.size());
  // Sends go out on the live connection until rank 0 has read the goodbye.
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  int32_t v = 7;
  while (error.empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(15)) {
    try {
      send(*comm, 1, 3, &v, 1, DataType::kInt32)->wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << error;
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("has shut down"), std::string::npos) << error;
  comm->abort();
}

}  // namespace
}  // namespace mccl::test
