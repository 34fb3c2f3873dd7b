// The CUDA backend's entry points: device discovery, the device memory source and the
// kernel registration. The kernels themselves arrive in later parts (kernels/cuda/*.cuh);
// until then every CUDA op reports that its kernel is missing, by name.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.h"
#include "kernels/backends.h"
#include "memory/allocator.h"

namespace ember::kernels {
namespace {

// cudaMalloc/cudaFree on one device. The caching allocator will sit in front of it.
class CudaAllocator final : public memory::Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    cudaSetDevice(prev);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state
      throw std::bad_alloc();
    }
    return p;
  }
  void deallocate(void* ptr, std::size_t) noexcept override {
    if (cudaFree(ptr) != cudaSuccess) std::fprintf(stderr, "ember: cudaFree failed\n");
  }
  const char* name() const noexcept override { return "cuda"; }

 private:
  int device_;
};

}  // namespace

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

memory::Allocator& cuda_allocator(int index) {
  static std::vector<CudaAllocator*> allocators;
  static std::mutex mu;
  std::lock_guard lock(mu);
  const int count = cuda_device_count();
  EMBER_CHECK(index >= 0 && index < count, "cuda_allocator: device ", index, " does not exist (", count,
              " CUDA devices)");
  if (allocators.empty())
    for (int i = 0; i < count; ++i) allocators.push_back(new CudaAllocator(i));  // live for the process
  return *allocators[index];
}

void register_cuda_kernels() {}

}  // namespace ember::kernels
