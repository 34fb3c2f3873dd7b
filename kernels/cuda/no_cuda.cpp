// The CUDA entry points of a build without the CUDA backend (EMBER_CUDA=OFF or no
// toolkit): no devices, nothing to register.
#include "base/error.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"

namespace ember::kernels {

bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
memory::CachingAllocator& cuda_allocator(int index) {
  EMBER_FAIL("cuda_allocator: this build of ember has no CUDA backend (configure with -DEMBER_CUDA=ON)");
}
memory::CachingAllocator& pinned_allocator() {
  EMBER_FAIL("pinned_allocator: this build of ember has no CUDA backend (configure with -DEMBER_CUDA=ON)");
}
void register_cuda_kernels() {}

}  // namespace ember::kernels
