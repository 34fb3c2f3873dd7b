// What kernels of every family share about data: the type each element type computes in
// (as the CPU backend's compute_t in kernels/cpu/loops.h: float for __half and
// __nv_bfloat16, converted on load and rounded to nearest even once on store; the type
// itself otherwise), value conversions as the CPU converts, vector packs and the one way
// to load and store them (alignment-checked in the emulator), raw carriers for kernels
// that only move bytes, and Layout, a strided view's sizes and strides.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "base/error.h"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class T>
using compute_t = std::conditional_t<is_16bit_float_v<T>, float, T>;

// A stored value in its compute type.
template <class T>
__host__ __device__ __forceinline__ compute_t<T> widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

// A computed value rounded (to nearest even) to the storage type T.
template <class T, class C = compute_t<T>>
__host__ __device__ __forceinline__ T round_to(C v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(v));
  else return T(v);
}

// One value converted as the CPU backend converts it (kernels/cpu/loops.h's cast): 16-bit
// floats through float (so double -> bf16 rounds twice, as there), bool as "nonzero".
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_16bit_float_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_16bit_float_v<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// ---- Vector packs --------------------------------------------------------------------------

// N elements moved as one access (16 bytes: float x 4, bf16 x 8, double x 2).
template <class T, int N = 16 / sizeof(T)>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// True when p may be accessed as N-element packs of T.
template <int N, class T>
__host__ __device__ __forceinline__ bool vec_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * N) == 0;
}

// In the emulator a vector access at an address a GPU would fault on is an error,
// although x86 would not fault: every emulated test checks the kernels' alignment logic.
template <class V>
__device__ __forceinline__ void check_vector_alignment(const void* p) {
#if !defined(__CUDACC__)
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V) != 0)
    throw ::ember::Error(::ember::detail::str("misaligned ", sizeof(V), "-byte access at ", p));
#else
  (void)p;
#endif
}

// The one way kernels load and store a vector V (a Pack, float4, a carrier...).
template <class V, class T>
__device__ __forceinline__ V load_vec(const T* p) {
  check_vector_alignment<V>(p);
  return *reinterpret_cast<const V*>(p);
}
template <class V, class T>
__device__ __forceinline__ void store_vec(T* p, const V& v) {
  check_vector_alignment<V>(p);
  *reinterpret_cast<V*>(p) = v;
}

// store_vec for the output streams of memory-bound kernels (global memory the kernel does
// not read back): a 16-byte V is one st.global.v4, written out. nvcc 13.0 lowered plain
// copies of a Pack in the elementwise kernels' unrolled loops to four scalar stores for
// half of them (the contiguous map kernel as the compiler unrolled it on 2026-12-04: 2 of 4
// packs; fill, relu and the casts ran at 57-80% of the datasheet), a quarter-sector write
// each. Not for shared memory or for kernels with register-hungry loops: the asm's memory
// clobber cost sgemm v5 80 bytes of stack.
template <class V, class T>
__device__ __forceinline__ void store_vec_global(T* p, const V& v) {
  check_vector_alignment<V>(p);
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(V) == 16) {
    uint4 bits;
    memcpy(&bits, &v, 16);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(bits.x), "r"(bits.y), "r"(bits.z),
                 "r"(bits.w)
                 : "memory");
    return;
  }
#endif
  *reinterpret_cast<V*>(p) = v;
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

// The widest power of two <= 16 that divides `v` (16 when v is 0).
inline int max_alignment(uint64_t v) {
  int a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// ---- Layouts --------------------------------------------------------------------------------

inline constexpr int kMaxDims = 8;

// A strided view: element (i_0, ..., i_{n-1}) is at base[sum_d i_d * strides[d]]
// (strides in elements, not bytes). Passed to kernels by value.
struct Layout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

inline Layout make_layout(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  EMBER_CHECK(sizes.size() == strides.size() && sizes.size() <= size_t(kMaxDims), "make_layout: ", sizes.size(),
              " sizes and ", strides.size(), " strides (at most ", kMaxDims, " dims)");
  Layout l;
  l.ndim = static_cast<int>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), l.sizes);
  std::copy(strides.begin(), strides.end(), l.strides);
  return l;
}
inline Layout contiguous_layout(int64_t n) { return make_layout({n}, {1}); }
inline int64_t numel(const Layout& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.sizes[d];
  return n;
}

// ---- Coalescing dims ---------------------------------------------------------------------

// Maps a linear index over the (coalesced) shape to each operand's element offset, in
// index type I: int64_t always works; uint32_t (narrow(), where every index and offset
// fits) makes the per-dim division and modulo a few instructions instead of a 64-bit
// division's long emulated sequence, which bounded the strided kernels on an H200.
template <int N, class I = int64_t>
struct Indexer {
  int ndim = 0;
  I sizes[kMaxDims] = {};
  I strides[N][kMaxDims] = {};

  // The dims loop runs over the constant kMaxDims (dims past ndim skipped), so every
  // index into sizes and strides is a constant: with a run-time one, nvcc copied the
  // 32-bit indexer into local memory (104 bytes of stack, reloaded per element).
  __host__ __device__ __forceinline__ void offsets(I i, I (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    EMBER_UNROLL
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= ndim) continue;
      const I q = i / sizes[d];
      const I idx = i - q * sizes[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
  bool contiguous() const {
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k)
      if (ndim == 1 && strides[k][0] != 1) return false;
    return true;
  }
  // Whether n linear indices and every operand's offsets fit in uint32_t (strides are
  // never negative here), so that narrow() loses nothing; also keeps a grid-stride loop's
  // i + stride below 2^32.
  bool fits_32_bits(int64_t n) const {
    constexpr int64_t kMax = int64_t{1} << 31;
    if (n >= kMax) return false;
    for (int k = 0; k < N; ++k) {
      int64_t last = 0;  // the largest offset: every index at its last value
      for (int d = 0; d < ndim; ++d) {
        if (strides[k][d] < 0) return false;
        last += (int64_t(sizes[d]) - 1) * int64_t(strides[k][d]);
      }
      if (last >= kMax) return false;
    }
    return true;
  }
  Indexer<N, uint32_t> narrow() const {
    Indexer<N, uint32_t> ix;
    ix.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      ix.sizes[d] = static_cast<uint32_t>(sizes[d]);
      for (int k = 0; k < N; ++k) ix.strides[k][d] = static_cast<uint32_t>(strides[k][d]);
    }
    return ix;
  }
};

// Operands' layouts over one shape (the first's), with size-1 dims dropped and adjacent
// dims merged where every operand steps through them as through one dim.
template <int N>
Indexer<N> make_indexer(const Layout* const (&layouts)[N]) {
  const Layout& shape = *layouts[0];
  for (int k = 1; k < N; ++k) {
    EMBER_CHECK(layouts[k]->ndim == shape.ndim, "strided operands: operand ", k, " has ", layouts[k]->ndim,
                " dims, the output ", shape.ndim);
    for (int d = 0; d < shape.ndim; ++d)
      EMBER_CHECK(layouts[k]->sizes[d] == shape.sizes[d], "strided operands: operand ", k, " has size ",
                  layouts[k]->sizes[d], " in dim ", d, " where the output has ", shape.sizes[d]);
  }
  Indexer<N> ix;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 1) continue;
    const int last = ix.ndim - 1;
    bool merge = last >= 0;
    for (int k = 0; k < N && merge; ++k) merge = ix.strides[k][last] == layouts[k]->strides[d] * shape.sizes[d];
    if (merge) {
      ix.sizes[last] *= shape.sizes[d];
      for (int k = 0; k < N; ++k) ix.strides[k][last] = layouts[k]->strides[d];
    } else {
      ix.sizes[ix.ndim] = shape.sizes[d];
      for (int k = 0; k < N; ++k) ix.strides[k][ix.ndim] = layouts[k]->strides[d];
      ++ix.ndim;
    }
  }
  return ix;
}

// One view with its dims coalesced (make_indexer's rule); a view of no dims (a scalar, or
// all sizes 1) becomes [1] with stride 1.
inline Layout coalesce_layout(const Layout& l) {
  const Layout* const one[1] = {&l};
  const Indexer<1> ix = make_indexer<1>(one);
  Layout c;
  c.ndim = ix.ndim > 0 ? ix.ndim : 1;
  c.sizes[0] = 1;
  c.strides[0] = 1;
  for (int d = 0; d < ix.ndim; ++d) {
    c.sizes[d] = ix.sizes[d];
    c.strides[d] = ix.strides[0][d];
  }
  return c;
}

}  // namespace ember::kernels::cuda
