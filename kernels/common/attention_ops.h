// What the fused attention kernels of both backends share (kernels/cpu/attention.cpp,
// kernels/cuda/attention.cuh): dropout's keep decision for one attention weight, so the
// CPU, the CUDA kernel and the backward passes of both regenerate the same mask from the
// Philox counters instead of storing it.
//
// Weight (bh, l, s) of a [BH, L, S] problem is element i = (bh L + l) S + s of the draw,
// mapped as rand() maps a tensor's elements (kernels/common/philox.h): block offset + i / k,
// lane i % k, k = 4 float draws or 2 double draws per block. So the fused kernels keep
// exactly the weights that dropout() keeps on the math path's [BH, L, S] weights drawn
// at the same generator state (for float32 and float64; 16-bit inputs compare the float
// draw, where rand() would round it to 16 bits first).
#pragma once

#include <cstdint>

#include "kernels/common/philox.h"

namespace ember::kernels::ops {

template <class C>
struct AttentionDropout {
  static constexpr uint64_t kPerBlock = sizeof(C) == 8 ? 2 : 4;

  // Whether weight i is kept, for drop probability p; and the draws of one whole block.
  EMBER_HD static bool keep(uint64_t seed, uint64_t offset, uint64_t i, C p) {
    const Philox4 r = philox_block(seed, offset + i / kPerBlock);
    return draw(r, static_cast<int>(i % kPerBlock)) >= p;
  }
  EMBER_HD static C draw(const Philox4& r, int lane) {
    if constexpr (kPerBlock == 2)
      return uniform_double(r.v[2 * lane], r.v[2 * lane + 1]);
    else
      return uniform_float(r.v[lane]);
  }
};

}  // namespace ember::kernels::ops
