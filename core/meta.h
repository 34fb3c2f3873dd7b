// The meta device (as PyTorch's): tensors with a shape, a dtype and strides but no data.
//
// An op on meta tensors runs core's argument checks and allocates its outputs as on any
// device; the op table skips the kernel call (core/dispatch.h), so every op works there,
// and so does autograd, whose backward formulas are ops. Random draws and index checks
// are no-ops; reading values (item, to_vector, printing them, copying to a device with
// data, saving) is an ember::Error. Moving a tensor to meta is allowed and drops its data.
//
// Meta storages are "allocated" by a caching allocator over an address source
// (memory/source.h): the CPU's and CUDA's allocators share one policy, so its statistics
// are theirs for the same program. A MetaListener sees each allocation with the memory
// scope (the module) that made it: optim/memory_estimate.h builds on both.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace ember {

// A named region of the program for memory attribution: nn::Module pushes itself around
// its forward, autograd around the backward of the nodes recorded inside it. Costs a
// thread-local read and write; the listener hears of it only while one is installed.
class MemoryScope {
 public:
  explicit MemoryScope(const void* tag);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  const void* saved_;
};

// The innermost scope's tag on this thread, or null.
const void* current_memory_scope();

// The device type meta tensors stand for, in the few ops whose allocations differ by
// device (a CPU matmul computes 16-bit floats in float32 copies): the CPU unless set.
DeviceType meta_target();
void set_meta_target(DeviceType type);

// Told of each meta allocation and free (with the allocator's block size, which includes
// its rounding) and of scopes entered and left, on the thread that does it.
class MetaListener {
 public:
  virtual ~MetaListener() = default;
  virtual void allocated(const void* key, std::size_t bytes, const void* scope) = 0;
  virtual void freed(const void* key) = 0;
  virtual void entered(const void* scope) = 0;
  virtual void left(const void* scope) = 0;
};

// Installs `listener` for its lifetime. One at a time: a second is an ember::Error.
class MetaListenerScope {
 public:
  explicit MetaListenerScope(MetaListener& listener);
  ~MetaListenerScope();
  MetaListenerScope(const MetaListenerScope&) = delete;
  MetaListenerScope& operator=(const MetaListenerScope&) = delete;
};

namespace detail {
MetaListener* meta_listener();
// "<op>: the tensor has no data: it is on the meta device" unless `has_data`.
void check_has_data(bool has_data, const char* op);
}  // namespace detail

}  // namespace ember
