#include "core/storage.h"

#include "base/error.h"
#include "core/device_runtime.h"
#include "core/memory.h"
#include "core/meta.h"

namespace ember {
namespace {

memory::CachingAllocator& allocator_for(Device device, bool pinned) {
  if (!pinned) return device_allocator(device);
  EMBER_CHECK(device.is_cpu(), "pinned memory is host memory: cannot pin on ", device.str());
  return kernels::pinned_allocator();
}

}  // namespace

Storage::Storage(std::size_t nbytes, Device device, bool pinned)
    : nbytes_(nbytes), device_(device), pinned_(pinned), allocator_(&allocator_for(device, pinned)) {
  const uint64_t stream = device.is_cuda() ? kernels::cuda_current_stream(device.index) : 0;
  memory::Allocation a = allocator_->allocate(nbytes, stream);
  block_ = a.block;
  if (!device.is_meta()) {
    data_ = a.ptr;
    return;
  }
  data_ = nullptr;  // the block's address is the address source's, not memory
  if (MetaListener* l = detail::meta_listener()) l->allocated(this, a.size, current_memory_scope());
}

Storage::~Storage() {
  if (device_.is_meta())
    if (MetaListener* l = detail::meta_listener()) l->freed(this);
  allocator_->free(block_);
}

void Storage::record_stream(uint64_t stream) {
  if (device_.is_cuda() || pinned_) allocator_->record_stream(block_, stream);
}

}  // namespace ember
