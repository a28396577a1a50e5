#include "work.h"

#include <optional>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include "callback_pool.h"
#include "util/error.h"
#include "util/trace.h"

namespace mccl::torch_adapter {

namespace {

// The source location of the line that raises (c10 errors carry one).
#define MCCL_HERE() \
  c10::SourceLocation { __func__, __FILE__, static_cast<uint32_t>(__LINE__) }

}  // namespace

WorkMCCL::WorkMCCL(int rank, c10d::OpType type, const char* profilingTitle,
                   std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
                   std::vector<c10::Device> devices, bool callbacksOnCaller)
    : c10d::Work(rank, type, profilingTitle, std::optional<std::vector<at::Tensor>>(inputs)),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))),
      issuer_(callbacksOnCaller ? currentIssuer() : nullptr) {}

WorkMCCL::~WorkMCCL() = default;

void WorkMCCL::track(std::vector<std::shared_ptr<mccl::Work>> core, Staging staging) {
  core_ = std::move(core);
  staging_ = std::move(staging);
  description_ = core_.empty() ? std::string("mccl op") : core_[0]->description();
  pending_.store(static_cast<int>(core_.size()));
  if (core_.empty()) {
    onCoreDone();
    return;
  }
  // The callbacks keep this Work alive until they have run.
  c10::intrusive_ptr<WorkMCCL> self = c10::intrusive_ptr<WorkMCCL>::reclaim_copy(this);
  for (auto& w : core_) {
    w->onComplete([self] {
      if (self->pending_.fetch_sub(1) == 1) self->onCoreDone();
    });
  }
}

void WorkMCCL::trackPieces(std::vector<std::shared_ptr<mccl::Work>> core,
                           std::vector<Staging> pieces) {
  TORCH_INTERNAL_ASSERT(!core.empty() && core.size() == pieces.size());
  core_ = std::move(core);
  pieces_ = std::move(pieces);
  description_ = core_[0]->description();
  pending_.store(static_cast<int>(core_.size()));
  c10::intrusive_ptr<WorkMCCL> self = c10::intrusive_ptr<WorkMCCL>::reclaim_copy(this);
  for (size_t i = 0; i < core_.size(); ++i) {
    core_[i]->onComplete([self, i] {
      try {
        self->pieces_[i].finishPiece(self->core_[i]->exception() != nullptr);
      } catch (...) {
        // A failed copy-back fails the op (reported when the last piece is done).
        std::lock_guard<std::mutex> lock(self->mutex_);
        if (!self->pieceError_) self->pieceError_ = std::current_exception();
      }
      if (self->pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) self->onCoreDone();
    });
  }
}

void WorkMCCL::onCoreDone() {
  std::exception_ptr error;
  for (auto& w : core_) {
    if (!error) error = w->exception();
  }
  if (!error) {
    std::lock_guard<std::mutex> lock(mutex_);
    error = pieceError_;
  }
  if (error) error = toTorchError(error);
  // Marks Work and Future; for device ops this runs with the side stream
  // current, after the copy-backs were queued on it, so the Future's waiters
  // wait (on their streams) for the results.
  // (It may run later, on the completion thread: it holds this Work.)
  c10::intrusive_ptr<WorkMCCL> self = c10::intrusive_ptr<WorkMCCL>::reclaim_copy(this);
  std::function<void()> complete = [self, error] { self->markDone(error); };
  try {
    if (pieces_.empty()) {
      staging_.finish(error != nullptr, complete);
    } else {
      std::vector<EventPtr> after;
      for (size_t i = 0; i + 1 < pieces_.size(); ++i) {
        if (EventPtr e = pieces_[i].doneEvent()) after.push_back(e);
      }
      pieces_.back().finishJoined(error != nullptr, after, complete);
    }
  } catch (...) {
    // A failed copy-back: the op fails with it (complete() did not run).
    error = toTorchError(std::current_exception());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_) return;
    }
    markDone(error);
  }
}

void WorkMCCL::markDone(std::exception_ptr error) {
  auto mark = [future = future_, outputs = outputs_, error] {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
  };
  bool pooled = false;
  std::function<void()> endSpan;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
    completed_ = true;
    // The profiler's span of this op (c10d::Work's, begun at creation) ends
    // now, as c10d::Work::finish() ends it; left alone it would end when the
    // Work is destroyed.
    endSpan = std::move(recordFunctionEndCallback_);
    recordFunctionEndCallback_ = nullptr;
    exception_ = error;
    done_ = lastStaging().device() ? lastStaging().device()->done() : nullptr;
    if (issuer_) {
      // MPS: the results are in place and the Work is complete; the Future's
      // callbacks wait for a place where MPS is safe (device/callbacks.h).
      mark_ = deferMark(issuer_, mark);
    } else if (futureRequested_) {
      // The caller holds the Future, perhaps with callbacks that issue ops
      // and wait for them: never on this (MCCL) thread (callback_pool.h).
      pooled = true;
    } else {
      // Nobody holds the Future, so no callback can run here; getFuture()
      // waits for this (it takes mutex_).
      mark();
    }
  }
  trace::record(trace::Ev::kWorkDone, rank_, traceGroup_, 0, 0);
  if (endSpan) endSpan();
  if (pooled) {
    // Device ops: marked with the side stream current, as they are here.
    std::shared_ptr<DeviceStage> dev = lastStaging().device();
    runOnCallbackThread([dev, mark = std::move(mark)] {
      if (dev) {
        dev->ops().withSideCurrent(mark);
      } else {
        mark();
      }
    });
  }
  cv_.notify_all();
}

bool WorkMCCL::runMarkHere(int64_t timeoutMs) {
  std::shared_ptr<PendingMark> mark;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mark = mark_;
  }
  bool done = true;
  if (mark) {
    done = mark->runOrWait(mark->issuer() == currentIssuer() ? MarkedOn::kIssuer : MarkedOn::kWaiter, timeoutMs);
  }
  runMarksOfThisThread();
  return done;
}

void WorkMCCL::synchronize() {
  EventPtr done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = done_;
  }
  if (done && lastStaging().device()) lastStaging().device()->ops().currentWaits(done);
}

bool WorkMCCL::isCompleted() {
  std::shared_ptr<PendingMark> mark;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) return false;
    // A complete Work has a complete Future (marked on a callback thread).
    if (!futureCaughtUp()) return false;
    mark = mark_;
  }
  if (!mark) return true;
  // A complete Work has a complete Future: mark it here if nobody has; one
  // a runner is marking now is not complete yet (never waited for here).
  mark->tryRun(mark->issuer() == currentIssuer() ? MarkedOn::kIssuer : MarkedOn::kWaiter);
  runMarksOfThisThread();
  return mark->done() || mark->runningHere();  // (asked from a callback of its own op)
}

bool WorkMCCL::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkMCCL::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkMCCL::sourceRank() const {
  return core_.empty() ? -1 : core_[0]->sourceRank();
}

std::vector<at::Tensor> WorkMCCL::result() { return outputs_; }

bool WorkMCCL::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::optional<WaitingInCallback> waiting;
  if (!completed_) waiting.emplace();  // a callback on a runner, waiting for its op
  // Complete, and so is its Future if the caller holds it (marked on a
  // callback thread; a callback of this op waiting here finds it marked).
  // (MPS marks are run or waited for below.)
  auto complete = [&] { return completed_ && futureCaughtUp(); };
  if (timeout.count() > 0) {
    if (!cv_.wait_for(lock, timeout, complete)) {
      throw c10::DistBackendError(
          MCCL_HERE(), strCat(description_, ": not complete after Work.wait(timeout=",
                                 timeout.count(), " ms); the operation continues"));
    }
  } else {
    cv_.wait(lock, complete);
  }
  waiting.reset();
  lock.unlock();
  // The Future is complete when wait() returns, errors too.
  if (!runMarkHere(timeout.count())) {
    throw c10::DistBackendError(
        MCCL_HERE(), strCat(description_, ": its Future's callbacks still run after Work.wait(timeout=",
                               timeout.count(), " ms)"));
  }
  lock.lock();
  if (exception_) std::rethrow_exception(exception_);
  lock.unlock();
  synchronize();  // device ops: the caller's stream waits for the results
  trace::record(trace::Ev::kWaitReturned, rank_, traceGroup_, 0, 0);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkMCCL::getFuture() {
  runMarksOfThisThread();
  // Once, and every caller returns after it: the first callback, ahead of
  // any a caller adds. It runs once the Future is marked (at once if it
  // is), before the callers' callbacks, so a Work waited for from one of
  // them is complete.
  std::call_once(futureOnce_, [this] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      futureRequested_ = true;
    }
    c10::weak_intrusive_ptr<WorkMCCL> weak(c10::intrusive_ptr<WorkMCCL>::reclaim_copy(this));
    future_->addCallback([weak](c10::ivalue::Future&) {
      if (auto self = weak.lock()) {
        {
          std::lock_guard<std::mutex> lock(self->mutex_);
          self->futureMarked_ = true;
        }
        self->cv_.notify_all();
      }
    });
  });
  return future_;
}

std::exception_ptr toTorchError(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& x) {
    return std::make_exception_ptr(c10::DistBackendError(MCCL_HERE(), x.what()));
  }
}

void rethrowAsTorch(const std::exception& e) {
  if (auto* m = dynamic_cast<const Error*>(&e)) {
    if (m->kind() == ErrorKind::kUsage) throw c10::ValueError(MCCL_HERE(), m->what());
    throw c10::DistBackendError(MCCL_HERE(), m->what());
  }
  throw c10::DistBackendError(MCCL_HERE(), e.what());
}

}  // namespace mccl::torch_adapter
