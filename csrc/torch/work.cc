#include "work.h"

#include <optional>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "callback_pool.h"
#include "util/error.h"
#include "util/trace.h"

namespace mccl::torch_adapter {

namespace {

// c10d renamed NCCLPreMulSumSupplement to PreMulSumSupplement (2.13 keeps
// the old name as an alias; 2.11 has only the old one).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
using PreMulSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSupplement = c10d::NCCLPreMulSumSupplement;
#endif

// The source location of the line that raises (c10 errors carry one).
#define MCCL_HERE() \
  c10::SourceLocation { __func__, __FILE__, static_cast<uint32_t>(__LINE__) }

}  // namespace

std::string dtypeLabel(at::ScalarType type) {
  switch (type) {
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kComplexHalf: return "complex32";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    default: break;
  }
  size_t per;
  try {
    return dtypeName(coreDtype(type, "", &per));
  } catch (const c10::Error&) {
    return c10::toString(type);
  }
}

DataType coreDtype(at::ScalarType type, const std::string& who, size_t* perElement) {
  *perElement = 1;
  switch (type) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUInt8;
    case at::kShort: return DataType::kInt16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kBool: return DataType::kBool;
    case at::kComplexFloat: *perElement = 2; return DataType::kFloat32;
    case at::kComplexDouble: *perElement = 2; return DataType::kFloat64;
    case at::kComplexHalf: *perElement = 2; return DataType::kFloat16;
    default: break;
  }
  TORCH_CHECK_TYPE(false, who, ": dtype ", dtypeLabel(type),
                   " is not supported (supported: float32, float64, float16, bfloat16, int8, "
                   "uint8, int16, int32, int64, bool, and complex as pairs of floats)");
}

CoreReduce coreReduce(const c10d::ReduceOp& op, at::ScalarType type, const std::string& who) {
  CoreReduce r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProduct; break;
    case c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; break;
    case c10d::ReduceOp::BAND: r.op = ReduceOp::kBAnd; break;
    case c10d::ReduceOp::BOR: r.op = ReduceOp::kBOr; break;
    case c10d::ReduceOp::BXOR: r.op = ReduceOp::kBXor; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.op = ReduceOp::kPreMulSum;
      auto* s = dynamic_cast<PreMulSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, who, ": PREMUL_SUM without a factor");
      if (s->tensor_factor.defined()) {
        TORCH_CHECK_VALUE(s->tensor_factor.numel() == 1, who,
                          ": PREMUL_SUM factor must have one element");
        at::Tensor f = s->tensor_factor.detach().cpu();
        if (f.is_complex()) {
          // The core multiplies by a real factor; dropping the imaginary
          // part would give a wrong sum without a word.
          const c10::complex<double> z = f.to(at::kComplexDouble).item<c10::complex<double>>();
          TORCH_CHECK_VALUE(z.imag() == 0.0, who, ": PREMUL_SUM factor ", z.real(), (z.imag() < 0 ? "" : "+"),
                            z.imag(), "j is complex; MCCL multiplies by real factors only (scale the tensor ",
                            "by it first, then reduce with SUM)");
          r.premulFactor = z.real();
        } else {
          r.premulFactor = f.to(at::kDouble).item<double>();
        }
      } else {
        r.premulFactor = s->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_VALUE(false, who, ": unknown reduce op ", static_cast<int>(op.op_));
  }
  if (at::isComplexType(type)) {
    // Complex numbers travel as (re, im) pairs: only element-wise linear ops apply.
    TORCH_CHECK_TYPE(r.op == ReduceOp::kSum || r.op == ReduceOp::kAvg || r.op == ReduceOp::kPreMulSum,
                     who, ": reduce op ", reduceOpName(r.op),
                     " is not defined for complex tensors (use SUM, AVG or PREMUL_SUM)");
    return r;
  }
  size_t per;
  std::string why = reduceRefusal(coreDtype(type, who, &per), r.op);
  TORCH_CHECK_TYPE(why.empty(), who, ": ", why);
  return r;
}

View Staging::viewOf(const at::Tensor& t) {
  size_t per = 1;
  View v;
  v.dtype = coreDtype(t.scalar_type(), who_, &per);
  v.count = static_cast<size_t>(t.numel()) * per;
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  return v;
}

DeviceStage& Staging::stage(const at::Tensor& t) {
  if (!dev_) {
    dev_ = std::make_shared<DeviceStage>(deviceOpsFor(t.device()), who_);
  } else {
    TORCH_CHECK_VALUE(dev_->device() == t.device(), who_, ": tensors on ", dev_->device(), " and ",
                      t.device(), " in one call; put them on one device");
  }
  return *dev_;
}

std::vector<c10::Device> Staging::devices() const {
  // Devices whose completion already waited for the copies (MPS, the fake
  // devices) get a plain Future: nothing may touch their streams from
  // MCCL's threads.
  if (!dev_ || !dev_->ops().futureOrdersStreams()) return {};
  return {dev_->device()};
}

View Staging::input(const at::Tensor& t) {
  if (stagedOnDevice(t)) return viewOf(stage(t).stageIn(t));
  at::Tensor c = t.contiguous();
  keep_.push_back(c);
  return viewOf(c);
}

View Staging::output(const at::Tensor& t) {
  if (stagedOnDevice(t)) return viewOf(stage(t).stageOut(t));
  if (t.is_contiguous()) {
    keep_.push_back(t);
    return viewOf(t);
  }
  return temporaryOutput(t);
}

View Staging::temporaryOutput(const at::Tensor& t) {
  at::Tensor tmp = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  copyBack_.emplace_back(t, tmp);
  return viewOf(tmp);
}

namespace {

// The bytes `t` can reach in its storage: [first, last).
std::pair<const char*, const char*> span(const at::Tensor& t) {
  const char* base = static_cast<const char*>(t.storage().data());
  const auto es = static_cast<int64_t>(t.element_size());
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::abs(t.stride(d));
  const char* first = base + t.storage_offset() * es;
  return {first, first + (last + 1) * es};
}

bool sharesMemory(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.has_storage() || !b.has_storage()) return false;
  // Two storages may still share host memory (from_numpy, from_blob,
  // DLPack): compare addresses there. Device storages are compared only
  // when they are one.
  if (!a.storage().is_alias_of(b.storage()) && !(a.is_cpu() && b.is_cpu())) return false;
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

View Staging::outputApart(const at::Tensor& t, const std::vector<at::Tensor>& reads) {
  if (stagedOnDevice(t)) return output(t);  // staged: its own host buffer already
  for (const auto& r : reads) {
    if (sharesMemory(t, r)) return temporaryOutput(t);
  }
  return output(t);
}

View Staging::inputApart(const at::Tensor& t, const at::Tensor& written) {
  if (stagedOnDevice(t) && sharesMemory(t, written)) {
    at::Tensor copy = t.clone(at::MemoryFormat::Contiguous);
    keep_.push_back(copy);
    return input(copy);
  }
  return input(t);
}

View Staging::inout(const at::Tensor& t) {
  if (stagedOnDevice(t)) return viewOf(stage(t).stageInOut(t));
  if (t.is_contiguous()) {
    keep_.push_back(t);
    return viewOf(t);
  }
  at::Tensor tmp = t.contiguous();
  copyBack_.emplace_back(t, tmp);
  return viewOf(tmp);
}

View Staging::flatten(const std::vector<at::Tensor>& ts, bool writeBack) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  at::Tensor buf = at::cat(flat);  // device tensors: on the caller's stream
  // Device tensors: the core works on the host copy; copy-backs come from it.
  if (stagedOnDevice(buf)) buf = stage(buf).stageIn(buf);
  if (writeBack) {
    int64_t at = 0;
    for (const auto& t : ts) {
      if (stagedOnDevice(t)) stage(t).checkWritable(t);
      copyBack_.emplace_back(t, buf.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  }
  keep_.push_back(buf);
  return viewOf(buf);
}

void Staging::finishPiece(bool error) {
  if (error) copyBack_.clear();  // nothing of a failed op reaches the caller's tensors
  if (!dev_) {
    for (auto& [dst, src] : copyBack_) dst.copy_(src);
    copyBack_.clear();
    return;
  }
  // Device tensors: copy-backs run on the side stream (the host sources are
  // pinned; the copies are asynchronous) before the done event.
  if (error) dev_->dropCopyBacks();
  for (auto& [dst, src] : copyBack_) dev_->copyBackLater(dst, src);
  copyBack_.clear();
  dev_->copyBack();
}

void Staging::copyBackAtEnd(const at::Tensor& dst, const at::Tensor& src) {
  if (stagedOnDevice(src)) {
    // Device memory the CPU can see is copied by the CPU (MPS Shared);
    // otherwise on the device's side stream.
    DeviceStage& ds = stage(src);
    at::Tensor view = ds.ops().hostView(src);
    ds.checkWritable(dst);
    atEnd_.emplace_back(dst, view.defined() ? view : src);
  } else {
    atEnd_.emplace_back(dst, src);
  }
}

void Staging::finishJoined(bool error, const std::vector<EventPtr>& after,
                           const std::function<void()>& complete) {
  keep_.clear();
  if (error) atEnd_.clear();
  if (!dev_) {
    for (auto& [dst, src] : atEnd_) dst.copy_(src);
    atEnd_.clear();
    complete();
    return;
  }
  if (atEnd_.empty()) {
    dev_->complete(after, complete);
    return;
  }
  // Every piece's results are in the contiguous copy before it is copied.
  for (const auto& e : after) dev_->ops().sideWaits(e);
  for (auto& [dst, src] : atEnd_) dev_->copyBackLater(dst, src);
  atEnd_.clear();
  dev_->copyBack();
  dev_->complete({}, complete);
}

void Staging::finish(bool error, const std::function<void()>& complete) {
  finishPiece(error);
  finishJoined(error, {}, complete);
}

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
      // callbacks wait for a place where MPS is safe (callbacks.h).
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
