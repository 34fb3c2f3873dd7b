// Fused cross-entropy loss from logits [N, C] and int64 class indices [N], PyTorch's
// F.cross_entropy with optional class weights w and label smoothing eps
// (ops::CrossEntropyTerms, kernels/common/softmax_ops.h, has the formulas):
//   loss_i = (1 - eps) w_t (lse_i - x_i,t_i) + eps / C sum_j w_j (lse_i - x_ij)
//            (0 where t_i == ignore_index; without weights and smoothing, lse_i - x_i,t_i)
//   mean   = sum_i loss_i / sum_i w_t_i over the rows not ignored  (NaN when all are)
//   dx_ij  = CrossEntropyTerms::grad(softmax(x_i)_j, ...) * g_i     (0 where ignored)
// with g_i = grad_i (reduction none), grad (sum) or grad / total weight (mean). The forward
// saves each row's max and log-normalizer (lse = max + log sum exp(x - max), kept in two
// parts), so the backward is one elementwise pass with no reduction. Smoothing reads the
// row a second time, for sum_j w_j (lse - x_j).
//
// Note [Out-of-range targets]
// A target outside [0, C) that is not ignore_index is a caller error that the kernels do
// not trap (a device-side trap would poison the context): the kernel never reads outside
// the row; it writes NaN as that row's loss (so the mean and sum are NaN too, and the row
// counts) and NaN throughout that row's gradient. Core has the targets checked on the
// device first (check_index_range, kernels/cuda/indexing.cuh), so a user sees an
// ember::Error naming the target at the next synchronization.
//
// Precision: rows are read in their dtype and computed in float (double for float64).
// Both passes take x - max first, which is exact near the max, so logits of magnitude 1e4
// keep float's relative precision (a single saved lse would lose ulp(1e4) = 1e-3 to
// cancellation).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

using rowwise::RowVariant;

enum class LossReduction { kNone, kMean, kSum };

// Forward: a warp (C <= 2048) or a block (longer rows) per row streams the row once with
// the online max/normalizer, then reads the target's logit. Memory-bound: s bytes per
// logit (s = sizeof(T)) plus, per row, 8 (target) + 3 sizeof(acc) (loss, stats). Each block also leaves the sum of
// its rows' losses and their count in partials[2 * blockIdx.x + {0, 1}] (when given), for
// a deterministic mean (counts in compute_t: exact up to 2^24 rows in float).
template <class T, class Group>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    cross_entropy_forward_kernel(const T* __restrict__ logits,       // [n, c] input
                                 const int64_t* __restrict__ target,  // [n] input
                                 compute_t<T>* __restrict__ loss,         // [n] output
                                 compute_t<T>* __restrict__ stats,        // [n, 2] output, saved for backward
                                 compute_t<T>* __restrict__ partials,     // [2 * gridDim.x] output, or null
                                 const compute_t<T>* __restrict__ weight,  // [c] input, or null (all 1)
                                 compute_t<T> eps,                         // label smoothing
                                 int64_t n, int64_t c, int64_t ignore_index, bool vec) {
  using namespace rowwise;
  using A = compute_t<T>;
  A my_sum = 0, my_count = 0;  // over the rows this thread finished (rank 0 of its group): losses, weights
  for (int64_t row = Group::first_row(); row < n; row += Group::row_stride()) {
    const T* xr = logits + row * c;
    OnlineSoftmax<A> st = OnlineSoftmax<A>::empty();
    for_each_chunk(xr, c, Group::rank(), Group::lanes(), vec, [&](int64_t col, auto width) {
      constexpr int w = decltype(width)::value;
      A v[w];
      load<w>(xr + col, v);
      st.add(v, w);
    });
    st = Group::merge(st);
    const A shift = OnlineSoftmax<A>::shift(st.max), log_sum = log_acc(st.sum);
    A smooth = 0;  // sum_j w_j (lse - x_j), as log_sum - (x_j - max)
    if (eps > A(0)) {  // uniform over the group: the sum is not divergent
      for_each_chunk(xr, c, Group::rank(), Group::lanes(), vec, [&](int64_t col, auto width) {
        constexpr int w = decltype(width)::value;
        A v[w];
        load<w>(xr + col, v);
        EMBER_UNROLL
        for (int i = 0; i < w; ++i) smooth += (weight != nullptr ? weight[col + i] : A(1)) * (log_sum - (v[i] - shift));
      });
      smooth = Group::sum(smooth);
    }
    if (Group::rank() == 0) {
      const int64_t t = target[row];
      A l = 0;
      if (t != ignore_index) {
        const bool in_range = t >= 0 && t < c;
        const A w_t = in_range && weight != nullptr ? weight[t] : A(1);
        // log(sum) - (x_t - max): x_t - max is exact near the max (see softmax_row).
        l = in_range ? ops::CrossEntropyTerms<A>::of(eps, c, w_t).loss(log_sum - (widen(xr[t]) - shift), smooth)
                     : A(NAN);
        my_count += w_t;
      }
      my_sum += l;
      loss[row] = l;
      stats[2 * row] = shift;
      stats[2 * row + 1] = log_sum;
    }
  }
  if (partials != nullptr) {
    // The block's groups in order (a block per row: one group).
    __shared__ A sums[32], counts[32];
    const int group = threadIdx.x / Group::lanes();
    if (Group::rank() == 0) {
      sums[group] = my_sum;
      counts[group] = my_count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      A s = 0, k = 0;
      for (int g = 0; g < int(blockDim.x) / Group::lanes(); ++g) {
        s += sums[g];
        k += counts[g];
      }
      partials[2 * blockIdx.x] = s;
      partials[2 * blockIdx.x + 1] = k;
    }
  }
}

// One block sums the forward's per-block partials in a fixed order: reduced = sum or
// sum / count, total_weight = count (saved for backward). Reads 2 sizeof(acc) per block.
template <class A>
__global__ void cross_entropy_reduce_kernel(const A* __restrict__ partials,  // [2 * nparts] input
                                            int nparts, bool mean,
                                            A* __restrict__ reduced,        // [1] output
                                            A* __restrict__ total_weight) {  // [1] output
  A s = 0, k = 0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
    s += partials[2 * i];
    k += partials[2 * i + 1];
  }
  s = rowwise::block_sum(s);
  k = rowwise::block_sum(k);
  if (threadIdx.x == 0) {
    *reduced = mean ? s / k : s;
    *total_weight = k;
  }
}

// Backward: dx = (exp((x - max) - log_sum) - onehot) * g, row by row (no reduction: the
// forward saved max and log_sum). Memory-bound: reads s and writes s bytes per logit (2s),
// plus, per row, 8 (target) + 2 or 3 sizeof(acc) (stats, a per-row grad).
template <class T, class Group>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    cross_entropy_backward_kernel(const T* __restrict__ logits,        // [n, c] input
                                  const int64_t* __restrict__ target,  // [n] input
                                  const compute_t<T>* __restrict__ stats,  // [n, 2] input, from the forward
                                  const compute_t<T>* __restrict__ grad,   // [n] (grad_stride 1) or [1] (0) input
                                  int64_t grad_stride,
                                  const compute_t<T>* __restrict__ total_weight,  // [1] input (mean), or null
                                  const compute_t<T>* __restrict__ weight,        // [c] input, or null (all 1)
                                  const compute_t<T>* __restrict__ weight_sum,    // [1] input, or null (c)
                                  compute_t<T> eps,                               // label smoothing
                                  T* __restrict__ dlogits,                    // [n, c] output
                                  int64_t n, int64_t c, int64_t ignore_index, bool vec) {
  using namespace rowwise;
  using A = compute_t<T>;
  for (int64_t row = Group::first_row(); row < n; row += Group::row_stride()) {
    const T* xr = logits + row * c;
    T* dr = dlogits + row * c;
    const int64_t t = target[row];
    const bool ignored = t == ignore_index, bad = !ignored && (t < 0 || t >= c);
    A g = 0;
    if (!ignored) g = total_weight != nullptr ? grad[row * grad_stride] / *total_weight : grad[row * grad_stride];
    if (bad) g = A(NAN);
    const A shift = stats[2 * row], log_sum = stats[2 * row + 1];
    const A w_sum = weight_sum != nullptr ? *weight_sum : A(c);
    const auto terms = ops::CrossEntropyTerms<A>::of(eps, c, !ignored && !bad && weight != nullptr ? weight[t] : A(1));
    for_each_chunk(xr, c, Group::rank(), Group::lanes(), vec, [&](int64_t col, auto width) {
      constexpr int w = decltype(width)::value;
      A v[w];
      load<w>(xr + col, v);
      EMBER_UNROLL
      for (int i = 0; i < w; ++i) {
        const A w_j = weight != nullptr ? weight[col + i] : A(1);
        v[i] = ignored ? A(0) : terms.grad(exp_acc((v[i] - shift) - log_sum), col + i == t, w_j, w_sum) * g;
      }
      store<w>(dr + col, v);
    });
  }
}

// --- Host side -----------------------------------------------------------------------------------

struct CrossEntropyPlan {
  bool block_per_row = false;  // else a warp per row
  bool vec = false;
  LaunchConfig cfg;
};

// Launch configuration of both cross-entropy kernels. variant: kAuto, kWarp (a warp per
// row) or kBlock (a block per row); vec: the arrays share their offset modulo 16 bytes.
inline CrossEntropyPlan cross_entropy_config(int64_t n, int64_t c, int elem_bytes, bool vec,
                                             RowVariant variant = RowVariant::kAuto) {
  EMBER_CHECK(n >= 0 && c >= 0, "cross_entropy: negative shape [", n, ", ", c, "]");
  EMBER_CHECK(variant == RowVariant::kAuto || variant == RowVariant::kWarp || variant == RowVariant::kBlock,
              "cross_entropy: variant ", rowwise::row_variant_name(variant), " does not exist (auto, warp, block)");
  CrossEntropyPlan p;
  p.vec = vec;
  p.block_per_row = variant == RowVariant::kBlock || (variant == RowVariant::kAuto && c > 2048);
  if (!p.block_per_row) {
    constexpr int kThreads = 256;  // 8 rows a block
    p.cfg = {dim3(grid_stride_blocks(n, kThreads / 32, 2048 / kThreads)), dim3(kThreads), 0};
  } else {
    const int64_t v = 16 / elem_bytes;
    int64_t threads = rowwise::round_up((c + 4 * v - 1) / (4 * v), 32);
    threads = threads < 32 ? 32 : (threads > rowwise::kMaxBlockThreads ? rowwise::kMaxBlockThreads : threads);
    p.cfg = {dim3(grid_stride_blocks(n, 1, int(2048 / threads))), dim3(unsigned(threads)), 0};
  }
  return p;
}

// The reduction's one block: the partials are at most a few thousand.
inline LaunchConfig cross_entropy_reduce_config() { return {dim3(1), dim3(256), 0}; }

// Bytes of workspace cross_entropy_forward needs for a mean or sum (the per-block partials).
template <class T>
size_t cross_entropy_workspace_bytes(int64_t n, int64_t c, RowVariant variant = RowVariant::kAuto) {
  return size_t(cross_entropy_config(n, c, sizeof(T), false, variant).cfg.grid.x) * 2 * sizeof(compute_t<T>);
}

// loss[i] for each row (0 where ignored), stats[i] = {max, log sum exp(x - max)} of each
// row saved for backward (their sum is the row's log-sum-exp), and for kMean / kSum
// reduced[0] and total_weight[0] (the count of rows not ignored). T: float, double, __half,
// __nv_bfloat16; loss, stats, reduced in compute_t<T> (float; double for float64). Out-of-range
// targets: Note [Out-of-range targets].
template <class T>
void cross_entropy_forward(const T* logits,        // [n, c] input
                           const int64_t* target,  // [n] input: class indices or ignore_index
                           compute_t<T>* loss,         // [n] output
                           compute_t<T>* stats,        // [n, 2] output, saved for backward
                           int64_t n, int64_t c, int64_t ignore_index, LossReduction reduction,
                           const compute_t<T>* weight,  // [c] class weights, or null (all 1)
                           double label_smoothing,      // in [0, 1]
                           compute_t<T>* reduced,       // [1] output (kMean, kSum), else unused
                           compute_t<T>* total_weight,  // [1] output (kMean, kSum), saved for backward
                           void* workspace,         // cross_entropy_workspace_bytes<T>(n, c) bytes (kMean, kSum)
                           cudaStream_t stream, RowVariant variant = RowVariant::kAuto) {
  using A = compute_t<T>;
  EMBER_CHECK(n == 0 || c > 0, "cross_entropy: ", n, " rows of 0 classes");
  EMBER_CHECK(n == 0 || (logits && target && loss && stats), "cross_entropy: null pointer for [", n, ", ", c,
              "] logits, target, loss or stats");
  const bool reduce = reduction != LossReduction::kNone;
  EMBER_CHECK(!reduce || (reduced && total_weight && workspace),
              "cross_entropy: a mean or sum needs reduced, total_weight and workspace");
  // One array read: kStream-style peeling vectorizes any alignment.
  const CrossEntropyPlan p = cross_entropy_config(n, c, sizeof(T), /*vec=*/true, variant);
  A* partials = reduce ? static_cast<A*>(workspace) : nullptr;
  if (n > 0) {
    if (p.block_per_row)
      launch<cross_entropy_forward_kernel<T, rowwise::BlockPerRow>>(p.cfg, stream, logits, target, loss, stats,
                                                                    partials, weight, A(label_smoothing), n, c,
                                                                    ignore_index, p.vec);
    else
      launch<cross_entropy_forward_kernel<T, rowwise::WarpPerRow>>(p.cfg, stream, logits, target, loss, stats,
                                                                   partials, weight, A(label_smoothing), n, c,
                                                                   ignore_index, p.vec);
  }
  if (reduce)
    launch<cross_entropy_reduce_kernel<A>>(cross_entropy_reduce_config(), stream, partials,
                                           n > 0 ? int(p.cfg.grid.x) : 0, reduction == LossReduction::kMean, reduced,
                                           total_weight);
}

// dlogits from the forward's stats and the loss's gradient: grad [n] for kNone, [1] for
// kMean (divided by total_weight[0], from the forward) and kSum.
template <class T>
void cross_entropy_backward(const T* logits,               // [n, c] input
                            const int64_t* target,         // [n] input
                            const compute_t<T>* stats,         // [n, 2] input, from cross_entropy_forward
                            const compute_t<T>* grad,          // [n] or [1] input
                            const compute_t<T>* total_weight,  // [1] input for kMean, else unused
                            const compute_t<T>* weight,        // [c] class weights, or null (all 1)
                            const compute_t<T>* weight_sum,    // [1] their sum (with weight), else null
                            double label_smoothing,            // in [0, 1]
                            T* dlogits,                    // [n, c] output
                            int64_t n, int64_t c, int64_t ignore_index, LossReduction reduction,
                            cudaStream_t stream, RowVariant variant = RowVariant::kAuto) {
  EMBER_CHECK(n == 0 || c > 0, "cross_entropy_backward: ", n, " rows of 0 classes");
  EMBER_CHECK(n == 0 || (logits && target && stats && grad && dlogits), "cross_entropy_backward: null pointer for [", n,
              ", ", c, "] tensors");
  EMBER_CHECK(reduction != LossReduction::kMean || total_weight, "cross_entropy_backward: a mean needs total_weight");
  EMBER_CHECK((weight == nullptr) == (weight_sum == nullptr), "cross_entropy_backward: class weights need their sum");
  if (n == 0) return;
  const CrossEntropyPlan p =
      cross_entropy_config(n, c, sizeof(T), rowwise::same_alignment(logits, dlogits), variant);
  const int64_t grad_stride = reduction == LossReduction::kNone ? 1 : 0;
  const compute_t<T>* tw = reduction == LossReduction::kMean ? total_weight : nullptr;
  if (p.block_per_row)
    launch<cross_entropy_backward_kernel<T, rowwise::BlockPerRow>>(p.cfg, stream, logits, target, stats, grad,
                                                                   grad_stride, tw, weight, weight_sum,
                                                                   compute_t<T>(label_smoothing), dlogits, n, c,
                                                                   ignore_index, p.vec);
  else
    launch<cross_entropy_backward_kernel<T, rowwise::WarpPerRow>>(p.cfg, stream, logits, target, stats, grad,
                                                                  grad_stride, tw, weight, weight_sum,
                                                                  compute_t<T>(label_smoothing), dlogits, n, c,
                                                                  ignore_index, p.vec);
}

}  // namespace ember::kernels::cuda
