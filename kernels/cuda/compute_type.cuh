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

// A stored value in its compute type.
template <class T>
__device__ __forceinline__ compute_type_t<T> widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

// A computed value rounded (to nearest even) to the storage type T.
template <class T>
__device__ __forceinline__ T round_to(compute_type_t<T> v) {
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

// Calls f(carrier_t<B>{}) with the widest B in {1, 2, 4, 8, 16} that is <= `width`, but
// at least kMinBytes (callers pass their element size: carriers narrower than an element
// are never instantiated).
template <int kMinBytes, class F>
void with_carrier(int width, F&& f) {
  if constexpr (kMinBytes <= 1) if (width < 2) return f(carrier_t<1>{});
  if constexpr (kMinBytes <= 2) if (width < 4) return f(carrier_t<2>{});
  if constexpr (kMinBytes <= 4) if (width < 8) return f(carrier_t<4>{});
  if constexpr (kMinBytes <= 8) if (width < 16) return f(carrier_t<8>{});
  return f(carrier_t<16>{});
}

// In the emulator, a carrier access at an address a GPU would fault on (not a multiple of
// the carrier's size) is an error, although x86 would not fault: the kernels' choice of
// carriers is checked by every emulated test. Nothing on the GPU.
template <class V>
__device__ __forceinline__ void check_carrier_alignment(const void* p) {
#if !defined(__CUDACC__)
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V) != 0)
    throw ::ember::Error(::ember::detail::str("misaligned ", sizeof(V), "-byte access at ", p));
#else
  (void)p;
#endif
}

// The widest power of two <= 16 that divides `v` (16 when v is 0).
inline int max_alignment(uint64_t v) {
  int a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

}  // namespace ember::kernels::cuda
