#include "comm/peer_probe.h"

#include <algorithm>

#include "util/thread_name.h"

namespace mccl {

namespace {
constexpr Clock::time_point kNone = Clock::time_point::max();
}

PeerProbe::PeerProbe(int size, std::chrono::milliseconds delay, std::chrono::milliseconds dial,
                     Needed needed, Dial dialFn)
    : delay_(delay),
      dial_(dial),
      needed_(std::move(needed)),
      dialFn_(std::move(dialFn)),
      due_(static_cast<size_t>(size), kNone),
      asked_(static_cast<size_t>(size), false),
      dials_(static_cast<size_t>(size), 0) {}

PeerProbe::~PeerProbe() { finish(); }

void PeerProbe::expect(int rank) {
  std::thread old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || rank < 0 || rank >= static_cast<int>(due_.size())) return;
    // Asked once: a peer that answers is connected from then on, and a dial
    // that proves nothing schedules the next itself (loop).
    if (asked_[static_cast<size_t>(rank)]) return;
    asked_[static_cast<size_t>(rank)] = true;
    due_[static_cast<size_t>(rank)] = Clock::now() + delay_;
    if (!running_) {
      // The thread ends when nothing is due (a group can live long with
      // nothing to probe); the last one has ended or is ending.
      try {
        std::thread fresh([this] {
          nameThisThread("mccl-probe");
          loop();
        });
        old = std::move(thread_);
        thread_ = std::move(fresh);
        running_ = true;
      } catch (...) {  // no thread: this peer goes unprobed (the op's timeout holds)
        return;
      }
    }
    cv_.notify_all();
  }
  if (old.joinable()) old.join();
}

void PeerProbe::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    auto next = std::min_element(due_.begin(), due_.end());
    if (*next == kNone) break;
    if (Clock::now() < *next) {
      cv_.wait_until(lock, *next);
      continue;
    }
    const int rank = static_cast<int>(next - due_.begin());
    *next = kNone;
    lock.unlock();
    bool settled = true;
    if (needed_(rank)) {
      {
        std::lock_guard<std::mutex> count(mu_);
        ++dialled_;
        ++dials_[static_cast<size_t>(rank)];
      }
      try {
        settled = dialFn_(rank, Deadline::after(dial_));
      } catch (...) {  // dial reports what it finds itself
      }
    }
    lock.lock();
    if (!settled && !stop_ && dials_[static_cast<size_t>(rank)] < kMaxDials) {
      due_[static_cast<size_t>(rank)] = Clock::now() + delay_;
    }
  }
  running_ = false;
}

void PeerProbe::finish() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

bool PeerProbe::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

int PeerProbe::dialled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dialled_;
}

}  // namespace mccl
