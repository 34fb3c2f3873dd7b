// CPU reductions: sum, amax, amin over any set of dims, and max/min with indices over
// one dim. Memory-bound: a reduction reads each input element once (4 bytes for
// float32) and writes one value per output.
//
// The reduced dims are coalesced and ordered so the smallest stride is innermost. Then:
// - inner path: each output reduces contiguous or strided runs; outputs go to threads,
//   or, when there are fewer outputs than threads, each output's range is split and the
//   partial results combined;
// - column path: when the kept innermost dim is contiguous and no reduced dim is, rows
//   of outputs accumulate together (e.g. summing a [N, C] tensor over N), which reads
//   memory in order instead of striding through it.
// Float sums accumulate in double, in 8 independent lanes, so a float32 sum of 1e6
// elements keeps about 1e-7 relative accuracy at memory speed.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
struct SumOp {
  using A = std::conditional_t<is_float_v<T>, double, int64_t>;
  static A identity() { return A(0); }
  static A step(A acc, T v) { return acc + static_cast<A>(cast<compute_t<T>>(v)); }
  static A combine(A a, A b) { return a + b; }
  static A run(const T* p, int64_t n, A acc) { return sum_run<A>(p, n, acc); }
};

// Max/min that propagate NaN: once a NaN is seen the result is NaN.
template <class T, bool kMax>
struct ExtremumOp {
  using A = compute_t<T>;
  static A identity() {
    if constexpr (std::numeric_limits<A>::has_infinity)
      return kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    else
      return kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  static A pick(A a, A b) {
    if (a != a) return a;
    if (b != b) return b;
    return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
  static A step(A acc, T v) { return pick(acc, cast<A>(v)); }
  static A combine(A a, A b) { return pick(a, b); }
  static A run(const T* p, int64_t n, A acc) {
    for (int64_t i = 0; i < n; ++i) acc = pick(acc, cast<A>(p[i]));
    return acc;
  }
};

struct Dims {
  std::vector<int64_t> sizes, strides;  // outermost first, strides in elements
};

// Coalesces dims given outermost first: drops size 1, merges a dim into the next one
// when the outer stride equals inner stride * inner size.
Dims coalesce(const Dims& in) {
  Dims out;
  for (size_t i = 0; i < in.sizes.size(); ++i) {
    if (in.sizes[i] == 1) continue;
    out.sizes.push_back(in.sizes[i]);
    out.strides.push_back(in.strides[i]);
  }
  for (size_t i = out.sizes.size(); i-- > 1;) {
    if (out.strides[i - 1] == out.strides[i] * out.sizes[i]) {
      out.sizes[i - 1] *= out.sizes[i];
      out.strides[i - 1] = out.strides[i];
      out.sizes.erase(out.sizes.begin() + i);
      out.strides.erase(out.strides.begin() + i);
    }
  }
  return out;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// Element offset of flat index `i` of a row-major walk over `d`.
int64_t offset_of(const Dims& d, int64_t i) {
  int64_t off = 0;
  for (size_t k = d.sizes.size(); k-- > 0;) {
    off += (i % d.sizes[k]) * d.strides[k];
    i /= d.sizes[k];
  }
  return off;
}

// Reduces the flat reduced indices [b, e) of the region at `base`.
template <class R, class T>
typename R::A reduce_range(const T* base, const Dims& red, int64_t b, int64_t e, typename R::A acc) {
  if (red.sizes.empty()) return R::step(acc, *base);
  const int64_t inner = red.sizes.back(), inner_stride = red.strides.back();
  for (int64_t i = b; i < e;) {
    int64_t j = i % inner;
    int64_t n = std::min(inner - j, e - i);
    const T* p = base + offset_of(red, i);
    if (inner_stride == 1) {
      acc = R::run(p, n, acc);
    } else {
      for (int64_t k = 0; k < n; ++k) acc = R::step(acc, p[k * inner_stride]);
    }
    i += n;
  }
  return acc;
}

template <template <class> class Op, class O>
void reduce_typed(const Tensor& out, const Tensor& in, DimMask mask) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = Op<T>;
    using A = typename R::A;
    {
      using OutT = std::conditional_t<std::is_same_v<O, void>, T, O>;
      Dims kept, red;
      for (int64_t d = 0; d < in.dim(); ++d) {
        Dims& target = (mask >> d) & 1 ? red : kept;
        target.sizes.push_back(in.shape()[d]);
        target.strides.push_back(in.strides()[d]);
      }
      // Innermost reduced dim = smallest stride (order does not change the result's meaning).
      std::vector<size_t> order(red.sizes.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return red.strides[a] > red.strides[b]; });
      Dims sorted;
      for (size_t i : order) {
        sorted.sizes.push_back(red.sizes[i]);
        sorted.strides.push_back(red.strides[i]);
      }
      red = coalesce(sorted);
      kept = coalesce(kept);

      const T* src = static_cast<const T*>(in.data_ptr());
      OutT* dst = static_cast<OutT*>(out.data_ptr());
      const int64_t n_out = out.numel(), n_red = product(red.sizes);
      auto finish = [](A a) { return cast<OutT>(a); };

      const bool column = !kept.sizes.empty() && kept.strides.back() == 1 && !red.sizes.empty() &&
                          red.strides.back() != 1 && n_out >= 16;
      if (column) {
        const int64_t width = kept.sizes.back();
        Dims outer{{kept.sizes.begin(), kept.sizes.end() - 1}, {kept.strides.begin(), kept.strides.end() - 1}};
        constexpr int64_t kBlock = 256;
        const int64_t blocks_per_row = (width + kBlock - 1) / kBlock;
        const int64_t tasks = product(outer.sizes) * blocks_per_row;
        parallel_for(0, tasks, std::max<int64_t>(1, kGrainSize / (n_red * kBlock)), [&](int64_t b, int64_t e) {
          A acc[kBlock];
          for (int64_t t = b; t < e; ++t) {
            const int64_t row = t / blocks_per_row, j0 = (t % blocks_per_row) * kBlock;
            const int64_t w = std::min(kBlock, width - j0);
            const T* base = src + offset_of(outer, row) + j0;
            for (int64_t j = 0; j < w; ++j) acc[j] = R::identity();
            for (int64_t r = 0; r < n_red; ++r) {
              const T* p = base + offset_of(red, r);
              for (int64_t j = 0; j < w; ++j) acc[j] = R::step(acc[j], p[j]);
            }
            for (int64_t j = 0; j < w; ++j) dst[row * width + j0 + j] = finish(acc[j]);
          }
        });
        return;
      }

      const int threads = num_threads();
      if (n_out >= threads || n_red < 2 * kGrainSize) {
        parallel_for(0, n_out, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n_red, 1)), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o)
            dst[o] = finish(reduce_range<R>(src + offset_of(kept, o), red, 0, n_red, R::identity()));
        });
        return;
      }
      // Few outputs, long reductions: split each output's range, then combine in order.
      for (int64_t o = 0; o < n_out; ++o) {
        std::vector<A> partial(threads, R::identity());
        const T* base = src + offset_of(kept, o);
        parallel_for(0, threads, 1, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t)
            partial[t] = reduce_range<R>(base, red, n_red * t / threads, n_red * (t + 1) / threads, R::identity());
        });
        A acc = R::identity();
        for (A p : partial) acc = R::combine(acc, p);
        dst[o] = finish(acc);
      }
    }
  });
}

template <class T> using MaxOp = ExtremumOp<T, true>;
template <class T> using MinOp = ExtremumOp<T, false>;

void sum_kernel(const Tensor& out, const Tensor& in, DimMask mask) {
  // Integer and bool sums are int64 (core allocates out so); float sums keep the dtype.
  if (is_floating(in.dtype()))
    reduce_typed<SumOp, void>(out, in, mask);
  else
    reduce_typed<SumOp, int64_t>(out, in, mask);
}
void amax_kernel(const Tensor& out, const Tensor& in, DimMask mask) { reduce_typed<MaxOp, void>(out, in, mask); }
void amin_kernel(const Tensor& out, const Tensor& in, DimMask mask) { reduce_typed<MinOp, void>(out, in, mask); }

// values/indices have the input's shape with `dim` of size 1. The first extremum wins;
// a NaN wins over everything (its first occurrence), as in PyTorch.
template <bool kMax>
void extremum_dim_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    Dims kept;
    for (int64_t d = 0; d < in.dim(); ++d)
      if (d != dim) {
        kept.sizes.push_back(in.shape()[d]);
        kept.strides.push_back(in.strides()[d]);
      }
    const int64_t n = in.shape()[dim], stride = in.strides()[dim];
    const T* src = static_cast<const T*>(in.data_ptr());
    T* vout = static_cast<T*>(values.data_ptr());
    int64_t* iout = static_cast<int64_t*>(indices.data_ptr());
    parallel_for(0, values.numel(), std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = src + offset_of(kept, o);
        C best = cast<C>(p[0]);
        int64_t arg = 0;
        for (int64_t i = 1; i < n && best == best; ++i) {
          C v = cast<C>(p[i * stride]);
          if (v != v || (kMax ? v > best : v < best)) {
            best = v;
            arg = i;
          }
        }
        vout[o] = cast<T>(best);
        iout[o] = arg;
      }
    });
  });
}

}  // namespace

void register_reduce() {
  constexpr DeviceType cpu = DeviceType::CPU;
  sum_stub.set(cpu, sum_kernel);
  amax_stub.set(cpu, amax_kernel);
  amin_stub.set(cpu, amin_kernel);
  max_dim_stub.set(cpu, extremum_dim_kernel<true>);
  min_dim_stub.set(cpu, extremum_dim_kernel<false>);
}

}  // namespace ember::kernels::cpu
