// The reductions the kernels of reduce.cuh run, one small struct each (Note [Reducers]):
// sum, mean, max, min, var (Welford states merged by Chan's formula) and argmax/argmin
// (the first extremum; NaN wins, as in PyTorch).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common/norm_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

// --- Note [Reducers] -------------------------------------------------------------------
// A reduction, as the kernels below see it, is a small struct over element type T:
//   Acc                       the running state (C for sums and extrema, a Welford triple
//                             for var, a value and an index for argmax);
//   identity(), merge(a, b)   merge is associative up to rounding; the kernels fix the order;
//   chunk(v, i0, di)          the state of N values v[j] at positions i0 + j * di of the
//                             reduced dim (one 16-byte vector, or N loads of one column);
//   write(out, o, acc, n)     stores output o of a reduction over n elements.
// C is the compute type: float for float32/bfloat16/float16, double for float64, the
// type itself for int32/int64 and int for 1-byte integers (so that warp shuffles, which
// have no 1-byte form, take it).

template <class T>
using reduce_compute_t = std::conditional_t<std::is_integral_v<T> && sizeof(T) < 4, int, compute_t<T>>;

// The value every element beats or ties: -inf / +inf for floats, the type's extreme for
// integers (which have no infinity).
template <class C, bool kMax>
__device__ __forceinline__ C extremum_identity() {
  if constexpr (std::is_floating_point_v<C>) return kMax ? -C(INFINITY) : C(INFINITY);
  else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}


// A: the accumulator, the compute type by default; the op table's sum takes double, as
// the CPU backend does, so both round a float sum once (memory-bound: the double adds are
// free next to the loads).
template <class T, class A = compute_t<T>>
struct SumReduce {
  using Elem = T;
  using C = A;
  using Acc = C;
  using Out = T*;  // [outputs]
  static constexpr const char* kName = "sum";
  static constexpr bool kNeedsElements = false;
  __device__ __forceinline__ Acc identity() const { return C(0); }
  __device__ __forceinline__ Acc merge(Acc a, Acc b) const { return a + b; }
  template <int N>
  __device__ __forceinline__ Acc chunk(const C (&v)[N], int64_t, int64_t) const {
    C s = v[0];
    for (int j = 1; j < N; ++j) s += v[j];
    return s;
  }
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t) const {
    out[o] = round_to<T>(a);
  }
};

// The sum divided by n, rounded once (n == 0 gives 0/0 = NaN, as in PyTorch).
template <class T>
struct MeanReduce : SumReduce<T> {
  using typename SumReduce<T>::C;
  using typename SumReduce<T>::Acc;
  using typename SumReduce<T>::Out;
  static constexpr const char* kName = "mean";
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t n) const {
    out[o] = round_to<T>(a / C(n));
  }
};

// The sum of integers (bool read as uint8) in int64, as the CPU backend sums them:
// exact, wrapping past 2^63 alike.
template <class T>
struct IntSumReduce {
  static_assert(std::is_integral_v<T>, "IntSumReduce sums integers");
  using Elem = T;
  using C = int64_t;
  using Acc = int64_t;
  using Out = int64_t*;  // [outputs]
  static constexpr const char* kName = "sum";
  static constexpr bool kNeedsElements = false;
  __device__ __forceinline__ Acc identity() const { return 0; }
  __device__ __forceinline__ Acc merge(Acc a, Acc b) const {
    return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));  // wraps, no UB
  }
  template <int N>
  __device__ __forceinline__ Acc chunk(const C (&v)[N], int64_t, int64_t) const {
    Acc s = v[0];
    for (int j = 1; j < N; ++j) s = merge(s, v[j]);
    return s;
  }
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t) const { out[o] = a; }
};

// max (kMax) or min; NaN propagates (block_reduce.cuh's MaxOp/MinOp).
template <class T, bool kMax>
struct ExtremumReduce {
  using Elem = T;
  using C = reduce_compute_t<T>;
  using Acc = C;
  using Out = T*;  // [outputs]
  static constexpr const char* kName = kMax ? "amax" : "amin";
  static constexpr bool kNeedsElements = true;
  __device__ __forceinline__ Acc identity() const { return extremum_identity<C, kMax>(); }
  __device__ __forceinline__ Acc merge(Acc a, Acc b) const {
    if constexpr (kMax) return MaxOp{}(a, b);
    else return MinOp{}(a, b);
  }
  template <int N>
  __device__ __forceinline__ Acc chunk(const C (&v)[N], int64_t, int64_t) const {
    C m = v[0];
    for (int j = 1; j < N; ++j) m = merge(m, v[j]);
    return m;
  }
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t) const {
    out[o] = round_to<T>(a);
  }
};
template <class T> using MaxReduce = ExtremumReduce<T, true>;
template <class T> using MinReduce = ExtremumReduce<T, false>;

// Variance: m2 / max(n - correction, 0), as torch.var (n <= correction gives inf, or NaN
// when m2 is 0 or NaN). Each chunk's mean and m2 come from its values in registers (two
// passes, exact up to rounding); chunks merge by Chan, Golub and LeVeque's formula:
// one division per chunk, not per element.
template <class T>
struct VarReduce {
  using Elem = T;
  using C = compute_t<T>;
  using Acc = ops::Welford<C>;  // Welford states, merged by Chan's formula
  using Out = T*;  // [outputs]
  static constexpr const char* kName = "var";
  static constexpr bool kNeedsElements = false;
  int64_t correction = 1;

  __device__ __forceinline__ Acc identity() const { return Acc::empty(); }
  __device__ __forceinline__ Acc merge(Acc a, Acc b) const { return a.merge(b); }
  template <int N>
  __device__ __forceinline__ Acc chunk(const C (&v)[N], int64_t, int64_t) const {
    return Acc::of(v, N);
  }
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t) const {
    out[o] = round_to<T>(a.variance(correction));
  }
};

// The best value so far and its position in the reduced dim.
template <class C>
struct ArgAcc {
  C value;
  int64_t index;
};
template <class T>
struct IndexedOut {
  T* values;         // [outputs], or null when only the indices are wanted
  int64_t* indices;  // [outputs]
};

// argmax (kMax) / argmin: the position of the first extremum; a NaN beats every number,
// and the first NaN wins (PyTorch's rule; the CPU backend's max_dim/min_dim).
template <class T, bool kMax>
struct ArgExtremumReduce {
  using Elem = T;
  using C = reduce_compute_t<T>;
  using Acc = ArgAcc<C>;
  using Out = IndexedOut<T>;
  static constexpr const char* kName = kMax ? "argmax" : "argmin";
  static constexpr bool kNeedsElements = true;

  // Every element beats or ties the identity, and wins the tie by its smaller index.
  __device__ __forceinline__ Acc identity() const {
    return Acc{extremum_identity<C, kMax>(), INT64_MAX};
  }
  __device__ __forceinline__ static bool better(C a, C b) { return kMax ? a > b : a < b; }
  // a and b hold disjoint positions, so the result does not depend on their order.
  __device__ __forceinline__ Acc merge(Acc a, Acc b) const {
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan) {
      if (better(a.value, b.value)) return a;
      if (better(b.value, a.value)) return b;
    }
    return a.index < b.index ? a : b;
  }
  template <int N>
  __device__ __forceinline__ Acc chunk(const C (&v)[N], int64_t i0, int64_t di) const {
    Acc best{v[0], i0};
    for (int j = 1; j < N; ++j)
      if (best.value == best.value && (v[j] != v[j] || better(v[j], best.value))) best = Acc{v[j], i0 + j * di};
    return best;
  }
  __device__ __forceinline__ void write(Out out, int64_t o, Acc a, int64_t) const {
    if (out.values != nullptr) out.values[o] = round_to<T>(a.value);
    out.indices[o] = a.index;
  }
};
template <class T> using ArgMaxReduce = ArgExtremumReduce<T, true>;
template <class T> using ArgMinReduce = ArgExtremumReduce<T, false>;

}  // namespace ember::kernels::cuda
