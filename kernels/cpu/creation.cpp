// CPU kernels that create values: arange, linspace, and the Philox draws (uniform,
// normal, randint). Outputs are contiguous; element i of a draw depends only on
// (seed, offset, i), so the split across threads does not change the numbers.
#include <cmath>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <class F>
void for_each_index(const Tensor& out, const F& f) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(Tag<T>{}, i);
    });
  });
}

void arange_kernel(const Tensor& out, double start, double step) {
  for_each_index(out, [&](auto tag, int64_t i) {
    using T = typename decltype(tag)::type;
    return cast<T>(start + step * static_cast<double>(i));
  });
}

// Symmetric from both ends, as PyTorch does, so that the last value is exactly `end`.
void linspace_kernel(const Tensor& out, double start, double end) {
  const int64_t n = out.numel();
  const double step = n > 1 ? (end - start) / static_cast<double>(n - 1) : 0.0;
  for_each_index(out, [&](auto tag, int64_t i) {
    using T = typename decltype(tag)::type;
    double v = i < n / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(n - 1 - i);
    return cast<T>(v);
  });
}

// Box-Muller on two uniforms: u1 in (0, 1] (so log is finite), u2 in [0, 1).
template <class C>
C box_muller(C u1, C u2, bool use_sin) {
  const C r = std::sqrt(C(-2) * std::log(u1));
  const C theta = C(6.283185307179586476925) * u2;
  return use_sin ? r * std::sin(theta) : r * std::cos(theta);
}

// Runs f(Tag<T>{}, block, lane) -> T for every element, one Philox block per `per_block`
// consecutive elements (4 for 32-bit values, 2 for 64-bit ones), blocks split across threads.
template <class F>
void for_each_block(const Tensor& out, PhiloxState st, int64_t per_block, const F& f) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    const int64_t n = out.numel(), blocks = (n + per_block - 1) / per_block;
    parallel_for(0, blocks, kGrainSize / per_block, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        const Philox4 r = philox_block(st.seed, st.offset + uint64_t(blk));
        for (int64_t lane = 0; lane < per_block && blk * per_block + lane < n; ++lane)
          o[blk * per_block + lane] = f(tag, r, static_cast<int>(lane));
      }
    });
  });
}

int64_t per_block(DType t) { return t == DType::Float64 ? 2 : 4; }

void uniform_kernel(const Tensor& out, PhiloxState st, double lo, double hi) {
  for_each_block(out, st, per_block(out.dtype()), [&](auto tag, const Philox4& r, int lane) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      return lo + (hi - lo) * uniform_double(r.v[2 * lane], r.v[2 * lane + 1]);
    } else {
      return cast<T>(static_cast<float>(lo) + static_cast<float>(hi - lo) * uniform_float(r.v[lane]));
    }
  });
}

// A float block gives 4 normals (lanes 0-1 and 2-3 pair up for Box-Muller), a double
// block 2 (its two 64-bit uniforms pair up).
void normal_kernel(const Tensor& out, PhiloxState st, double mean, double stddev) {
  for_each_block(out, st, per_block(out.dtype()), [&](auto tag, const Philox4& r, int lane) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      const double u1 = 1.0 - uniform_double(r.v[0], r.v[1]), u2 = uniform_double(r.v[2], r.v[3]);
      return mean + stddev * box_muller(u1, u2, lane == 1);
    } else {
      const int pair = lane / 2 * 2;
      const float u1 = 1.0f - uniform_float(r.v[pair]), u2 = uniform_float(r.v[pair + 1]);
      return cast<T>(static_cast<float>(mean) + static_cast<float>(stddev) * box_muller(u1, u2, lane % 2 == 1));
    }
  });
}

// Integers in [low, high): 32 random bits per value when the range fits, else 64.
void randint_kernel(const Tensor& out, PhiloxState st, double low_d, double high_d) {
  const int64_t low = static_cast<int64_t>(low_d);
  const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(high_d) - low);
  const bool wide = range > (uint64_t(1) << 32);
  for_each_block(out, st, wide ? 2 : 4, [&](auto tag, const Philox4& r, int lane) {
    using T = typename decltype(tag)::type;
    const uint64_t bits = wide ? (uint64_t(r.v[2 * lane]) << 32) | r.v[2 * lane + 1] : uint64_t(r.v[lane]);
    return cast<T>(low + static_cast<int64_t>(bits % range));
  });
}

}  // namespace

void register_creation() {
  constexpr DeviceType cpu = DeviceType::CPU;
  arange_stub.set(cpu, arange_kernel);
  linspace_stub.set(cpu, linspace_kernel);
  uniform_stub.set(cpu, uniform_kernel);
  normal_stub.set(cpu, normal_kernel);
  randint_stub.set(cpu, randint_kernel);
}

}  // namespace ember::kernels::cpu
