// The host memory source: aligned_alloc, with an optional capacity.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "memory/source.h"

namespace ember::memory {
namespace {

// 4 KiB: a page. Segments are 2 MiB or more, so the alignment costs nothing, and it is
// more than any vector load needs.
constexpr std::size_t kAlignment = 4096;

// MemAvailable from /proc/meminfo (bytes), or 0 when it cannot be read.
std::size_t available_host_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<std::size_t>(kib) * 1024;
}

class HostSource final : public Source {
 public:
  explicit HostSource(std::size_t capacity) : capacity_(capacity) {}

  void* allocate(std::size_t bytes) noexcept override {
    if (capacity_ > 0) {
      std::size_t used = used_.load();
      do {
        if (bytes > capacity_ - used) return nullptr;
      } while (!used_.compare_exchange_weak(used, used + bytes));
    }
    void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (!p && capacity_ > 0) used_ -= bytes;
    return p;
  }

  void free(void* ptr, std::size_t bytes) noexcept override {
    std::free(ptr);
    if (capacity_ > 0) used_ -= bytes;
  }

  SourceInfo info() const noexcept override {
    if (capacity_ > 0) return {capacity_ - used_.load(), capacity_};
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return {available_host_memory(), static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)};
  }

  std::string device_name() const override { return "cpu"; }

 private:
  const std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace

std::unique_ptr<Source> make_host_source(std::size_t capacity) { return std::make_unique<HostSource>(capacity); }

}  // namespace ember::memory
