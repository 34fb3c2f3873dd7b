// The profile counters' model of an SM's L1 data cache (Note [L1 model] in l1_model.cpp):
// a block's share of it, and the LRU of sectors that counts a block's load sectors as hits
// or misses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>

#include "kernels/emu/sm90_resources.h"

namespace ember::emu {

// A block's share of its SM's L1 data cache: the 256 KiB of L1 and shared memory less the
// shared memory of the SM's resident blocks (each with its reserved 1 KiB), over those blocks.
size_t l1_bytes_per_block(const Occupancy& o, size_t shared_per_block);

namespace detail {

// Note [L1 model]: least recently used sector out first.
class SectorLru {
 public:
  void reset(size_t capacity);
  // Whether `sector` was held; it is the most recent now.
  bool touch(uintptr_t sector);

 private:
  size_t capacity_ = 1;
  std::list<uintptr_t> order_;
  std::unordered_map<uintptr_t, std::list<uintptr_t>::iterator> where_;
};

}  // namespace detail
}  // namespace ember::emu
