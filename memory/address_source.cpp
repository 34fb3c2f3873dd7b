// The address source: segments that are address ranges only (memory/source.h).
#include <mutex>
#include <vector>

#include "memory/source.h"

namespace ember::memory {
namespace {

class AddressSource final : public Source {
 public:
  explicit AddressSource(std::size_t capacity) : capacity_(capacity > 0 ? capacity : std::size_t{1} << 60) {}

  void* allocate(std::size_t bytes) noexcept override {
    std::lock_guard lock(mu_);
    if (bytes > capacity_ - used_) return nullptr;
    used_ += bytes;
    // Never reused: a fresh range each time keeps addresses distinct without bookkeeping.
    const std::size_t at = next_;
    next_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return reinterpret_cast<void*>(at);
  }

  void free(void*, std::size_t bytes) noexcept override {
    std::lock_guard lock(mu_);
    used_ -= bytes;
  }

  SourceInfo info() const noexcept override {
    std::lock_guard lock(mu_);
    return {capacity_ - used_, capacity_};
  }

  std::string device_name() const override { return "meta"; }

 private:
  static constexpr std::size_t kAlignment = 4096;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::size_t used_ = 0;
  std::size_t next_ = kAlignment;  // 0 would read as a failed allocation
};

}  // namespace

std::unique_ptr<Source> make_address_source(std::size_t capacity) { return std::make_unique<AddressSource>(capacity); }

}  // namespace ember::memory
