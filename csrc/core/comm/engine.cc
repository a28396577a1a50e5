#include "comm/engine.h"

#include "comm/op_context.h"
#include "util/thread_priority.h"
#include "util/trace.h"

namespace mccl {

Engine::Engine(OpHost& host, Matching& matching, std::function<void(Clock::time_point)> newDeadline)
    : host_(host), matching_(matching), newDeadline_(std::move(newDeadline)) {}

Engine::~Engine() { stop(); }

void Engine::start() {
  thread_ = std::thread([this] {
    nameDataPathThread("mccl-engine");
    owner_.bindToThisThread();
    loop();
  });
}

std::shared_ptr<Work> Engine::submit(const OpSignature& sig, std::chrono::milliseconds timeout,
                                     Body body, std::string description, bool small) {
  QueuedOp now;
  std::shared_ptr<Work> work;
  {
    std::unique_lock<std::mutex> lock(queueMu_);
    work = std::make_shared<Work>(strCat(host_.selfName(), ": ", description, " #", nextSeq_));
    if (stopping_) {
      // A failed (or aborted) group names its cause; a shut-down one says so.
      work->complete(std::make_exception_ptr(
          host_.poisoned()
              ? Error(host_.poisonError().kind(),
                      strCat(work->description(), " failed: ", host_.poisonError().what()))
              : Error(ErrorKind::kAborted, strCat(host_.selfName(), ": ", work->description(),
                                                  " called after the communicator was shut down"))));
      return work;
    }
    QueuedOp q{nextSeq_++, sig, timeout, std::move(body), work};
    trace::record(trace::Ev::kSubmitted, host_.rank(), host_.groupId(), q.seq, 0);
    if (!small || !queue_.empty() || running_ >= host_.config().inflightOps) {
      queue_.push_back(std::move(q));
      queueCv_.notify_all();  // drain() may wait on the same condition
      return work;
    }
    now = std::move(q);
    beginLocked(now, lock);
  }
  startOp(now);
  return work;
}

void Engine::beginLocked(QueuedOp& q, std::unique_lock<std::mutex>& lock) {
  ++running_;
  // Ops begin in sequence order (this runs under queueMu_): frames are
  // checked against the op with their sequence number.
  if (host_.poisoned()) return;
  try {
    matching_.beginOp(q.seq, q.sig);
  } catch (const Error& e) {
    lock.unlock();
    host_.poison(Error(e.kind(), strCat(host_.selfName(), ": ", e.what())));
    lock.lock();
  }
}

void Engine::loop() {
  MCCL_ASSERT_ON(owner_);
  for (;;) {
    QueuedOp next;
    {
      std::unique_lock<std::mutex> lock(queueMu_);
      queueCv_.wait(lock, [&] {
        return (!queue_.empty() && running_ < host_.config().inflightOps) || (stopping_ && queue_.empty());
      });
      if (queue_.empty()) break;  // stopping
      next = std::move(queue_.front());
      queue_.pop_front();
      beginLocked(next, lock);
    }
    startOp(next);
  }
  reap();
}

void Engine::startOp(QueuedOp& q) {
  // Finished ops are freed here (before this one allocates), not by a
  // wake-up of the watchdog per op.
  reap();
  if (host_.poisoned()) {
    // Nothing of a poisoned group's op may run: it could touch user memory.
    Error p = host_.poisonError();
    opCompleted(q.seq, q.work,
                std::make_exception_ptr(Error(p.kind(), strCat(q.work->description(), " failed: ", p.what()))));
    return;
  }
  auto timeout = q.timeout.count() > 0 ? q.timeout : host_.config().timeout;
  auto op = std::make_shared<OpContext>(host_, q.seq, q.sig, Deadline::after(timeout), q.work);
  {
    std::lock_guard<std::mutex> lock(opsMu_);
    ops_.push_back(op);
  }
  newDeadline_(op->deadline().time());
  Task body;
  try {
    body = q.body(*op);
  } catch (...) {
    // Creating the coroutine failed (out of memory): the op fails with that.
    body = [](std::exception_ptr e) -> Task {
      std::rethrow_exception(e);
      co_return;
    }(std::current_exception());
  }
  op->start(std::move(body));
}

void Engine::opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) {
  matching_.endOp(seq);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    --running_;
    // Only the engine (with ops queued) or drain() can be waiting; waking
    // the idle engine after every op would cost a context switch each.
    wake = !queue_.empty() || draining_;
  }
  if (wake) queueCv_.notify_all();
  work->complete(error);
}

bool Engine::drain(std::chrono::milliseconds grace) {
  MCCL_ASSERT_OFF(owner_);
  std::unique_lock<std::mutex> lock(queueMu_);
  draining_ = true;
  bool idle = queueCv_.wait_for(lock, grace, [&] { return queue_.empty() && running_ == 0; });
  draining_ = false;
  return idle;
}

void Engine::stop() {
  MCCL_ASSERT_OFF(owner_);
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    stopping_ = true;
  }
  queueCv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::retire(const std::function<void()>& interrupt) {
  MCCL_ASSERT_OFF(owner_);
  Deadline limit = Deadline::after(std::chrono::seconds(2));
  while (!active().empty() && !limit.expired()) {
    reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (active().empty()) return;
  interrupt();
  Deadline hard = Deadline::after(std::chrono::seconds(10));
  while (!active().empty() && !hard.expired()) {
    reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<std::shared_ptr<OpContext>> Engine::active() {
  std::lock_guard<std::mutex> lock(opsMu_);
  return ops_;
}

void Engine::reap() {
  std::vector<std::shared_ptr<OpContext>> done;
  {
    std::lock_guard<std::mutex> lock(opsMu_);
    for (auto it = ops_.begin(); it != ops_.end();) {
      if ((*it)->reapable()) {
        done.push_back(std::move(*it));
        it = ops_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Frames are destroyed here, outside any lock and off their own stacks.
}

}  // namespace mccl
