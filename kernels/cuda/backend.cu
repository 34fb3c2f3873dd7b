// The CUDA backend's entry points: device discovery, the devices' caching allocators, the
// pinned host allocator and the kernel registration. The same source serves GPUs (nvcc)
// and the emulated device (the host compiler against kernels/emu).
#include "kernels/cuda/device.h"  // first: the CUDA runtime, or the emulator's

#include <mutex>
#include <vector>

#include "base/error.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "kernels/cuda/cuda_kernels.h"
#include "memory/caching_allocator.h"
#include "memory/cuda_source.h"

namespace ember::kernels {

bool cuda_backend_built() { return true; }

int cuda_device_count() {
  // Without a driver or GPU cudaGetDeviceCount fails; that means zero devices, quietly.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

memory::CachingAllocator& cuda_allocator(int index) {
  static std::vector<memory::CachingAllocator*> allocators;
  static std::mutex mu;
  std::lock_guard lock(mu);
  const int count = cuda_device_count();
  EMBER_CHECK(index >= 0 && index < count, "cuda_allocator: device ", index, " does not exist (", count,
              " CUDA devices)");
  // Each made at its device's first use: making one asks its device for its size, which
  // makes a context there (Note [Restoring the current device]), so a process that uses
  // one GPU of eight keeps off the other seven.
  if (allocators.empty()) allocators.resize(static_cast<size_t>(count), nullptr);
  memory::CachingAllocator*& a = allocators[static_cast<size_t>(index)];
  if (a == nullptr) a = new memory::CachingAllocator(memory::make_cuda_source(index));  // lives for the process
  return *a;
}

memory::CachingAllocator& pinned_allocator() {
  static auto* instance = new memory::CachingAllocator(memory::make_pinned_source());  // lives for the process
  return *instance;
}

void register_cuda_kernels() {
  cuda::register_copy();
  cuda::register_elementwise();
  cuda::register_random();
  cuda::register_reduce();
  cuda::register_softmax();
  cuda::register_index();
  cuda::register_matmul();
  cuda::register_conv();
  cuda::register_pool();
  cuda::register_optim();
  cuda::register_fused();
  cuda::register_sparse();
  cuda::register_attention();
  cuda::register_rnn();
  cuda::register_vision();
}

}  // namespace ember::kernels
