// CPU index_select, gather, scatter_add, index_add and topk, and the fused ops' index checks. Core passes int64 contiguous indices, and
// (for index_select) a contiguous input. Indices are checked here, as they are read:
// an out-of-range index is an ember::Error naming it, never a wild read or write.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

void check_index(const char* op, int64_t v, int64_t dim, int64_t size) {
  EMBER_CHECK(v >= 0 && v < size, op, ": index ", v, " is out of range for dim ", dim, " of size ", size);
}

// out [outer, L, inner] = in [outer, n, inner] rows picked by index [L].
void index_select_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const Shape& s = in.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= s[d];
  const int64_t n = s[dim], L = index.numel(), row_bytes = inner * in.element_size();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t l = 0; l < L; ++l) check_index("index_select", idx[l], dim, n);
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, outer * L, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / L, l = r % L;
      std::memcpy(dst + r * row_bytes, src + (o * n + idx[l]) * row_bytes, row_bytes);
    }
  });
}

// Visits every position of `index` (row-major) with the element offsets it maps to in
// `a` (position itself) and `b` (position with dim replaced by the index value).
template <class F>
void for_each_indexed(const Tensor& index, const Shape& a_strides, const Shape& b_strides, int64_t dim,
                      int64_t b_size, const char* op, const F& f) {
  const int64_t nd = index.dim();
  const Shape& shape = index.shape();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  auto body = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int64_t rem = i, oa = 0, ob = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        const int64_t c = rem % shape[d];
        rem /= shape[d];
        oa += c * a_strides[d];
        if (d != dim) ob += c * b_strides[d];
      }
      const int64_t v = idx[i];
      check_index(op, v, dim, b_size);
      f(oa, ob + v * b_strides[dim]);
    }
  };
  parallel_for(0, index.numel(), kGrainSize, body);
}

void gather_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    const T* x = static_cast<const T*>(in.data_ptr());
    for_each_indexed(index, out.strides(), in.strides(), dim, in.shape()[dim], "gather",
                     [&](int64_t oa, int64_t ob) { o[oa] = x[ob]; });
  });
}

// Note [Parallel scatter_add]. Two positions of `index` write the same element of self only
// when they differ in `dim` alone (self's other coordinates are the position's), so the
// positions split into fibers along dim that no two threads share. Each task takes a chunk
// of fibers and walks dim in order, the chunk's fibers side by side (consecutive fibers are
// consecutive in memory when dim is not last): an element gets its terms in the order of
// their position along dim, as a serial loop adds them, whatever the thread count.
void scatter_add_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  // A 0-d index is one position along a dim of size 1.
  const int64_t nd = std::max<int64_t>(index.dim(), 1);
  const auto dims = [nd](const Shape& v, int64_t fill) { return v.empty() ? Shape(nd, fill) : v; };
  const Shape shape = dims(index.shape(), 1), as = dims(src.strides(), 0), bs = dims(self.strides(), 0),
              is = dims(index.strides(), 0);
  const int64_t len = shape[dim], fibers = index.numel() / len, bsize = self.dim() == 0 ? 1 : self.shape()[dim];
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  constexpr int64_t kChunk = 256;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL("scatter_add kernel: dtype bool is not supported");
    } else {
      using C = compute_t<T>;
      T* y = static_cast<T*>(self.data_ptr());
      const T* s = static_cast<const T*>(src.data_ptr());
      const int64_t chunks = (fibers + kChunk - 1) / kChunk;
      parallel_for(0, chunks, std::max<int64_t>(1, kGrainSize / (kChunk * len)), [&](int64_t cb, int64_t ce) {
        int64_t oa[kChunk], ob[kChunk], oi[kChunk];
        for (int64_t chunk = cb; chunk < ce; ++chunk) {
          const int64_t f0 = chunk * kChunk, nf = std::min(kChunk, fibers - f0);
          for (int64_t j = 0; j < nf; ++j) {  // fiber f0 + j's offsets at position 0 along dim
            int64_t rem = f0 + j, a = 0, b = 0, i = 0;
            for (int64_t d = nd - 1; d >= 0; --d) {
              if (d == dim) continue;
              const int64_t c = rem % shape[d];
              rem /= shape[d];
              a += c * as[d];
              b += c * bs[d];
              i += c * is[d];
            }
            oa[j] = a, ob[j] = b, oi[j] = i;
          }
          for (int64_t c = 0; c < len; ++c) {
            for (int64_t j = 0; j < nf; ++j) {
              const int64_t v = idx[oi[j] + c * is[dim]];
              check_index("scatter_add", v, dim, bsize);
              T& dst = y[ob[j] + v * bs[dim]];
              dst = static_cast<T>(static_cast<C>(dst) + static_cast<C>(s[oa[j] + c * as[dim]]));
            }
          }
        }
      });
    }
  });
}

// Note [Deterministic index_add]. self [outer, n, inner] += src [outer, m, inner] at rows
// index [m]. Work is split over (outer, block of kColumns columns): each task owns its
// columns of self and adds every source row into them in order of i, so an element gets
// its terms in the same order whatever the thread count, and the inner loop is a
// contiguous a += b that GCC vectorizes. This is index_select's backward: it replaced a
// serial element-by-element scatter_add (bench/bench_indexing.cpp has the figures).
void index_add_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t outer = self.size(0), n = self.size(1), inner = self.size(2), m = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t i = 0; i < m; ++i) check_index("index_add", idx[i], dim, n);
  constexpr int64_t kColumns = 1024;
  const int64_t blocks = (inner + kColumns - 1) / kColumns;
  const int64_t work = m * std::min(inner, kColumns);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL("index_add kernel: dtype bool is not supported");
    } else {
      using C = compute_t<T>;
      T* y = static_cast<T*>(self.data_ptr());
      const T* x = static_cast<const T*>(src.data_ptr());
      parallel_for(0, outer * blocks, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work, 1)), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / blocks, c0 = (t % blocks) * kColumns, len = std::min(kColumns, inner - c0);
          for (int64_t i = 0; i < m; ++i) {
            T* dst = y + (o * n + idx[i]) * inner + c0;
            const T* from = x + (o * m + i) * inner + c0;
            for (int64_t j = 0; j < len; ++j) dst[j] = static_cast<T>(static_cast<C>(dst[j]) + static_cast<C>(from[j]));
          }
        }
      });
    }
  });
}

// values, indices [outer, k, inner] of the k first of in [outer, n, inner] in the order
// `before` (largest: descending, NaN first; smallest: ascending, NaN last; ties by index).
void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) {
  const int64_t outer = in.size(0), n = in.size(1), inner = in.size(2);
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL("topk kernel: dtype bool is not supported");
    } else {
      using C = compute_t<T>;
      const T* x = static_cast<const T*>(in.data_ptr());
      T* v = static_cast<T*>(values.data_ptr());
      int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
      parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
        std::vector<int64_t> order(n);
        for (int64_t r = b; r < e; ++r) {
          const int64_t o = r / inner, c = r % inner;
          const T* row = x + o * n * inner + c;
          auto val = [&](int64_t i) { return static_cast<C>(row[i * inner]); };
          auto before = [&](int64_t i, int64_t j) {
            const C a = val(i), bb = val(j);
            const bool an = a != a, bn = bb != bb;
            if (an || bn) return an && !bn ? largest : (!an && bn ? !largest : i < j);
            if (a != bb) return largest ? a > bb : a < bb;
            return i < j;
          };
          std::iota(order.begin(), order.end(), int64_t(0));
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
          for (int64_t q = 0; q < k; ++q) {
            v[(o * k + q) * inner + c] = row[order[q] * inner];
            ix[(o * k + q) * inner + c] = order[q];
          }
        }
      });
    }
  });
}

void check_index_range_kernel(const Tensor& index, int64_t size, std::optional<int64_t> skip, IndexCheck kind) {
  const int64_t* idx = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    if (!(skip && idx[i] == *skip) && (idx[i] < 0 || idx[i] >= size))
      throw Error(index_check_message(kind, idx[i], i, size));
}

}  // namespace

void register_indexing() {
  check_index_range_stub.set(DeviceType::CPU, check_index_range_kernel);
  index_select_stub.set(DeviceType::CPU, index_select_kernel);
  gather_stub.set(DeviceType::CPU, gather_kernel);
  scatter_add_stub.set(DeviceType::CPU, scatter_add_kernel);
  index_add_stub.set(DeviceType::CPU, index_add_kernel);
  topk_stub.set(DeviceType::CPU, topk_kernel);
}

}  // namespace ember::kernels::cpu
