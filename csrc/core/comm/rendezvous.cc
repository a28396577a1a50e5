#include "comm/rendezvous.h"

#include <cstring>
#include <vector>

#include "util/bytes.h"
#include "util/check.h"
#include "util/random.h"

namespace mccl {

namespace {

constexpr const char* kBootstrapKey = "mccl/v1/bootstrap";

std::string addrKey(int rank) { return strCat("mccl/v1/addr/", rank); }

constexpr const char* kNotPublished =
    " is not in the store (that rank never joined this group, or it died before it did)";

}  // namespace

Rendezvous::Rendezvous(std::shared_ptr<Store> store, std::string who)
    : store_(std::move(store)), who_(std::move(who)) {}

Rendezvous::Record Rendezvous::exchange(int rank, const CostModel& model,
                                        const std::string& settings, bool keyed,
                                        std::chrono::milliseconds timeout) {
  // The record: group id (8 bytes), salt (32), flags (1: bit 0 = keyed by a
  // job secret), the settings' length (4) and text, then rank 0's cost model
  // as text.
  Record r;
  const size_t fixed = 8 + r.salt.size() + 1 + 4;
  std::vector<uint8_t> boot;
  if (rank == 0) {
    boot.resize(fixed);
    secureRandom(boot.data(), 8 + r.salt.size());
    boot[40] = keyed ? 1 : 0;
    putLE<uint32_t>(boot.data() + 41, static_cast<uint32_t>(settings.size()));
    boot.insert(boot.end(), settings.begin(), settings.end());
    std::string text = model.serialize();
    boot.insert(boot.end(), text.begin(), text.end());
    std::lock_guard<std::mutex> lock(mu_);
    store_->set(kBootstrapKey, boot);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    boot = store_->get(kBootstrapKey, timeout);
  }
  const uint32_t settingsLen = boot.size() >= fixed ? getLE<uint32_t>(boot.data() + 41) : 0;
  MCCL_USAGE_CHECK(boot.size() >= fixed && boot[40] <= 1 && settingsLen <= boot.size() - fixed,
                   who_, ": malformed bootstrap record in the store (", boot.size(),
                   " bytes); is another program, or another MCCL version, using the same store "
                   "prefix?");
  std::memcpy(&r.group, boot.data(), 8);
  std::memcpy(r.salt.data(), boot.data() + 8, r.salt.size());
  r.keyed = boot[40] == 1;
  const auto settingsBegin = boot.begin() + static_cast<long>(fixed);
  r.settings.assign(settingsBegin, settingsBegin + settingsLen);
  // Rank 0 too takes the model from the record, so that every rank holds
  // the same bits.
  r.model = CostModel::parse(std::string(settingsBegin + settingsLen, boot.end()), "rank 0's cost model");
  return r;
}

void Rendezvous::publishAddress(int rank, const SockAddr& addr) {
  std::string text = addr.toString();
  std::lock_guard<std::mutex> lock(mu_);
  store_->set(addrKey(rank), std::vector<uint8_t>(text.begin(), text.end()));
}

SockAddr Rendezvous::addressOf(int peer, Deadline deadline, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto left = deadline.isNever() ? timeout
                                   : std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline.time() - Clock::now());
    if (left.count() <= 0) left = std::chrono::milliseconds(1);
    try {
      bytes = store_->get(addrKey(peer), left);
    } catch (const Error& e) {
      throwError(e.kind(), who_, ": the address of rank ", peer, kNotPublished, ": ", e.what());
    } catch (const std::exception& e) {
      throwError(ErrorKind::kRemote, who_, ": the address of rank ", peer, kNotPublished, ": ", e.what());
    }
  }
  return SockAddr::parse(std::string(bytes.begin(), bytes.end()));
}

}  // namespace mccl
