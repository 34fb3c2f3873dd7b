// The type a kernel computes in for each element type it stores, as the CPU backend's
// compute_t (kernels/cpu/loops.h): float for __half and __nv_bfloat16 (converted on load,
// rounded to nearest even once, on store), the type itself otherwise. And the raw
// carriers that kernels which only move data use for each element size, so one
// instantiation serves every dtype of that size (float and int32, __half and bf16...).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class T>
using compute_type_t = std::conditional_t<is_16bit_float_v<T>, float, T>;

template <class T>
__device__ __forceinline__ compute_type_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

template <class T>
__device__ __forceinline__ T from_compute(compute_type_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}

// An unsigned type of exactly `Bytes` bytes (16: uint4), to copy elements bit for bit.
template <int Bytes> struct CarrierOf;
template <> struct CarrierOf<1> { using type = uint8_t; };
template <> struct CarrierOf<2> { using type = uint16_t; };
template <> struct CarrierOf<4> { using type = uint32_t; };
template <> struct CarrierOf<8> { using type = unsigned long long; };
template <> struct CarrierOf<16> { using type = uint4; };
template <int Bytes>
using carrier_t = typename CarrierOf<Bytes>::type;

// The widest power of two <= 16 that divides `v` (16 when v is 0).
inline int alignment_of(uint64_t v) {
  int a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

}  // namespace ember::kernels::cuda
