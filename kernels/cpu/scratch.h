// Scratch memory for CPU kernels, taken from the host caching allocator: it is accounted
// like tensor memory (tagged with the op that runs) and reused from step to step instead
// of being faulted in afresh.
#pragma once

#include <cstddef>

#include "memory/caching_allocator.h"

namespace ember::kernels::cpu {

template <class T>
class Scratch {
 public:
  explicit Scratch(std::size_t count) {
    memory::Allocation a = memory::host_allocator().allocate(count * sizeof(T));
    data_ = static_cast<T*>(a.ptr);
    block_ = a.block;
  }
  ~Scratch() { memory::host_allocator().free(block_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T* data() const { return data_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_;
  memory::Block* block_;
};

}  // namespace ember::kernels::cpu
