#include "core/storage.h"

#include <new>

#include "core/error.h"
#include "kernels/backends.h"
#include "memory/allocator.h"

namespace ember {
namespace {

memory::Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return memory::host_allocator();
  int count = kernels::cuda_device_count();
  EMBER_CHECK(device.index < count, "Storage: cannot allocate on ", device.str(), ": ",
              count == 0 ? std::string("no CUDA device is available")
                         : detail::str("this process sees ", count, " CUDA device(s)"));
  return kernels::cuda_allocator(device.index);
}

}  // namespace

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  try {
    data_ = allocator_->allocate(nbytes);
  } catch (const std::bad_alloc&) {
    EMBER_FAIL("Storage: cannot allocate ", nbytes, " bytes on ", device.str(), " (", allocator_->name(),
               " allocator)");
  }
}

Storage::~Storage() { allocator_->deallocate(data_, nbytes_); }

}  // namespace ember
