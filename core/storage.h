// A reference-counted block of memory on one device, shared by all views of a tensor.
// Its memory comes from the device's caching allocator (memory/caching_allocator.h).
#pragma once

#include <cstddef>

#include "core/device.h"

namespace ember {
namespace memory {
class CachingAllocator;
struct Block;
}  // namespace memory

class Storage {
 public:
  // Allocates `nbytes` on `device` through that device's caching allocator; throws
  // OutOfMemoryError when the memory cannot be had, ember::Error when the device has no
  // backend.
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_;
  memory::CachingAllocator* allocator_;
  memory::Block* block_;
};

}  // namespace ember
