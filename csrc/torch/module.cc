// mccl._C: the Python binding. Registration with torch.distributed happens
// in python/mccl/__init__.py, which calls ProcessGroupMCCL's constructor.
#include <map>
#include <optional>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include "backend.h"
#include "c10d_ops.h"
#include "device/callbacks.h"
#include "device/completer.h"
#include "device/mps_device.h"
#include "device/fake_gpu.h"
#include "algo/model.h"
#include "algo/registry.h"
#include "algo/select.h"
#include "comm/config.h"
#include "comm/cost_model.h"
#include "reduce/parallel.h"
#include "reduce/wire_int8.h"
#include "transport/socket.h"
#include "util/dtype.h"
#include "util/params.h"

namespace py = pybind11;
using mccl::torch_adapter::ProcessGroupMCCL;

namespace {

// A cost model from mccl._C.cost_model()'s keys.
mccl::CostModel costModelFrom(py::dict model) {
  mccl::CostModel cm;
  cm.alphaUs = model["alpha_us"].cast<double>();
  cm.overheadUs = model["overhead_us"].cast<double>();
  cm.betaNsPerByte = model["beta_ns_per_byte"].cast<double>();
  cm.gammaNsPerByte = model["gamma_ns_per_byte"].cast<double>();
  return cm;
}

// The collective named `op` as in MCCL_ALGO ("allreduce"), or none.
std::optional<mccl::OpKind> opKindNamed(const std::string& op) {
  for (int k = 0; k < mccl::kNumOpKinds; ++k) {
    if (op == mccl::opKindName(static_cast<mccl::OpKind>(k))) return static_cast<mccl::OpKind>(k);
  }
  return std::nullopt;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "MCCL: collectives over TCP for torch.distributed (C++ core)";
  mccl::torch_adapter::installFakeDeviceFromEnv();
  m.def("_metal_compiled", &mccl::torch_adapter::metalPortCompiled,
        "Whether this build has the Metal port (built on macOS) or its portable stub");
  m.def("_fake_device_enabled", &mccl::torch_adapter::fakeDeviceEnabled,
        "Whether MCCL_FAKE_DEVICE_FOR_TESTING routes CPU tensors through the fake device");
  m.def("_fake_device_violations", &mccl::torch_adapter::fakeDeviceViolations,
        "Calls from MCCL threads that only the op's calling thread may make (fake device)");
  m.def("_fake_device_lifetime_violations", &mccl::torch_adapter::fakeDeviceLifetimeViolations,
        "Queued copies whose device tensor was freed before they ran (fake Metal port)");
  m.def("_fake_mps_copy_back_delay", &mccl::torch_adapter::setFakeCopyBackDelay,
        "Fake Metal port: each copy of results to the device takes `us` from now on (< 0: the "
        "port's own delay); tests of a slow device");
  m.def(
      "_mps_port_stats",
      []() -> py::object {
        using mccl::torch_adapter::MetalPort;
        std::shared_ptr<MetalPort> real;
        MetalPort* port = mccl::torch_adapter::fakeMetalPort();
        if (port == nullptr) {
          try {
            real = mccl::torch_adapter::metalPort("mccl");
          } catch (const std::exception&) {
            return py::none();  // no MPS here
          }
          port = real.get();
        }
        const MetalPort::Stats s = port->stats();
        py::dict d;
        d["fences"] = s.fences;
        d["stream_commits"] = s.streamCommits;
        d["queue_commits"] = s.queueCommits;
        d["buffer_allocations"] = s.bufferAllocations;
        return d;
      },
      "What MCCL's Metal port has done so far (fences, commits on PyTorch's stream and on "
      "MCCL's queue, staging buffers allocated); None where there is no MPS (nor fake port)");
  m.def(
      "_wire_bytes",
      [] {
        const mccl::WireBytes w = mccl::wireBytes();
        return std::make_pair(w.sent, w.received);
      },
      "(sent, received): bytes this process's MCCL sockets have carried so far, every group "
      "together (the status page's wire traffic of a member)");
  m.def("_on_completion_thread", &mccl::torch_adapter::onCompletionThread,
        "Whether the calling thread is MCCL's device completion thread (tests)");
  m.def("_on_callback_thread", &mccl::torch_adapter::onCallbackThread,
        "Whether the calling thread is one of MCCL's callback runner threads (tests)");
  m.def("_this_thread_stack_bytes", &mccl::torch_adapter::thisThreadStackBytes,
        "The calling thread's stack size in bytes, 0 if unknown (tests)");
  m.def(
      "_callback_counts",
      [] {
        auto c = mccl::torch_adapter::markCounts();
        return std::map<std::string, int64_t>{{"on_issuer", c.onIssuer}, {"on_waiter", c.onWaiter},
                                              {"while_quiet", c.whileQuiet},
                                              {"at_deadline", c.atDeadline}, {"pending", c.pending}};
      },
      "Where the Futures of MPS ops were marked (their then() callbacks run) so far, and how many "
      "wait: on the issuing thread, on a waiting thread, on a runner thread while every other thread "
      "was still, or past MCCL_CALLBACK_DEADLINE_MS");
  m.def(
      "_fake_device_kernel",
      [](at::Tensor t, double value, int64_t delayUs) {
        auto* stream = mccl::torch_adapter::fakeCallerStream();
        TORCH_CHECK(stream != nullptr, "no fake device (set MCCL_FAKE_DEVICE_FOR_TESTING)");
        stream->enqueue([t, value, delayUs]() mutable {
          std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
          t.fill_(value);
        });
      },
      "Queues a 'kernel' on the fake device's caller stream that fills `t` with `value` after "
      "`delay_us` (tests: an op must see the value, however late)");

  m.def(
      "_int8_round_trip",
      [](const at::Tensor& t) {
        TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(),
                    "mccl._C._int8_round_trip: a contiguous float32 CPU tensor, not ", t.toString(), " ",
                    t.sizes());
        at::Tensor out = at::empty_like(t);
        const auto n = static_cast<size_t>(t.numel());
        {
          py::gil_scoped_release release;
          std::vector<uint8_t> wire(mccl::kernels::int8WireBytes(n));
          mccl::kernels::toInt8Wire(wire.data(), t.data_ptr<float>(), n);
          mccl::kernels::fromInt8Wire(out.data_ptr<float>(), wire.data(), n);
        }
        return out;
      },
      "What the int8 wire delivers of `t` as one rank's contribution to an all_reduce: its values "
      "encoded (a scale per group of 256, counted from element 0) and decoded; error feedback "
      "keeps t minus this");

  // c10d's ops have no MPS kernels in PyTorch: MCCL's boxed ones serve them.
  mccl::torch_adapter::registerMpsKernels();
  m.def("_mps_kernels", &mccl::torch_adapter::registeredMpsKernels,
        "c10d ops MCCL registered MPS kernels for when it loaded (those torch lacks)");
  m.def(
      "_trace_names",
      [] {
        // op_start's slot in MCCL_TRACE_DIR's files is (op kind << 8) | algorithm.
        std::map<int, std::string> kinds, algos;
        (void)mccl::algo::algorithms();  // installs the algorithms' names
        for (int k = 0; k < mccl::kNumOpKinds; ++k) kinds[k] = mccl::opKindName(static_cast<mccl::OpKind>(k));
        for (int a = 0; a < 256; ++a) {
          std::string name = mccl::algoName(static_cast<mccl::Algo>(a));
          if (name.rfind("algorithm #", 0) != 0) algos[a] = name;
        }
        return std::make_pair(kinds, algos);
      },
      "The names of the op kinds and algorithms that MCCL_TRACE_DIR's op_start events number");
  m.def(
      "_register_boxed_kernels_for_testing",
      [](const std::string& ns, const std::string& key) {
        return mccl::torch_adapter::registerBoxedC10dKernels(ns, c10::parseDispatchKey(key));
      },
      "Registers MCCL's boxed c10d kernels on namespace `ns` for dispatch key `key` (tests "
      "define copies of c10d's schemas of several torch versions there)");
  m.def(
      "_script_reduce_op",
      [](int op) {
        auto r = c10::make_intrusive<c10d::ReduceOp>(static_cast<c10d::ReduceOp::RedOpType>(op));
        return torch::jit::toPyObject(c10::IValue(std::move(r)));
      },
      "A c10d ReduceOp as the TorchScript object c10d's dispatcher ops take (tests)");

  py::class_<ProcessGroupMCCL, c10d::Backend, c10::intrusive_ptr<ProcessGroupMCCL>>(
      m, "ProcessGroupMCCL")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& groupName,
                       const std::string& routeHost, const std::map<std::string, std::string>& settings) {
             return c10::make_intrusive<ProcessGroupMCCL>(store, rank, size, timeout, groupName,
                                                          routeHost, settings);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("group_name") = "", py::arg("route_host") = "",
           py::arg("settings") = std::map<std::string, std::string>{},
           py::call_guard<py::gil_scoped_release>())
      .def("_shutdown", &ProcessGroupMCCL::shutdown, py::call_guard<py::gil_scoped_release>(),
           "stops the group's threads and closes its connections (what torch >= 2.7's "
           "destroy_process_group does through c10d::Backend::shutdown)")
      .def("_algorithm_for", &ProcessGroupMCCL::algorithmFor, py::arg("op"), py::arg("tensor"),
           "what an all_reduce (SUM), broadcast or reduce (SUM) of `tensor` runs in this group: "
           "the algorithm its model and settings choose, or the wire algorithm that replaces it "
           "('torus', 'ring_wire (bf16)', 'pairwise_int8', 'ring in 16 pieces')")
      .def_property_readonly("address", &ProcessGroupMCCL::address,
                             "host:port this rank listens on")
      .def_property_readonly(
          "num_connections",
          [](ProcessGroupMCCL& pg) { return pg.comm().numConnections(); },
          "open TCP connections of this group (diagnostics)")
      .def_property_readonly(
          "interface", [](ProcessGroupMCCL& pg) { return pg.comm().interfaceName(); },
          "network interface this rank listens on")
      .def_property_readonly(
          "ref_frames_sent",
          [](ProcessGroupMCCL& pg) { return pg.comm().refFramesSent(); },
          "frames whose payload a same-host peer read from this process's memory "
          "(MCCL_LOCAL_READ_BYTES; diagnostics)")
      .def_property_readonly(
          "sealed_frames_received",
          [](ProcessGroupMCCL& pg) { return pg.comm().sealedFramesReceived(); },
          "frames that arrived with a valid AES-GCM tag (MCCL_WIRE_SECURITY; diagnostics)")
      .def(
          "_learn_addresses", [](ProcessGroupMCCL& pg) { pg.comm().learnAddresses(); },
          py::call_guard<py::gil_scoped_release>(),
          "waits until every rank has published its listen address and keeps them all, so that "
          "later connections need no store (mccl.elastic calls it as each generation's group forms)")
      .def_property_readonly(
          "failed_peers", [](ProcessGroupMCCL& pg) { return pg.comm().failedPeers(); },
          "ranks of this group whose connection failed (the peers this rank saw die)")
      .def_property_readonly(
          "rejected_connections",
          [](ProcessGroupMCCL& pg) { return pg.comm().rejectedConnections(); },
          "connections closed for failing the handshake (strangers; diagnostics)");

  m.def(
      "params",
      [] {
        py::list out;
        for (const auto& p : mccl::allParams()) {
          py::dict d;
          d["name"] = p.env;
          d["type"] = p.type;
          d["default"] = p.defaultValue;
          d["doc"] = p.doc;
          d["range"] = p.range;
          out.append(d);
        }
        return out;
      },
      "Every MCCL_* setting: name, type, default, doc");

  m.def(
      "reduce_supported",
      [](const std::string& dtype, const std::string& op) {
        for (int d = 0; d < mccl::kNumDataTypes; ++d) {
          auto dt = static_cast<mccl::DataType>(d);
          if (dtype != mccl::dtypeName(dt)) continue;
          for (int o = 0; o < mccl::kNumReduceOps; ++o) {
            auto ro = static_cast<mccl::ReduceOp>(o);
            if (op == mccl::reduceOpName(ro)) return mccl::reduceSupported(dt, ro);
          }
        }
        throw py::value_error("unknown dtype or reduce op: " + dtype + ", " + op);
      },
      "Whether the core supports reduce op `op` (e.g. 'SUM') on dtype `dtype` (e.g. 'float32')");

  m.def(
      "measure_reduce_ns_per_byte",
      [](size_t bytes) {
        py::gil_scoped_release release;
        return mccl::kernels::measureCombineNsPerByte(mccl::DataType::kFloat32, bytes);
      },
      py::arg("bytes") = size_t{16} << 20,
      "Nanoseconds per byte of the float32 SUM kernel (the cost model's gamma)");
  m.def(
      "cost_model_defaults",
      [] {
        const mccl::CostModel m;
        py::dict d;
        d["alpha_us"] = m.alphaUs;
        d["overhead_us"] = m.overheadUs;
        d["beta_ns_per_byte"] = m.betaNsPerByte;
        d["gamma_ns_per_byte"] = m.gammaNsPerByte;
        return d;
      },
      "The cost model's built-in values (used when no tune file or MCCL_* override is set)");
  m.def(
      "tune_file_path", [] { return mccl::CostModel::tunePath(); },
      "The tune file MCCL reads and mccl-bench --tune writes: MCCL_TUNE_FILE, else "
      "~/.cache/mccl/tune.conf");
  m.def(
      "cost_model",
      [](py::object pg) {
        py::dict d;
        auto backend = pg.cast<c10::intrusive_ptr<ProcessGroupMCCL>>();
        const mccl::CostModel& m = backend->comm().model();
        d["alpha_us"] = m.alphaUs;
        d["overhead_us"] = m.overheadUs;
        d["beta_ns_per_byte"] = m.betaNsPerByte;
        d["gamma_ns_per_byte"] = m.gammaNsPerByte;
        return d;
      },
      "The cost model a ProcessGroupMCCL chooses algorithms with (rank 0's)");
  m.def(
      "predict_seconds",
      [](const std::string& op, const std::string& algo, size_t bytes, int n, py::dict model,
         size_t chunkBytes) {
        const auto kind = opKindNamed(op);
        if (const auto* a = kind ? mccl::algo::find(*kind, algo) : nullptr) {
          return a->cost(costModelFrom(model), bytes, n, chunkBytes);
        }
        throw py::value_error("unknown collective or algorithm: " + op + ", " + algo);
      },
      py::arg("op"), py::arg("algo"), py::arg("bytes"), py::arg("n"), py::arg("model"),
      py::arg("chunk_bytes") = size_t{1} << 20,
      "Seconds the cost model predicts for `algo` running `op` (names as in MCCL_ALGO)");
  m.def(
      "bruck_radix",
      [](size_t bytes, int n, py::dict model) { return mccl::algo::bruckRadix(costModelFrom(model), bytes, n); },
      py::arg("bytes"), py::arg("n"), py::arg("model"),
      "The radix of MCCL's Bruck all-reduce for `bytes` on n ranks under this cost model");
  m.def(
      "rd_leaders",
      [](size_t bytes, int n, py::dict model) { return mccl::algo::rdLeaders(costModelFrom(model), bytes, n); },
      py::arg("bytes"), py::arg("n"), py::arg("model"),
      "The leaders of MCCL's recursive-doubling all-reduce for `bytes` on n ranks under this cost model");
  m.def(
      "chosen_algorithm",
      [](const std::string& op, size_t bytes, int n, py::dict model) {
        // What a group of n ranks with this model chooses (this process's
        // MCCL_* settings, MCCL_ALGO included).
        const auto kind = opKindNamed(op);
        if (!kind) throw py::value_error("unknown collective: " + op);
        mccl::CommConfig cfg = mccl::CommConfig::fromEnv(0, n);
        cfg.model = costModelFrom(model);
        return mccl::algo::chosenName(cfg, cfg.model, *kind, bytes);
      },
      py::arg("op"), py::arg("bytes"), py::arg("n"), py::arg("model"),
      "The algorithm a group of n ranks chooses for `op` on `bytes` under this cost model");
  m.def(
      "piece_settings",
      [](std::optional<std::map<std::string, std::string>> settings) {
        // How groups cut a large all_reduce (MCCL_PIECE_BYTES) and how many
        // of its pieces may be on the wire at once (MCCL_INFLIGHT_OPS):
        // this process's, parsed as group creation parses them, or those of
        // `settings` (a run's recorded MCCL_* values; absent or empty: the
        // default), parsed and range-checked the same way.
        if (!settings) {
          const mccl::CommConfig cfg = mccl::CommConfig::fromEnv(0, 1);
          return std::make_pair(static_cast<int64_t>(cfg.pieceBytes), static_cast<int64_t>(cfg.inflightOps));
        }
        auto read = [&](const auto& spec) {
          const auto it = settings->find(spec.env);
          return mccl::params::intFrom(spec, it == settings->end() ? std::string() : it->second);
        };
        namespace spec = mccl::params::spec;
        const int64_t piece = read(spec::pieceBytes), lanes = read(spec::inflightOps);
        mccl::CommConfig::checkPieceBytes(static_cast<size_t>(piece));
        return std::make_pair(piece, lanes);
      },
      py::arg("settings") = py::none(),
      "(piece_bytes, inflight_ops) of this process's MCCL_* settings, or of `settings` (name -> value)");
  m.def(
      "piece_elements",
      [](size_t nbytes, size_t elementSize, std::optional<size_t> pieceBytes) {
        if (elementSize == 0) throw py::value_error("piece_elements: element_size must be positive");
        return ProcessGroupMCCL::pieceElementsFor(
            pieceBytes ? *pieceBytes : mccl::CommConfig::fromEnv(0, 1).pieceBytes, nbytes, elementSize);
      },
      py::arg("nbytes"), py::arg("element_size"), py::arg("piece_bytes") = py::none(),
      "Elements per piece of an all_reduce of `nbytes` as a group cuts it (under this process's "
      "MCCL_PIECE_BYTES, or `piece_bytes`); 0 when it runs whole");
  m.attr("built_with_torch") = TORCH_VERSION;
}
