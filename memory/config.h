// The caching allocator's tunables, and their EMBER_ALLOC_CONF syntax.
//
//   EMBER_ALLOC_CONF="max_split_size_mb:256,garbage_collection_threshold:0.8,roundup_power2_divisions:4"
//
// Keys (the first three mean what they mean in PYTORCH_CUDA_ALLOC_CONF):
//   max_split_size_mb:N             blocks of N MiB or more are never split, and a request
//                                   below N MiB never takes one (N > 20); fights fragmentation
//   garbage_collection_threshold:F  when reserved memory passes F of the cap (0 < F < 1),
//                                   cached segments unused for longest are returned first
//   roundup_power2_divisions:N      round requests up to one of N steps between powers of
//                                   two (N a power of two) instead of to 512 bytes
//   pressure_threshold:F            pressure observers are called when reserved memory
//                                   crosses F of the cap (0 < F <= 1; default 0.9)
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace ember::memory {

struct AllocatorConfig {
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();  // bytes
  double garbage_collection_threshold = 0;                               // 0: off
  std::size_t roundup_power2_divisions = 0;                              // 0: off
  double pressure_threshold = 0.9;

  // Parses the EMBER_ALLOC_CONF syntax; keys not given keep their defaults. A malformed
  // string, an unknown key or a value out of range is an ember::Error quoting the string.
  static AllocatorConfig parse(const std::string& text);
  // EMBER_ALLOC_CONF from the environment, or the defaults when it is not set.
  static AllocatorConfig from_env();
  // Back in the EMBER_ALLOC_CONF syntax (keys that differ from the defaults).
  std::string str() const;
};

// The whole number in environment variable `var`, or `fallback` when it is unset. Anything
// else ("64MiB", "lots"), or a number outside [lo, hi], is an ember::Error naming the
// variable and the range, not a silent 0 or 64.
std::size_t count_from_env(const char* var, std::size_t fallback = 0, std::size_t lo = 0,
                           std::size_t hi = SIZE_MAX);

// The ranges of the allocator's variables (README, "environment"):
inline constexpr std::size_t kMaxMemoryHistory = 10000000;  // EMBER_MEMORY_HISTORY: 0 (off) to 10^7 events

}  // namespace ember::memory
