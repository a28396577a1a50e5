// Kernels for c10d's dispatcher ops on devices PyTorch registers none for.
//
// c10d's ops (c10d::allreduce_, c10d::broadcast_, ...) reach a backend only
// through kernels registered per dispatch key; PyTorch has them for CPU,
// CUDA and PrivateUse1, not for MPS. MCCL registers one boxed kernel for the
// ops it serves: it reads the arguments by name from the op's schema, so the
// same kernel serves every schema version (PyTorch 2.5 to 2.7 had `bool
// asyncOp` on four ops only, 2.8 added `bool async_op=True` to most), and
// calls the group's backend for the tensors' device type, as c10d's own CPU
// kernels do.
#pragma once

#include <c10/core/DispatchKey.h>

#include <string>
#include <vector>

namespace mccl::torch_adapter {

// Registers the boxed kernel for dispatch key `key` on each op of namespace
// `ns` that MCCL serves, is defined, and has no kernel for `key` yet (a newer
// torch may provide its own). Returns the names it registered. The library
// stays registered for the life of the process.
std::vector<std::string> registerBoxedC10dKernels(const std::string& ns, c10::DispatchKey key);

// The ops registerBoxedC10dKernels knows, by name without namespace.
const std::vector<std::string>& boxedC10dOpNames();

// What mccl._C registers when it loads: kernels for c10d's ops on MPS.
std::vector<std::string> registerMpsKernels();
const std::vector<std::string>& registeredMpsKernels();

}  // namespace mccl::torch_adapter
