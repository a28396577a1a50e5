// The portable twin of mps_metal.mm: no Metal outside macOS.
#include <c10/util/Exception.h>

#include "device/mps_device.h"

namespace mccl::torch_adapter {

bool metalPortCompiled() { return false; }

std::shared_ptr<MetalPort> metalPort(const std::string& who) {
  TORCH_CHECK(false, who, ": MPS tensors need mccl built on macOS (Metal); this build has no MPS support");
}

}  // namespace mccl::torch_adapter
