// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// and the transforms from its 32-bit outputs to uniform and normal values. Shared by the
// CPU backend and CUDA kernels, so both draw identical integers for the same counter.
//
// Tensor draws map element i of a draw at block offset `off` to counter block
// off + i / k, lane i % k, where k is the values one block yields (4 for 32-bit values,
// 2 for 64-bit ones): see philox_values_per_block.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace ember::kernels {

struct Philox4 {
  uint32_t v[4];
};

EMBER_HD inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * ctr.v[0];
    uint64_t p1 = uint64_t(kM1) * ctr.v[2];
    Philox4 next;
    next.v[0] = uint32_t(p1 >> 32) ^ ctr.v[1] ^ k0;
    next.v[1] = uint32_t(p1);
    next.v[2] = uint32_t(p0 >> 32) ^ ctr.v[3] ^ k1;
    next.v[3] = uint32_t(p0);
    ctr = next;
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The block at position `block` of the stream of `seed`.
EMBER_HD inline Philox4 philox_block(uint64_t seed, uint64_t block) {
  Philox4 ctr{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}};
  return philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32));
}

// [0, 1) with 24 random bits (float) or 53 (double).
EMBER_HD inline float uniform_float(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }
EMBER_HD inline double uniform_double(uint32_t hi, uint32_t lo) {
  return double(((uint64_t(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace ember::kernels
