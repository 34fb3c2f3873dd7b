// The caching allocator's statistics, named as PyTorch's torch.cuda.memory_stats().
//
// Each figure is kept for all blocks, the small pool (requests up to 1 MiB) and the
// large pool, as current, peak, allocated (cumulative increases) and freed (cumulative
// decreases). What the figures count:
//   allocation / allocated_bytes        blocks handed to callers and not yet freed
//   requested_bytes                     what callers asked for (before rounding)
//   active / active_bytes               allocated, or freed but awaiting another stream
//   segment / reserved_bytes            raw allocations from the source (cached or not)
//   inactive_split / _bytes             free blocks inside split segments (fragmentation
//                                       that empty_cache() cannot return)
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace ember::memory {

struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;

  void add(int64_t n) {
    current += n;
    if (n > 0) allocated += n;
    else freed -= n;
    if (current > peak) peak = current;
  }
  void reset_peak() { peak = current; }
};

enum StatPool { kAllPools = 0, kSmallPool = 1, kLargePool = 2, kNumStatPools = 3 };
using StatArray = std::array<Stat, kNumStatPools>;

struct MemoryStats {
  StatArray allocation, segment, active, inactive_split;
  StatArray allocated_bytes, requested_bytes, reserved_bytes, active_bytes, inactive_split_bytes;
  StatArray oversize_allocations, oversize_segments;  // blocks of max_split_size or more
  int64_t num_alloc_retries = 0;  // a raw allocation failed, the cache was released and it was retried
  int64_t num_ooms = 0;           // OutOfMemoryErrors raised
  int64_t num_device_alloc = 0;   // raw allocations (segments made)
  int64_t num_device_free = 0;    // raw frees (segments returned)
  int64_t num_sync_all_streams = 0;  // waits for every outstanding event (in releases)
  int64_t max_split_size = 0;     // the configured value, in bytes (0: none)
  int64_t limit_bytes = 0;        // the cap in force

  // "allocated_bytes.all.current" -> value, and so on for every figure (PyTorch's keys).
  std::map<std::string, int64_t> to_map() const;
};

}  // namespace ember::memory
