// Philox 4x32-10 draws: uniform, normal and dropout. Element i of a draw at block offset
// `offset` takes lane i % k of counter block offset + i / k (k = 4 for 32-bit values, 2 for
// doubles), exactly as kernels/cpu/creation.cpp does, so a CUDA draw is bit for bit the
// CPU backend's for the same seed and offset (kernels/common/philox.h).
// The integers are identical on every backend; the map lo + (hi - lo) u is too wherever
// both compilers round it alike (nvcc fuses it into one multiply-add, as GCC does with
// -march=native on a CPU with FMA; a CPU build without FMA rounds twice, one ulp apart).
//
// Each thread computes whole Philox blocks (10 rounds of 2 32x32->64 multiplies: ~40 integer
// instructions per block) and writes their k values, as one vector store where aligned.
// On a GPU that is cheap next to the memory: a float draw writes 4 B per element, dropout
// reads and writes 2 x 4 B plus a 1-byte mask.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/philox.h"
#include "kernels/cuda/elementwise.cuh"

namespace ember::kernels::cuda {

template <class T>
inline constexpr int kPhiloxValues = std::is_same_v<T, double> ? 2 : 4;

// The thread's Philox blocks, grid-stride; f(block_values, first_element, count) writes them.
template <class T, class F>
__device__ __forceinline__ void for_each_philox_block(int64_t n, uint64_t seed, uint64_t offset, const F& f) {
  constexpr int k = kPhiloxValues<T>;
  const int64_t blocks = (n + k - 1) / k;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox_block(seed, offset + uint64_t(b));
    const int64_t first = b * k;
    f(r, first, int(n - first < k ? n - first : k));
  }
}

// A Philox block's K values of T at p: one vector access (load_vec / store_vec) when the
// block is whole and p is aligned to it, else one by one. With scalar accesses a thread's
// K consecutive elements take K warp instructions, each touching a sector per thread.
template <int K, class T>
__device__ __forceinline__ void store_block(T* p, const Pack<T, K>& v, int count) {
  if (count == K && vec_aligned<K>(p)) return store_vec_global(p, v);
  EMBER_UNROLL
  for (int i = 0; i < K; ++i)
    if (i < count) p[i] = v.v[i];
}
template <int K, class T>
__device__ __forceinline__ Pack<T, K> load_block(const T* p, int count) {
  if (count == K && vec_aligned<K>(p)) return load_vec<Pack<T, K>>(p);
  Pack<T, K> v = {};
  EMBER_UNROLL
  for (int i = 0; i < K; ++i)
    if (i < count) v.v[i] = p[i];
  return v;
}

inline LaunchConfig philox_config(int64_t n, int values_per_block) {
  return map_config((n + values_per_block - 1) / values_per_block);
}

// out[i] uniform in [lo, hi): in float for 32-bit types (24 random bits), double for double.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi) {
  for_each_philox_block<T>(n, seed, offset, [&](const Philox4& r, int64_t first, int count) {
    Pack<T, kPhiloxValues<T>> v;
    EMBER_UNROLL  // constant lanes: a run-time index would put v and r in local memory
    for (int lane = 0; lane < kPhiloxValues<T>; ++lane) {
      if constexpr (std::is_same_v<T, double>) {
        v.v[lane] = lo + (hi - lo) * uniform_double(r.v[2 * lane], r.v[2 * lane + 1]);
      } else {
        v.v[lane] = convert<T>(float(lo) + float(hi - lo) * uniform_float(r.v[lane]));
      }
    }
    store_block(out + first, v, count);
  });
}
template <class T>
void uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, cudaStream_t stream = {}) {
  launch<uniform_kernel<T>>(philox_config(n, kPhiloxValues<T>), stream, out, n, seed, offset, lo, hi);
}

// Box-Muller on u1 in (0, 1] and u2 in [0, 1), in the CPU backend's order of operations.
template <class C>
__host__ __device__ __forceinline__ C box_muller(C u1, C u2, bool use_sin) {
  using std::cos;
  using std::log;
  using std::sin;
  using std::sqrt;
  const C r = sqrt(C(-2) * log(u1));
  const C theta = C(6.283185307179586476925) * u2;
  return use_sin ? r * sin(theta) : r * cos(theta);
}

// out[i] normal(mean, stddev): a float block gives 4 values (lanes 0-1 and 2-3 pair up),
// a double block 2. Transcendentals make it ~20 flops per value, still memory-bound.
// The GPU's sqrt/log/sin/cos are correctly rounded or within 1-2 ulp of glibc's, so
// normals agree with the CPU backend's to a few ulp, not bit for bit (the uniforms they
// come from are bit-identical).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double stddev) {
  for_each_philox_block<T>(n, seed, offset, [&](const Philox4& r, int64_t first, int count) {
    Pack<T, kPhiloxValues<T>> v;
    EMBER_UNROLL
    for (int lane = 0; lane < kPhiloxValues<T>; ++lane) {
      if constexpr (std::is_same_v<T, double>) {
        const double u1 = 1.0 - uniform_double(r.v[0], r.v[1]), u2 = uniform_double(r.v[2], r.v[3]);
        v.v[lane] = mean + stddev * box_muller(u1, u2, lane == 1);
      } else {
        const int pair = lane / 2 * 2;
        const float u1 = 1.0f - uniform_float(r.v[pair]), u2 = uniform_float(r.v[pair + 1]);
        v.v[lane] = convert<T>(float(mean) + float(stddev) * box_muller(u1, u2, lane % 2 == 1));
      }
    }
    store_block(out + first, v, count);
  });
}
template <class T>
void normal(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double stddev, cudaStream_t stream = {}) {
  launch<normal_kernel<T>>(philox_config(n, kPhiloxValues<T>), stream, out, n, seed, offset, mean, stddev);
}

// out[i] = low + bits % range, integers in [low, high) as kernels/cpu/creation.cpp draws
// them: 32 random bits a value (4 a block) when the range fits in 2^32, else 64 (2 a
// block, kWide), whatever T is; converted to T as the CPU converts. Writes sizeof(T)
// bytes per element; the 64-bit remainder is the costliest step, still cheap next to
// the memory on a GPU.
template <class T, bool kWide>
__global__ void __launch_bounds__(kBlockThreads)
    randint_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  constexpr int k = kWide ? 2 : 4;
  const int64_t blocks = (n + k - 1) / k;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox_block(seed, offset + uint64_t(b));
    for (int lane = 0; lane < k && b * k + lane < n; ++lane) {
      const uint64_t bits = kWide ? (uint64_t(r.v[2 * lane]) << 32) | r.v[2 * lane + 1] : uint64_t(r.v[lane]);
      out[b * k + lane] = convert<T>(low + static_cast<int64_t>(bits % range));
    }
  }
}
template <class T>
void randint(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low, int64_t high, cudaStream_t stream = {}) {
  EMBER_CHECK(low < high, "randint: low ", low, " must be less than high ", high);
  const uint64_t range = static_cast<uint64_t>(high - low);
  if (range > (uint64_t(1) << 32))
    launch<randint_kernel<T, true>>(philox_config(n, 2), stream, out, n, seed, offset, low, range);
  else
    launch<randint_kernel<T, false>>(philox_config(n, 4), stream, out, n, seed, offset, low, range);
}

// Dropout in one pass: keep[i] = uniform[i] >= p, out[i] = x[i] * (keep ? 1 / (1 - p) : 0),
// with the uniform draw of the CPU backend (in T's precision: the draw of
// `rand(x.shape(), x.dtype())`, whose Philox blocks core's dropout reserves) and the CPU
// dropout kernel's float arithmetic (kernels/cpu/fused_nn.cpp), so masks and outputs are
// bit-identical. `keep` (1 byte per element, may be null) is what backward multiplies by.
// Memory: 2 sizeof(T) + 1 bytes per element.
// Each thread takes two Philox blocks a turn (b and b + the grid), both x loads issued
// before either block's arithmetic: one 16-byte load in flight per thread was the
// one-input elementwise kernels' shape, which ran at 80-92% of a copy on an H200.
template <class T>
__global__ void __launch_bounds__(kBlockThreads) dropout_kernel(const T* x, T* out, uint8_t* keep, int64_t n, double p,
                                                               uint64_t seed, uint64_t offset) {
  using C = compute_t<T>;
  const C threshold = C(p), scale = C(1.0 / (1.0 - p));
  constexpr int K = kPhiloxValues<T>;
  const int64_t blocks = (n + K - 1) / K, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b0 < blocks; b0 += 2 * stride) {
    Pack<T, K> xs[2] = {};
    int count[2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t first = (b0 + u * stride) * K;
      count[u] = first < n ? int(n - first < K ? n - first : K) : 0;
      if (count[u] > 0) xs[u] = load_block<K>(x + first, count[u]);
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      if (count[u] == 0) break;
      const int64_t b = b0 + u * stride;
      const Philox4 r = philox_block(seed, offset + uint64_t(b));
      Pack<T, K> ys;
      Pack<uint8_t, K> ks;
      EMBER_UNROLL  // every lane computed (constant indices), only count[u] stored
      for (int lane = 0; lane < K; ++lane) {
        C v;
        if constexpr (std::is_same_v<T, double>) v = uniform_double(r.v[2 * lane], r.v[2 * lane + 1]);
        else v = C(convert<T>(uniform_float(r.v[lane])));  // rand() rounds its draw to T
        ks.v[lane] = v >= threshold;
        ys.v[lane] = convert<T>(convert<C>(xs[u].v[lane]) * convert<C>(convert<T>(ks.v[lane] ? scale : C(0))));
      }
      store_block(out + b * K, ys, count[u]);
      if (keep != nullptr) store_block(keep + b * K, ks, count[u]);
    }
  }
}
template <class T>
void dropout(const T* x, T* out, uint8_t* keep, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream = {}) {
  EMBER_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  launch<dropout_kernel<T>>(philox_config(n, 2 * kPhiloxValues<T>), stream, x, out, keep, n, p, seed, offset);
}

// grad_input = grad_output * (keep ? scale : 0), the scale rounded to T as dropout_kernel
// rounds it, so the gradient equals that of x * (keep * scale) computed in T. Memory:
// 2 sizeof(T) + 1 bytes per element.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    dropout_backward_kernel(const T* grad, const uint8_t* keep, T* grad_input, int64_t n, compute_t<T> scale) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad_input[i] = convert<T>(convert<C>(grad[i]) * convert<C>(convert<T>(keep[i] ? scale : C(0))));
}
template <class T>
void dropout_backward(const T* grad, const uint8_t* keep, T* grad_input, int64_t n, double p,
                      cudaStream_t stream = {}) {
  EMBER_CHECK(p >= 0 && p < 1, "dropout_backward: p must be in [0, 1), got ", p);
  if (n == 0) return;
  launch<dropout_backward_kernel<T>>(map_config(n), stream, grad, keep, grad_input, n, compute_t<T>(1.0 / (1.0 - p)));
}

}  // namespace ember::kernels::cuda
