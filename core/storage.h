// A reference-counted block of memory on one device, shared by all views of a tensor.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace ember {
namespace memory { class Allocator; }

class Storage {
 public:
  // Allocates `nbytes` on `device` through that device's allocator; throws ember::Error
  // when the memory cannot be had or the device has no backend.
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
  memory::Allocator* allocator_;
};

}  // namespace ember
