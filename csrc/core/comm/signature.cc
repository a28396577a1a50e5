#include "comm/signature.h"

#include <atomic>
#include <vector>

#include "util/error.h"

namespace mccl {

namespace {
std::atomic<const char* (*)(Algo)> gNamer{nullptr};
}  // namespace

void setAlgoNamer(const char* (*namer)(Algo)) { gNamer.store(namer); }

std::string algoName(Algo a) {
  if (a == Algo::kNone) return "none";
  auto namer = gNamer.load();
  const char* name = namer ? namer(a) : nullptr;
  return name ? std::string(name) : strCat("algorithm #", static_cast<int>(a));
}

namespace {

bool hasReduce(OpKind op) {
  return op == OpKind::kAllreduce || op == OpKind::kReduce || op == OpKind::kReduceScatter;
}

bool hasRoot(OpKind op) {
  return op == OpKind::kBroadcast || op == OpKind::kReduce || op == OpKind::kGather ||
         op == OpKind::kScatter;
}

std::string describeFields(OpKind op, ReduceOp redop, DataType dtype, uint64_t count,
                           int32_t root, uint8_t algo) {
  std::string s = strCat(opKindName(op), "(");
  if (hasReduce(op)) s += strCat("op=", reduceOpName(redop), ", ");
  if (op != OpKind::kBarrier) s += strCat("dtype=", dtypeName(dtype), ", count=", count, ", ");
  if (hasRoot(op)) s += strCat("root=", root, ", ");
  s += strCat("algorithm=", algoName(static_cast<Algo>(algo)), ")");
  return s;
}

}  // namespace

std::string OpSignature::describe() const {
  return describeFields(op, redop, dtype, count, root, static_cast<uint8_t>(algo));
}

std::string OpSignature::describeFrame(const FrameHeader& h) {
  return describeFields(h.op, h.redop, h.dtype, h.count, h.root, h.algo);
}

void OpSignature::stamp(FrameHeader* h) const {
  h->op = op;
  h->dtype = dtype;
  h->redop = redop;
  h->root = root;
  h->count = count;
  h->algo = static_cast<uint8_t>(algo);
}

bool OpSignature::matches(const FrameHeader& h) const {
  return h.op == op && h.dtype == dtype && h.redop == redop && h.root == root &&
         h.count == count && h.algo == static_cast<uint8_t>(algo);
}

std::string OpSignature::difference(const FrameHeader& h) const {
  std::vector<const char*> d;
  if (h.op != op) d.push_back("the collective");
  if (h.dtype != dtype) d.push_back("dtype");
  if (h.count != count) d.push_back("element count");
  if (h.redop != redop) d.push_back("reduce op");
  if (h.root != root) d.push_back("root");
  if (h.algo != static_cast<uint8_t>(algo)) d.push_back("algorithm (is MCCL_ALGO or MCCL_SMALL_BYTES set differently on some ranks?)");
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += strCat(i == 0 ? "" : (i + 1 == d.size() ? " and " : ", "), d[i]);
  return s + (d.size() == 1 ? " differs" : " differ");
}

}  // namespace mccl
