// Moving 16 channel planes (NCHW) to and from a channel-innermost block [row][col][16],
// the layout in which the Winograd transforms run 16 channels as one vector.
//
// With AVX-512 or AVX2 (float32; kernels/cpu/vec.h), each piece of kLanes channels by
// kLanes columns (16 x 16, or four 8 x 8) is moved with one load or store per row and an
// in-register transpose, instead of single-element moves; elsewhere plain loops do it.
// Only moves (and the bias add and relu of the scalar loop), so every path gives the same
// bits. A row's end is a whole vector overlapping the one before (simd::chunk_start), or
// masked in a row shorter than a vector.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/unary_ops.h"
#include "kernels/cpu/loops.h"

#include "kernels/cpu/vec.h"

namespace ember::kernels::cpu {

inline constexpr int64_t kPackLanes = 16;


// out[((r + r0) * pcols + s + s0) * 16 + l] = src[l * plane + r * width + s] for the
// `lanes` planes (<= 16) and every r < rows, s < width, converted from the storage type T
// to the compute type C (float for the 16-bit floats). The block must hold the image
// (rows + r0 <= prows, width + s0 <= pcols); elements outside it are left as they are
// (callers zero the block once), lanes >= `lanes` are written zero.
template <class T, class C>
void pack_channels(const T* src, int64_t plane, int64_t lanes, int64_t rows, int64_t width, int64_t r0, int64_t s0,
                   int64_t pcols, C* out) {
#if EMBER_CPU_VEC
  if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>) {
    using namespace simd;
    Vec v[kLanes];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < width; c0 += kLanes) {
        const int64_t c = chunk_start(c0, width), n = std::min<int64_t>(kLanes, width - c);
        T* dst = out + ((r + r0) * pcols + c + s0) * 16;
        for (int64_t l0 = 0; l0 < 16; l0 += kLanes) {  // channels l0 .. l0 + kLanes - 1
          for (int64_t l = 0; l < kLanes; ++l)
            v[l] = l0 + l < lanes ? load_n(src + (l0 + l) * plane + r * width + c, n) : zero();
          transpose(v);
          for (int64_t j = 0; j < n; ++j) store(dst + j * 16 + l0, v[j]);
        }
      }
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t l = 0; l < 16; ++l) {
      const T* row = src + l * plane + r * width;
      C* dst = out + ((r + r0) * pcols + s0) * 16 + l;
      for (int64_t s = 0; s < width; ++s) dst[s * 16] = l < lanes ? cast<C>(row[s]) : C(0);
    }
}

// dst[l * plane + r * width + s] = in[(r * pcols + s) * 16 + l] + bias[l] (bias may be
// null), then max(0, .) when relu, rounded to the storage type T, for l < lanes, r < rows,
// s < width: the inverse of pack_channels. `in` must have 16 readable positions past
// each row's last (callers allocate a spare row).
template <class C, class T>
void unpack_channels(const C* in, int64_t pcols, int64_t lanes, int64_t rows, int64_t width, const T* bias, bool relu,
                     T* dst, int64_t plane) {
#if EMBER_CPU_VEC
  if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>) {
    using namespace simd;
    Vec v[kLanes];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < width; c0 += kLanes) {
        const int64_t c = chunk_start(c0, width), n = std::min<int64_t>(kLanes, width - c);
        const T* src = in + (r * pcols + c) * 16;
        for (int64_t l0 = 0; l0 < lanes; l0 += kLanes) {  // channels l0 .. l0 + kLanes - 1
          for (int j = 0; j < kLanes; ++j) v[j] = load(src + j * 16 + l0);
          transpose(v);
          for (int64_t l = l0; l < std::min<int64_t>(lanes, l0 + kLanes); ++l) {
            Vec o = bias ? add(v[l - l0], set1(bias[l])) : v[l - l0];
            if (relu) o = max(zero(), o);  // ops::Relu: a NaN (second operand) passes
            store_n(dst + l * plane + r * width + c, o, n);
          }
        }
      }
    return;
  }
#endif
  for (int64_t l = 0; l < lanes; ++l) {
    const C b = bias ? cast<C>(bias[l]) : C(0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t s = 0; s < width; ++s) {
        const C v = in[(r * pcols + s) * 16 + l] + b;
        dst[l * plane + r * width + s] = cast<T>(relu ? ops::Relu{}(v) : v);
      }
  }
}

}  // namespace ember::kernels::cpu
