#include "core/storage.h"

#include "core/error.h"
#include "kernels/backends.h"
#include "memory/caching_allocator.h"

namespace ember {
namespace {

memory::CachingAllocator& allocator_for(Device device) {
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
  memory::Allocation a = allocator_->allocate(nbytes);
  data_ = a.ptr;
  block_ = a.block;
}

Storage::~Storage() { allocator_->free(block_); }

}  // namespace ember
