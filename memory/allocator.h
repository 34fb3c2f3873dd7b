// The interface every tensor storage is allocated through, and the plain host source.
//
// memory/ depends on nothing else in ember. The caching allocator (a later part of
// memory/) sits behind this same interface, so core never knows which one it is using.
#pragma once

#include <cstddef>

namespace ember::memory {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to at least 64 bytes; throws std::bad_alloc when it cannot.
  // allocate(0) returns a valid pointer that must still be passed to deallocate.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  virtual const char* name() const noexcept = 0;
};

// Aligned malloc/free on the host; the default allocator of CPU tensors.
Allocator& host_allocator();

}  // namespace ember::memory
