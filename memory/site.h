// What memory is allocated for: the op, its output's shape, and the training step.
//
// Core sets the site (a thread-local) while an op allocates its outputs; the caching
// allocator stores it with each block, so that an OutOfMemoryError can say which op asked
// and which ops hold the largest live blocks, and the event history can tag each event.
// A training loop may open a StepScope to say how many samples its step processes; an
// OutOfMemoryError then estimates the batch that would fit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::memory {

struct AllocationSite {
  static constexpr int kMaxDims = 6;
  const char* op = nullptr;  // a string literal; null when no op is named
  bool backward = false;     // allocated by the op's backward formula
  int ndim = -1;             // -1: shape unknown; shapes of more than kMaxDims dims keep the first ones
  std::array<int64_t, kMaxDims> shape{};

  std::string op_name() const;  // "conv2d", "conv2d backward", "(unnamed)"
  std::string shape_str() const;  // "[128, 32, 28, 28]", or "" when unknown
};

// Sets the calling thread's site for its lifetime; restores the previous one after. Inside
// a backward scope, a forward op's scope keeps the backward's name and sets only the shape.
class SiteScope {
 public:
  SiteScope(const char* op, const int64_t* shape, int ndim, bool backward = false);
  explicit SiteScope(const char* op, bool backward = false) : SiteScope(op, nullptr, -1, backward) {}
  // Another thread's site, as it is (the thread pool's workers take their caller's).
  explicit SiteScope(const AllocationSite& site);
  ~SiteScope();
  SiteScope(const SiteScope&) = delete;
  SiteScope& operator=(const SiteScope&) = delete;

 private:
  AllocationSite saved_;
};

const AllocationSite& current_site();

// Names the op for the caching allocator: blocks allocated in the rest of the scope are
// tagged with it (OutOfMemoryError messages, the memory history). Nested ops override it.
#define EMBER_OP_SITE(name) const ::ember::memory::SiteScope ember_op_site_(name)

// A training step in progress on this thread: its batch size and the bytes allocated on
// its device when it began (what the step itself allocated is the difference).
struct StepInfo {
  int64_t batch = 0;  // 0: no step open
  std::size_t allocated_at_start = 0;
};

class StepScope {
 public:
  StepScope(int64_t batch, std::size_t allocated_at_start);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  StepInfo saved_;
};

const StepInfo& current_step();

}  // namespace ember::memory
