#include "core/storage.h"

#include "core/memory.h"

namespace ember {

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&device_allocator(device)) {
  memory::Allocation a = allocator_->allocate(nbytes);
  data_ = a.ptr;
  block_ = a.block;
}

Storage::~Storage() { allocator_->free(block_); }

}  // namespace ember
