// The CPU backend's elementwise machinery: dtype dispatch, and a strided N-operand loop
// that coalesces dims, splits the work across the thread pool and hands each thread
// runs of the innermost dim, so inner loops see plain (vectorizable) pointer strides.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "core/tensor.h"
#include "kernels/cpu/parallel.h"

namespace ember::kernels::cpu {

template <class T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) with the C++ type of `t`.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(Tag<bool>{});
    case DType::UInt8: return f(Tag<uint8_t>{});
    case DType::Int32: return f(Tag<int32_t>{});
    case DType::Int64: return f(Tag<int64_t>{});
    case DType::Float16: return f(Tag<Half>{});
    case DType::BFloat16: return f(Tag<BFloat16>{});
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
  }
  EMBER_FAIL("visit_dtype: bad dtype ", static_cast<int>(t));
}

template <class T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// The type arithmetic on T is done in: float for the 16-bit floats, T otherwise.
template <class T>
using compute_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// Value conversion between any two element types (bool: nonzero is true).
template <class To, class From>
inline To cast(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_reduced_float_v<From>) {
    return cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// acc + the sum of p[0..n) in A (double for the floats): eight lanes break the
// dependency chain, so the loop runs at load speed.
template <class A, class T>
A sum_run(const T* p, int64_t n, A acc = A(0)) {
  A lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<A>(cast<compute_t<T>>(p[i + k]));
  for (; i < n; ++i) acc += static_cast<A>(cast<compute_t<T>>(p[i]));
  return acc + ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// N operands of one shape (operand 0 is usually the output), iterated together.
template <int N>
struct StridedLoop {
  std::vector<int64_t> sizes;                    // coalesced, outermost first
  std::array<std::vector<int64_t>, N> strides;   // in bytes, per operand
  std::array<char*, N> data;
  int64_t numel = 1;

  explicit StridedLoop(const std::array<const Tensor*, N>& ops) {
    const Shape& shape = ops[0]->shape();
    for (int k = 0; k < N; ++k) data[k] = static_cast<char*>(ops[k]->data_ptr());
    // Walk from the innermost dim outward, dropping size-1 dims and merging a dim into
    // the one inside it when every operand steps through both as through one.
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      int64_t n = shape[d];
      numel *= n;
      if (n == 1) continue;
      bool merge = !sizes.empty();
      for (int k = 0; k < N && merge; ++k)
        merge = ops[k]->strides()[d] * ops[k]->element_size() == strides[k].back() * sizes.back();
      if (merge) {
        sizes.back() *= n;
      } else {
        sizes.push_back(n);
        for (int k = 0; k < N; ++k) strides[k].push_back(ops[k]->strides()[d] * ops[k]->element_size());
      }
    }
    // The walk collected dims innermost first; flip them to outermost first.
    std::reverse(sizes.begin(), sizes.end());
    for (auto& st : strides) std::reverse(st.begin(), st.end());
  }

  // Calls inner(ptrs, inner_strides, n) for runs of the innermost dim, in parallel.
  template <class Inner>
  void run(const Inner& inner, int64_t grain = kGrainSize) const {
    if (numel == 0) return;
    const int nd = static_cast<int>(sizes.size());
    if (nd == 0) {
      std::array<char*, N> p = data;
      std::array<int64_t, N> s{};
      inner(p.data(), s.data(), int64_t(1));
      return;
    }
    std::array<int64_t, N> inner_strides;
    for (int k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
    parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> idx(nd);
      std::array<char*, N> p = data;
      int64_t rem = begin;
      for (int d = nd - 1; d >= 0; --d) {
        idx[d] = rem % sizes[d];
        rem /= sizes[d];
        for (int k = 0; k < N; ++k) p[k] += idx[d] * strides[k][d];
      }
      for (int64_t pos = begin; pos < end;) {
        int64_t n = std::min(sizes[nd - 1] - idx[nd - 1], end - pos);
        inner(p.data(), inner_strides.data(), n);
        pos += n;
        idx[nd - 1] += n;
        for (int k = 0; k < N; ++k) p[k] += n * inner_strides[k];
        for (int d = nd - 1; d > 0 && idx[d] == sizes[d]; --d) {
          idx[d] = 0;
          ++idx[d - 1];
          for (int k = 0; k < N; ++k) p[k] += strides[k][d - 1] - sizes[d] * strides[k][d];
        }
      }
    });
  }

};

}  // namespace ember::kernels::cpu
