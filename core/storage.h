// A reference-counted block of memory on one device, shared by all views of a tensor.
// Its memory comes from the device's caching allocator (memory/caching_allocator.h); a
// meta storage has a block of that allocator but no memory (data() is null, core/meta.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {
namespace memory {
class CachingAllocator;
struct Block;
}  // namespace memory

class Storage {
 public:
  // Allocates `nbytes` on `device` through that device's caching allocator (on a CUDA
  // device, for use on its current stream); throws OutOfMemoryError when the memory cannot
  // be had, ember::Error when the device has no backend. `pinned`: page-locked host memory
  // (the CPU device only), for asynchronous copies to and from CUDA devices.
  Storage(std::size_t nbytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // The memory is also used by work queued on `stream` (a cudaStream_t's value): when
  // this storage is freed, its block is reused only after that work is done.
  void record_stream(uint64_t stream);

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_;
  bool pinned_;
  memory::CachingAllocator* allocator_;
  memory::Block* block_;
};

}  // namespace ember
