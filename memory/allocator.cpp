#include "memory/allocator.h"

#include <cstdlib>
#include <new>

namespace ember::memory {
namespace {

// 64 bytes: a cache line, and the widest vector load (AVX-512) the CPU kernels use.
constexpr std::size_t kAlignment = 64;

class HostAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* ptr, std::size_t) noexcept override { std::free(ptr); }
  const char* name() const noexcept override { return "host"; }
};

}  // namespace

Allocator& host_allocator() {
  static HostAllocator instance;
  return instance;
}

}  // namespace ember::memory
