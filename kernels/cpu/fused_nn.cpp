// CPU kernels of the fused loss and sparse ops: cross entropy (forward saving each row's
// max and log-normalizer, backward in one pass), the embedding's weight gradient and
// dropout. Each follows its CUDA kernel's formula (kernels/cuda/cross_entropy.cuh,
// embedding.cuh, random.cuh) so both backends agree to rounding, and dropout and the
// embedding gradient agree bit for bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/philox.h"
#include "kernels/common/softmax_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <class F>
void for_float(DType t, const char* op, F&& f) {
  if (t == DType::Float32) return f(Tag<float>{});
  if (t == DType::Float64) return f(Tag<double>{});
  EMBER_FAIL(op, " kernel: expects float32 or float64, got ", dtype_name(t));
}

// Rows per task for rows of `c` values: about kGrainSize values a task.
int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(c, 1)); }

// The class weights of a cross entropy as T values (null: every class weighs 1), and their sum.
template <class T>
struct ClassWeights {
  const T* w;
  T sum;
  ClassWeights(const CrossEntropyOptions& o, int64_t c)
      : w(o.weight.defined() ? static_cast<const T*>(o.weight.data_ptr()) : nullptr),
        sum(o.weight.defined() ? *static_cast<const T*>(o.weight_sum.data_ptr()) : static_cast<T>(c)) {}
  T operator[](int64_t j) const { return w ? w[j] : T(1); }
};

void cross_entropy_kernel(const Tensor& loss, const Tensor& stats, const Tensor& total_weight, const Tensor& logits,
                          const Tensor& target, const CrossEntropyOptions& o) {
  for_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Online = ops::OnlineSoftmax<T>;
    const int64_t n = logits.size(0), c = logits.size(1);
    const T* x = static_cast<const T*>(logits.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* st = static_cast<T*>(stats.data_ptr());
    const ClassWeights<T> w(o, c);
    const T eps = static_cast<T>(o.label_smoothing);
    // Per-row losses go to `loss` (kNone) or a buffer the reduction reads in row order.
    std::vector<T> rows(o.reduction == LossReduction::kNone ? 0 : static_cast<size_t>(n));
    T* l = o.reduction == LossReduction::kNone ? static_cast<T*>(loss.data_ptr()) : rows.data();
    parallel_for(0, n, row_grain(c), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* xr = x + i * c;
        Online on = Online::empty();
        on.add(xr, static_cast<int>(c));
        const T shift = Online::shift(on.max), log_sum = std::log(on.sum);
        st[2 * i] = shift;
        st[2 * i + 1] = log_sum;
        if (t[i] == o.ignore_index) {
          l[i] = T(0);
          continue;
        }
        const auto terms = ops::CrossEntropyTerms<T>::of(eps, c, w[t[i]]);
        // lse - x_j as log_sum - (x_j - max): x_j - max is exact near the max.
        T smooth = 0;
        if (eps > T(0))
          for (int64_t j = 0; j < c; ++j) smooth += w[j] * (log_sum - (xr[j] - shift));
        l[i] = terms.loss(log_sum - (xr[t[i]] - shift), smooth);
      }
    });
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += t[i] != o.ignore_index ? static_cast<double>(w[t[i]]) : 0.0;
    *static_cast<T*>(total_weight.data_ptr()) = static_cast<T>(total);
    if (o.reduction == LossReduction::kNone) return;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += rows[i];
    *static_cast<T*>(loss.data_ptr()) = static_cast<T>(o.reduction == LossReduction::kMean ? s / total : s);
  });
}

void cross_entropy_backward_kernel(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                                   const Tensor& stats, const Tensor& grad, const Tensor& total_weight,
                                   const CrossEntropyOptions& o) {
  for_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = logits.size(0), c = logits.size(1);
    const T* x = static_cast<const T*>(logits.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* st = static_cast<const T*>(stats.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    const T tw = *static_cast<const T*>(total_weight.data_ptr());
    const ClassWeights<T> w(o, c);
    const T eps = static_cast<T>(o.label_smoothing);
    const LossReduction r = o.reduction;
    T* d = static_cast<T*>(dlogits.data_ptr());
    parallel_for(0, n, row_grain(c), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T* dr = d + i * c;
        if (t[i] == o.ignore_index) {
          std::fill(dr, dr + c, T(0));
          continue;
        }
        const T gi = r == LossReduction::kNone ? g[i] : (r == LossReduction::kMean ? g[0] / tw : g[0]);
        const T shift = st[2 * i], log_sum = st[2 * i + 1];
        const auto terms = ops::CrossEntropyTerms<T>::of(eps, c, w[t[i]]);
        const T* xr = x + i * c;
        for (int64_t j = 0; j < c; ++j)
          dr[j] = terms.grad(std::exp((xr[j] - shift) - log_sum), j == t[i], w[j], w.sum) * gi;
      }
    });
  });
}

// Note [Deterministic embedding backward] (kernels/cuda/embedding.cuh): positions are
// grouped by row with a stable counting sort, then each row sums its gradients in order
// of position, as the CUDA kernel does, so both give the same bits every run.
void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& grad_output, const Tensor& indices) {
  const int64_t rows = grad_weight.size(0), D = grad_weight.size(1), n = indices.numel();
  const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
  std::vector<int64_t> start(static_cast<size_t>(rows) + 1, 0), order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ++start[idx[i] + 1];
  for (int64_t v = 0; v < rows; ++v) start[v + 1] += start[v];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[next[idx[i]]++] = i;
  visit_dtype(grad_weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("embedding_backward kernel: expects a floating gradient, got ", dtype_name(grad_weight.dtype()));
    } else {
      using C = compute_t<T>;
      const T* g = static_cast<const T*>(grad_output.data_ptr());
      T* w = static_cast<T*>(grad_weight.data_ptr());
      parallel_for(0, rows, row_grain(D), [&](int64_t b, int64_t e) {
        std::vector<C> acc(static_cast<size_t>(D));
        for (int64_t v = b; v < e; ++v) {
          std::fill(acc.begin(), acc.end(), C(0));
          for (int64_t k = start[v]; k < start[v + 1]; ++k) {
            const T* gr = g + order[k] * D;
            for (int64_t j = 0; j < D; ++j) acc[j] += cast<C>(gr[j]);
          }
          for (int64_t j = 0; j < D; ++j) w[v * D + j] = cast<T>(acc[j]);
        }
      });
    }
  });
}

// x * (k ? scale : 0) with the scale rounded to T first, as x * (keep * scale) in T was.
template <class T>
T dropout_scaled(T x, bool k, compute_t<T> scale) {
  using C = compute_t<T>;
  return cast<T>(cast<C>(x) * cast<C>(cast<T>(k ? scale : C(0))));
}

void dropout_kernel(const Tensor& out, const Tensor& keep, const Tensor& x, double p, PhiloxState state) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("dropout kernel: expects a floating tensor, got ", dtype_name(x.dtype()));
    } else {
      using C = compute_t<T>;
      constexpr int64_t k = std::is_same_v<T, double> ? 2 : 4;  // values per Philox block, as rand draws them
      const C threshold = C(p), scale = C(1.0 / (1.0 - p));
      const T* in = static_cast<const T*>(x.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      uint8_t* m = static_cast<uint8_t*>(keep.data_ptr());
      const int64_t n = x.numel(), blocks = (n + k - 1) / k;
      parallel_for(0, blocks, kGrainSize / k, [=](int64_t b, int64_t e) {  // by value: stores to m alias nothing
        for (int64_t blk = b; blk < e; ++blk) {
          const Philox4 r = philox_block(state.seed, state.offset + uint64_t(blk));
          const int64_t first = blk * k, count = std::min(k, n - first);
          for (int64_t lane = 0; lane < count; ++lane) {
            C u;
            if constexpr (std::is_same_v<T, double>)
              u = uniform_double(r.v[2 * lane], r.v[2 * lane + 1]);
            else
              u = cast<C>(cast<T>(uniform_float(r.v[lane])));  // rand() rounds its draw to T
            const bool kept = u >= threshold;
            m[first + lane] = kept;
            o[first + lane] = dropout_scaled(in[first + lane], kept, scale);
          }
        }
      });
    }
  });
}

void dropout_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Tensor& keep, double p) {
  visit_dtype(grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("dropout_backward kernel: expects a floating tensor, got ", dtype_name(grad_output.dtype()));
    } else {
      const compute_t<T> scale = compute_t<T>(1.0 / (1.0 - p));
      const T* g = static_cast<const T*>(grad_output.data_ptr());
      const uint8_t* m = static_cast<const uint8_t*>(keep.data_ptr());
      T* gi = static_cast<T*>(grad_input.data_ptr());
      parallel_for(0, grad_output.numel(), kGrainSize, [=](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) gi[i] = dropout_scaled(g[i], m[i] != 0, scale);
      });
    }
  });
}

}  // namespace

void register_fused_nn() {
  cross_entropy_stub.set(DeviceType::CPU, cross_entropy_kernel);
  cross_entropy_backward_stub.set(DeviceType::CPU, cross_entropy_backward_kernel);
  embedding_backward_stub.set(DeviceType::CPU, embedding_backward_kernel);
  dropout_stub.set(DeviceType::CPU, dropout_kernel);
  dropout_backward_stub.set(DeviceType::CPU, dropout_backward_kernel);
}

}  // namespace ember::kernels::cpu
