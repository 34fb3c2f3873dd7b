// The profile counters' L1 model (kernels/emu/l1_model.h).
//
// Note [L1 model]: each block has an LRU of the 32-byte sectors its global loads touched,
// as large as its share of its SM's L1 (l1_bytes_per_block): a load's sector missing it is
// an L1 miss, a sector the L2 serves. Stores write through to the L2 and are not kept.
// Per block, emptied when it starts: blocks run on the OS threads as they come free, so an
// LRU kept across the blocks one thread runs would count hits that depend on the
// scheduling (the counters are exact, run to run). Data that the blocks an SM holds read
// alike (layer norm's gamma and beta, a broadcast operand) therefore misses once a block,
// where the GPU's SM would keep it for all of them. The LRU sees accesses in the fibers' order
// (each thread up to its next barrier), not the GPU's interleaving of warps: a block's
// re-read after a barrier (a row's statistics, then its normalisation) and lanes of other
// warps in a sector hit as on the GPU; a thread that walked more than the share before the
// next thread ran would miss where the GPU's warps, in step, hit (no ember kernel does).
#include "kernels/emu/l1_model.h"

#include <algorithm>
#include <iterator>

namespace ember::emu {

size_t l1_bytes_per_block(const Occupancy& o, size_t shared_per_block) {
  // The shared-memory carveouts sm_90 offers, in KiB: the driver takes the least that
  // holds the resident blocks' shared memory.
  constexpr size_t kCarveouts[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
  constexpr size_t kUnified = 256 * 1024, kReservedPerBlock = 1024;
  const size_t blocks = size_t(std::max(o.blocks_per_sm, 1));
  const size_t need = blocks * (shared_per_block + kReservedPerBlock);
  size_t carveout = kCarveouts[std::size(kCarveouts) - 1] * 1024;
  for (size_t c : kCarveouts)
    if (c * 1024 >= need) {
      carveout = c * 1024;
      break;
    }
  return (kUnified - carveout) / blocks;
}

namespace detail {

void SectorLru::reset(size_t capacity) {
  capacity_ = std::max<size_t>(capacity, 1);
  order_.clear();
  where_.clear();
}

bool SectorLru::touch(uintptr_t sector) {
  if (auto it = where_.find(sector); it != where_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return true;
  }
  if (where_.size() == capacity_) {
    where_.erase(order_.back());
    order_.pop_back();
  }
  order_.push_front(sector);
  where_.emplace(sector, order_.begin());
  return false;
}

}  // namespace detail
}  // namespace ember::emu
