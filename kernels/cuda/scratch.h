// Temporary device memory for one op (packed operands, im2col columns, cuBLASLt and cuDNN
// workspaces), from the device's caching allocator so it is counted, capped and reused
// like tensors' memory. Freed when the scope ends, while its kernels may still be queued:
// the allocator reuses a block only for work queued later on the same stream.
#pragma once

#include <cstddef>

#include "core/memory.h"
#include "kernels/cuda/device.h"
#include "memory/caching_allocator.h"

namespace ember::kernels::cuda {

class DeviceScratch {
 public:
  DeviceScratch(int device, cudaStream_t stream, std::size_t bytes)
      : allocator_(device_allocator(Device::cuda(device))),
        allocation_(allocator_.allocate(bytes, reinterpret_cast<uint64_t>(stream))) {}
  ~DeviceScratch() { allocator_.free(allocation_.block); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  template <class T = void>
  T* get() const {
    return static_cast<T*>(allocation_.ptr);
  }
  std::size_t size() const { return allocation_.size; }

 private:
  memory::CachingAllocator& allocator_;
  memory::Allocation allocation_;
};

}  // namespace ember::kernels::cuda
