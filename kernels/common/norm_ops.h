// Mean and variance statistics, written once for the CPU loops and the CUDA kernels:
// Welford's running update and the pairwise merge of Chan, Golub & LeVeque (1979), so a
// set split among threads, blocks and passes gives one (count, mean, M2) without the
// cancellation of sum(x^2) - n mean^2. Merges happen in an order fixed by the launch
// shape, never by timing, so results are deterministic.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace ember::kernels::ops {

// T is the compute type: float (also for float16 / bfloat16 data) or double.
template <class T>
struct Welford {
  int64_t count;  // 64-bit: a float count stops counting at 2^24
  T mean;
  T m2;  // sum of (x - mean)^2

  EMBER_HD static Welford empty() { return {0, T(0), T(0)}; }

  // The statistics of n values (a chunk a thread holds), two passes over registers.
  EMBER_HD static Welford of(const T* v, int n) {
    T s = 0;
    for (int i = 0; i < n; ++i) s += v[i];
    const T mean = s / T(n);
    T m2 = 0;
    for (int i = 0; i < n; ++i) m2 += (v[i] - mean) * (v[i] - mean);
    return {n, mean, m2};
  }

  // Chan's merge: exact for an empty side (the other is returned unchanged).
  EMBER_HD Welford merge(const Welford& o) const {
    if (o.count == 0) return *this;
    if (count == 0) return o;
    const int64_t n = count + o.count;
    const T delta = o.mean - mean;
    const T w = T(o.count) / T(n);
    return {n, mean + delta * w, m2 + o.m2 + delta * delta * T(count) * w};
  }

  // Variance with Bessel's correction (0: biased, divides by n; 1: unbiased, by n - 1).
  // Like torch.var, m2 / max(count - correction, 0): inf when count <= correction, NaN
  // when m2 is 0 too (a single value, or none).
  EMBER_HD T variance(int64_t correction) const {
    return m2 / T(count > correction ? count - correction : 0);
  }
};

}  // namespace ember::kernels::ops
