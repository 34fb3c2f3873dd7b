// Elementwise kernels: unary and binary math (the kernels/common functors), dtype casts,
// fill, arange and linspace. All are memory-bound; each says what it moves per element.
//
// One machinery serves them all. map1 / map2 take an output and one or two inputs, each
// with a Layout (sizes and element strides over the output's shape; stride 0 broadcasts).
// make_indexer merges the dims that are contiguous for every operand; when one dim
// remains with unit strides the contiguous kernel runs 16-byte vector loads and stores,
// after a scalar head that brings the pointers to a 16-byte boundary and with a scalar
// tail. Everything else (broadcasts, permuted or sliced views) takes the strided kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <type_traits>

#include "kernels/common/binary_ops.h"
#include "kernels/common/unary_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

// ---- Vector packs ----------------------------------------------------------------------------

// Elements per pack for a set of element types: 16 bytes of the widest one.
template <class... Ts>
inline constexpr int kPackElems = 16 / std::max({sizeof(Ts)...});

// Elements before `out` reaches a pack boundary; -1 when the inputs do not reach theirs
// at the same element (then only the scalar path is correct).
template <int V, class R, class... Ts>
int64_t pack_head(int64_t n, const R* out, const Ts*... in) {
  const uintptr_t bytes = sizeof(R) * V, mis = reinterpret_cast<uintptr_t>(out) % bytes;
  if (mis % sizeof(R) != 0) return -1;
  const int64_t head = std::min<int64_t>(n, int64_t((bytes - mis) % bytes / sizeof(R)));
  const bool ok = (vec_aligned<V>(in + head) && ...);
  return ok ? head : -1;
}

// ---- The kernels -----------------------------------------------------------------------------

template <size_t I, class P0, class... P>
__host__ __device__ __forceinline__ auto nth(P0 p0, P... p) {
  if constexpr (I == 0) return p0;
  else return nth<I - 1>(p...);
}
template <size_t I, class... Ts>
using nth_t = std::tuple_element_t<I, std::tuple<Ts...>>;

// The inputs' parameter types are not deducible (type_identity_t), so that
// map_contiguous_kernel<V, F, R, Ts...> names exactly one function for launch<>; and
// they carry no __restrict__, which GCC keeps in a pack's function type.

// Packs each thread of the contiguous kernel moves per turn of its grid-stride loop: all
// their loads are issued before the first use. One 16-byte load in flight per thread and
// input (2048 threads per SM: 32 KiB) is under what Little's law asks of an H200 (4.8 TB/s
// at ~1 us of loaded latency over 132 SMs: ~36 KiB per SM); relu, gelu and the casts,
// one input each, ran at 80-92% of a device-to-device copy that way (2026-12-04), add
// with two inputs at 97%.
inline constexpr int kMapUnroll = 4;

// out[i] = f(in[i]...) over contiguous operands (0, 1 or 2 inputs). Memory-bound: moves
// the operands' bytes once (add of f32: 12 B/element; a cast f32 -> bf16: 6 B/element).
// Elements [head, head + packs * V) go as V-element packs, kMapUnroll of them a thread
// per turn (packs p, p + stride, ...: each load instruction stays coalesced across the
// warp), the rest one by one.
template <int V, class F, class R, class... Ts>
__global__ void __launch_bounds__(kBlockThreads)
    map_contiguous_kernel(F f, int64_t n, int64_t head, R* __restrict__ out,
                          std::type_identity_t<const Ts*>... in) {
  static_assert(sizeof...(Ts) <= 2, "map kernels take up to two inputs");
  constexpr int U = V > 1 ? kMapUnroll : 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = V > 1 ? (n - head) / V : 0;
  for (int64_t p0 = tid; p0 < packs; p0 += stride * U) {
    if constexpr (sizeof...(Ts) == 0) {
      Pack<R, V> r;
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) r.v[j] = f();
      EMBER_UNROLL
      for (int u = 0; u < U; ++u)
        if (p0 + u * stride < packs) store_vec_global(out + head + (p0 + u * stride) * V, r);
    } else {
      using A = nth_t<0, Ts...>;
      Pack<A, V> a[U] = {};  // lanes past the end compute on zeros, never stored
      EMBER_UNROLL
      for (int u = 0; u < U; ++u)
        if (p0 + u * stride < packs) a[u] = load_vec<Pack<A, V>>(nth<0>(in...) + head + (p0 + u * stride) * V);
      if constexpr (sizeof...(Ts) == 1) {
        EMBER_UNROLL
        for (int u = 0; u < U; ++u) {
          Pack<R, V> r;
          EMBER_UNROLL
          for (int j = 0; j < V; ++j) r.v[j] = f(a[u].v[j]);
          if (p0 + u * stride < packs) store_vec_global(out + head + (p0 + u * stride) * V, r);
        }
      } else {
        using B = nth_t<1, Ts...>;
        Pack<B, V> b[U] = {};
        EMBER_UNROLL
        for (int u = 0; u < U; ++u)
          if (p0 + u * stride < packs) b[u] = load_vec<Pack<B, V>>(nth<1>(in...) + head + (p0 + u * stride) * V);
        EMBER_UNROLL
        for (int u = 0; u < U; ++u) {
          Pack<R, V> r;
          EMBER_UNROLL
          for (int j = 0; j < V; ++j) r.v[j] = f(a[u].v[j], b[u].v[j]);
          if (p0 + u * stride < packs) store_vec_global(out + head + (p0 + u * stride) * V, r);
        }
      }
    }
  }
  // The scalar head and tail: at most 2 V - 2 elements (all of them when V == 1).
  const int64_t rest = n - packs * V;
  for (int64_t k = tid; k < rest; k += stride) {
    const int64_t i = k < head ? k : head + packs * V + (k - head);
    out[i] = f(in[i]...);
  }
}

template <class F, class R, class Ix, class... Ts, size_t... I>
__device__ __forceinline__ void map_strided_element(const F& f, const Ix* off, R* out, std::index_sequence<I...>,
                                                    const Ts*... in) {
  out[off[0]] = f(in[off[I + 1]]...);
}

// The same over any strides (broadcasts, slices, permutations). Memory-bound as above,
// with one division per dim and element on top: 32-bit (Ix = uint32_t) wherever the
// indices fit, since a 64-bit one is a long emulated sequence.
template <class Ix, class F, class R, class... Ts>
__global__ void __launch_bounds__(kBlockThreads)
    map_strided_kernel(F f, Ix n, Indexer<1 + sizeof...(Ts), Ix> ix, R* out, std::type_identity_t<const Ts*>... in) {
  constexpr int N = 1 + sizeof...(Ts);
  const Ix stride = Ix(gridDim.x) * blockDim.x;
  for (Ix i = Ix(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Ix off[N];
    ix.offsets(i, off);
    map_strided_element(f, off, out, std::index_sequence_for<Ts...>{}, in...);
  }
}

// Launch configuration of both map kernels: a grid-stride loop over n items (packs or
// elements), kBlockThreads per block, 8 blocks per SM at most.
inline LaunchConfig map_config(int64_t items) {
  return LaunchConfig{dim3(grid_stride_blocks(items, kBlockThreads)), dim3(kBlockThreads), 0};
}

// The contiguous kernel's configuration: a grid of the blocks the GPU holds at once for
// this instance (its registers decide: ptxas sm_90 gives add f32 47 registers, 5 blocks of
// 256 per SM, relu 31, 8), so no block waits for a second wave.
template <auto Kernel>
LaunchConfig map_contiguous_config(int64_t items) {
#if defined(__CUDACC__)
  static const int per_sm = [] {
    int n = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, kBlockThreads, 0));
    return n > 0 ? n : 1;
  }();
#else
  const int per_sm = 8;
#endif
  return LaunchConfig{dim3(grid_stride_blocks(items, kBlockThreads, per_sm)), dim3(kBlockThreads), 0};
}

// Launches map_strided_kernel with 32-bit indices where they fit.
template <class F, class R, class... Ts>
void launch_map_strided(cudaStream_t stream, F f, int64_t n, const Indexer<1 + sizeof...(Ts)>& ix, R* out,
                        const Ts*... in) {
  if (ix.fits_32_bits(n))
    launch<map_strided_kernel<uint32_t, F, R, Ts...>>(map_config(n), stream, f, static_cast<uint32_t>(n), ix.narrow(),
                                                      out, in...);
  else
    launch<map_strided_kernel<int64_t, F, R, Ts...>>(map_config(n), stream, f, n, ix, out, in...);
}

// out = f(in...) elementwise over out's layout; inputs share its sizes (stride 0 to
// broadcast). Each input is a {pointer, layout} pair; f takes their element types and
// returns R.
template <class R, class F, class... Ts>
void map(cudaStream_t stream, F f, R* out, const Layout& out_layout, const std::pair<const Ts*, Layout>&... in) {
  constexpr int N = 1 + sizeof...(Ts);
  const Layout* const layouts[N] = {&out_layout, &in.second...};
  const Indexer<N> ix = make_indexer<N>(layouts);
  const int64_t n = numel(out_layout);
  if (n == 0) return;
  if (ix.contiguous()) {
    // Contiguous operands may still start at different offsets of their own: the
    // indexer's base is each pointer itself.
    constexpr int V = kPackElems<R, Ts...>;
    const int64_t head = pack_head<V>(n, out, in.first...);
    if (head >= 0)
      launch<map_contiguous_kernel<V, F, R, Ts...>>(
          map_contiguous_config<map_contiguous_kernel<V, F, R, Ts...>>((n - head) / (V * kMapUnroll) + 1), stream, f,
          n, head, out, in.first...);
    else
      launch<map_contiguous_kernel<1, F, R, Ts...>>(map_config(n), stream, f, n, int64_t{0}, out, in.first...);
    return;
  }
  launch_map_strided(stream, f, n, ix, out, in.first...);
}

// ---- The ops -----------------------------------------------------------------------------

// Applies Op in T's compute type and converts to R.
template <class Op, class R, class T>
struct UnaryMath {
  Op op;
  __host__ __device__ __forceinline__ R operator()(T x) const { return convert<R>(op(convert<compute_t<T>>(x))); }
};
template <class Op, class R, class T>
struct BinaryMath {
  Op op;
  __host__ __device__ __forceinline__ R operator()(T a, T b) const {
    return convert<R>(op(convert<compute_t<T>>(a), convert<compute_t<T>>(b)));
  }
};
// BinaryMath with its second operand a value held by the functor (a host scalar, Note
// [Scalar operands] in core/ops_elementwise.cpp): the same arithmetic, one input stream.
template <class Op, class R, class T>
struct BinaryScalarMath {
  Op op;
  compute_t<T> b;
  __host__ __device__ __forceinline__ R operator()(T a) const { return convert<R>(op(convert<compute_t<T>>(a), b)); }
};
template <class To, class From>
struct Convert {
  __host__ __device__ __forceinline__ To operator()(From x) const { return convert<To>(x); }
};
template <class T>
struct Constant {
  T value;
  __host__ __device__ __forceinline__ T operator()() const { return value; }
};

// out = op(in), e.g. unary<ops::Exp>(...). f32 exp: 8 B/element.
template <class Op, class T>
void unary(const T* in, const Layout& in_layout, T* out, const Layout& out_layout, Op op = {},
           cudaStream_t stream = {}) {
  map<T>(stream, UnaryMath<Op, T, T>{op}, out, out_layout, std::pair{in, in_layout});
}

// out = op(a, b); R is bool for comparisons. f32 add: 12 B/element (4 when b broadcasts).
template <class Op, class R, class T>
void binary(const T* a, const Layout& a_layout, const T* b, const Layout& b_layout, R* out, const Layout& out_layout,
            Op op = {}, cudaStream_t stream = {}) {
  map<R>(stream, BinaryMath<Op, R, T>{op}, out, out_layout, std::pair{a, a_layout}, std::pair{b, b_layout});
}

// out = op(a, b) for a scalar b, passed by value. f32 mul: 8 B/element.
template <class Op, class R, class T>
void binary_scalar(const T* a, const Layout& a_layout, T b, R* out, const Layout& out_layout, Op op = {},
                   cudaStream_t stream = {}) {
  map<R>(stream, BinaryScalarMath<Op, R, T>{op, convert<compute_t<T>>(b)}, out, out_layout, std::pair{a, a_layout});
}

// Whether l's elements lie in row-major order with no gaps (size-1 dims ignored).
inline bool is_row_major(const Layout& l) {
  int64_t expected = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    if (l.sizes[d] == 1) continue;
    if (l.strides[d] != expected) return false;
    expected *= l.sizes[d];
  }
  return true;
}

// Whether the byte ranges two views span (from their lowest to their highest element)
// intersect: the tiled copy needs distinct input and output.
template <class T>
bool views_overlap(const T* a, const Layout& la, const T* b, const Layout& lb) {
  const auto span = [](const T* p, const Layout& l) {
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < l.ndim; ++d) (l.strides[d] < 0 ? lo : hi) += (l.sizes[d] - 1) * l.strides[d];
    return std::pair{reinterpret_cast<uintptr_t>(p + lo), reinterpret_cast<uintptr_t>(p + hi + 1)};
  };
  const auto [a0, a1] = span(a, la);
  const auto [b0, b1] = span(b, lb);
  return a0 < b1 && b0 < a1;
}

// out = (To) in, any strides on either side (the copy kernel). sizeof(From) + sizeof(To)
// bytes per element. A same-type copy of a transposed view (one whose innermost dim is
// strided but another dim is not) into a row-major output goes through layout.cuh's
// shared-memory tiles, as the copy op does: element by element, one side of the copy
// touches a 32-byte sector per 4-byte element (14.5% of the datasheet on an H200,
// 2026-12-04).
template <class To, class From>
void cast(const From* in, const Layout& in_layout, To* out, const Layout& out_layout, cudaStream_t stream = {}) {
  if constexpr (std::is_same_v<To, From>) {
    if (is_row_major(out_layout) && permute_path(in_layout) == PermutePath::kTiled &&
        !views_overlap(in, in_layout, out, out_layout))
      return permute_contiguous(in, out, in_layout, stream);
  }
  map<To>(stream, Convert<To, From>{}, out, out_layout, std::pair{in, in_layout});
}

// out[...] = value, out may be strided. sizeof(T) bytes per element (writes only).
template <class T>
void fill(T* out, const Layout& out_layout, T value, cudaStream_t stream = {}) {
  map<T>(stream, Constant<T>{value}, out, out_layout);
}

// out = cond ? a : b (where), any strides on every operand. Three inputs are beyond the
// contiguous kernel's packs, so every layout takes the strided kernel: after coalescing,
// contiguous operands are one dim, one division per element on top of the
// 1 + 3 sizeof(T) bytes moved.
template <class T>
struct Select {
  __host__ __device__ __forceinline__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};
template <class T>
void select(const bool* cond, const Layout& cond_layout, const T* a, const Layout& a_layout, const T* b,
            const Layout& b_layout, T* out, const Layout& out_layout, cudaStream_t stream = {}) {
  const Layout* const layouts[4] = {&out_layout, &cond_layout, &a_layout, &b_layout};
  const Indexer<4> ix = make_indexer<4>(layouts);
  const int64_t n = numel(out_layout);
  if (n == 0) return;
  launch_map_strided(stream, Select<T>{}, n, ix, out, cond, a, b);
}

// out[i] = start + i * step, computed in double and converted (as on the CPU backend).
// Writes sizeof(T) bytes per element.
template <class T>
__global__ void __launch_bounds__(kBlockThreads) arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(start + step * double(i));
}
template <class T>
void arange(T* out, int64_t n, double start, double step, cudaStream_t stream = {}) {
  launch<arange_kernel<T>>(map_config(n), stream, out, n, start, step);
}

// linspace: symmetric from both ends, as PyTorch, so the last value is exactly `end`.
template <class T>
__global__ void __launch_bounds__(kBlockThreads) linspace_kernel(T* out, int64_t n, double start, double end) {
  const double step = n > 1 ? (end - start) / double(n - 1) : 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(i < n / 2 ? start + step * double(i) : end - step * double(n - 1 - i));
}
template <class T>
void linspace(T* out, int64_t n, double start, double end, cudaStream_t stream = {}) {
  launch<linspace_kernel<T>>(map_config(n), stream, out, n, start, end);
}

}  // namespace ember::kernels::cuda
