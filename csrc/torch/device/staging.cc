#include "device/staging.h"

#include <c10/util/Exception.h>

#include "dtypes.h"

namespace mccl::torch_adapter {

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

}  // namespace mccl::torch_adapter
