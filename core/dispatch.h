// The op table, the backend contract: one typed dispatch slot table (OpStub) per
// primitive op. It belongs to core; the backends plug into it.
//
// core checks an op's arguments, allocates its outputs and calls the stub for the
// inputs' device; a backend fills the slots it implements from its register_*_kernels()
// function, which core declares (below) and calls once, from ember::init(). A missing
// kernel is an ember::Error naming the op and the device: there is no silent fallback to
// another device and no implicit copy. The meta device has no slots: a stub called for it
// returns at once, so every op, present and future, runs on meta tensors as checks and
// allocations only (core/meta.h). The contract's names are in ember::kernels, the
// namespace of what the backends implement.
//
// What a kernel may assume (core guarantees it):
// - outputs are freshly allocated, contiguous, of the shape and dtype the op documents;
// - elementwise inputs are already broadcast to the output's shape (stride-0 views) and
//   share one dtype (core promotes and converts first); they may be strided;
// - every tensor is on the device whose slot is called.
// Kernels see Tensor only as data (shape, strides, pointer); they never call ops.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "core/optim_update.h"
#include "core/tensor.h"

namespace ember::kernels {

struct PhiloxState {  // a draw's position in a counter-based Philox 4x32-10 stream
  uint64_t seed;
  uint64_t offset;  // in 128-bit Philox blocks
};

struct Conv2dParams {
  int64_t stride[2], padding[2], dilation[2], groups;
  bool relu = false;  // forward: max(0, .) applied to the output as it is written
};

struct Pool2dParams {
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  bool ceil_mode;
  bool count_include_pad;    // avg_pool2d
  int64_t divisor_override;  // avg_pool2d; 0 = none
  bool relu = false;         // max_pool2d: max(0, .) of each output (it commutes with the max)
};

using ops_sgd = ops::SgdUpdate;
using ops_adam = ops::AdamUpdate;

// Bit d set: dim d is reduced. Reduced outputs keep the reduced dims with size 1.
using DimMask = uint64_t;

using UnaryFn = void(const Tensor& out, const Tensor& in);
// b may live on the host whatever the device: a 0-d scalar expanded to out's shape
// (Note [Scalar operands] in core/ops_elementwise.cpp); a device backend reads its value.
using BinaryFn = void(const Tensor& out, const Tensor& a, const Tensor& b);
using ClampFn = void(const Tensor& out, const Tensor& in, double lo, double hi);
using WhereFn = void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
using CopyFn = void(const Tensor& dst, const Tensor& src);  // any strides, any dtypes
using FillFn = void(const Tensor& dst, Scalar value);       // dst may be strided
using RangeFn = void(const Tensor& out, double a, double b);  // arange: start, step; linspace: start, end
using RandomFn = void(const Tensor& out, PhiloxState state, double a, double b);
using ReduceFn = void(const Tensor& out, const Tensor& in, DimMask dims);
using ReduceIndexFn = void(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim);
// out [B, M, N] = a [B, M, K] @ b [B, K, N]; a and b may be strided (batch stride 0 broadcasts).
// matmul and linear: 16-bit floats reach the cuda slots as they are (accumulated in
// float32, rounded once); the CPU's receive them converted to float32.
using MatmulFn = void(const Tensor& out, const Tensor& a, const Tensor& b);
using SoftmaxFn = void(const Tensor& out, const Tensor& in, int64_t dim);
using IndexFn = void(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
using ScatterFn = void(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// self [outer, n, inner] (contiguous, in place) += src [outer, m, inner] (contiguous, self's
// dtype) at rows index [m] (int64; the backend checks each is in [0, n) and names `dim`, the
// caller's dim, in its error), added in order of i.
using IndexAddFn = void(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// A unary op with one parameter (leaky_relu's slope, elu's alpha); floating dtypes.
using ScalarUnaryFn = void(const Tensor& out, const Tensor& in, double alpha);
// values and indices [outer, k, inner] (int64) of the k largest (smallest when !largest)
// of in [outer, n, inner] (contiguous) along its middle dim, in order: ties put the lower
// index first, NaN is larger than every number. 0 < k <= n.
using TopkFn = void(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest);
// out [M, N] = relu?(x [M, K] @ w [N, K]^T + bias [N]); all contiguous, bias may be undefined.
using LinearFn = void(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu);
// conv2d: all tensors of a call share one floating dtype; 16-bit ones are computed in
// float32 (and rounded once, when written). bias may be undefined.
using Conv2dFn = void(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                      const Conv2dParams& p);
// grad_input [N, C, H, W] (zeroed by the kernel) from grad_output and the weight.
using Conv2dBackwardInputFn = void(const Tensor& grad_input, const Tensor& grad_output, const Tensor& weight,
                                   const Conv2dParams& p);
// grad_weight [O, C / groups, kh, kw] (overwritten) from grad_output and the input, and
// grad_bias [O] (the sum of grad_output over N, H and W) unless it is undefined: summed
// while grad_output is in cache for the weight's products.
using Conv2dBackwardWeightFn = void(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_output,
                                    const Tensor& input, const Conv2dParams& p);
// grad_input [N, C, H, W] (overwritten) from grad_output and max_pool2d's indices
// (either form, below).
using MaxPool2dBackwardFn = void(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices,
                                 const Pool2dParams& p);
using AvgPool2dBackwardFn = void(const Tensor& grad_input, const Tensor& grad_output, const Pool2dParams& p);
// In-place optimizer updates of one parameter (all tensors contiguous, same dtype).
using SgdUpdateFn = void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const ops_sgd& u);
using AdamUpdateFn = void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                          const ops_adam& u);
// indices, shaped like out, say where each maximum is: int64 indices into the input plane
// (h * W + w), or uint8 codes of its tap in the window (i * kw + j; kh * kw <= 256), or
// nothing when undefined (Note [Max-pool indices] in kernels/cpu/pool.cpp).
using MaxPool2dFn = void(const Tensor& out, const Tensor& indices, const Tensor& in, const Pool2dParams& p);
using AvgPool2dFn = void(const Tensor& out, const Tensor& in, const Pool2dParams& p);
// Resampling of in [N, C, H, W] to out [N, C, Ho, Wo] (both contiguous), PyTorch's
// upsample_nearest2d / upsample_bilinear2d: the source coordinate of output index d is
// d * scale (nearest: floored) or, for bilinear without align_corners, (d + 0.5) scale - 0.5
// clamped at 0; with align_corners, scale = (in - 1) / (out - 1) (0 when out is 1). scale_*
// are those per-dim factors, computed by core from sizes or from the user's scale_factor.
struct Upsample2dParams {
  bool bilinear;
  bool align_corners;
  double scale_h, scale_w;
};
using Upsample2dFn = void(const Tensor& out, const Tensor& in, const Upsample2dParams& p);
// grad_in [N, C, H, W] (overwritten) from grad_out, each output's gradient added to the
// inputs it read, in an order that does not depend on timing.
using Upsample2dBackwardFn = void(const Tensor& grad_in, const Tensor& grad_out, const Upsample2dParams& p);

// The index checks of the fused ops: every element of `index` (int64, contiguous) that is
// not `skip` lies in [0, size). A bad one is an ember::Error with
// index_check_message(kind, value, position, size). The CPU raises it at once; the CUDA
// backend checks on the device and raises it at the next synchronization with the host
// (kernels/cuda/indexing.cuh), so a training step pays no synchronization for the check.
enum class IndexCheck : int { kCrossEntropyTarget, kEmbeddingIndex, kEmbeddingBackwardIndex };
std::string index_check_message(IndexCheck kind, int64_t value, int64_t position, int64_t size);
using CheckIndexRangeFn = void(const Tensor& index, int64_t size, std::optional<int64_t> skip, IndexCheck kind);

// Fused ops: one kernel where core once composed primitives (the CUDA backend has a
// hand-written kernel for each; the CPU kernel computes the same formula). Floating
// tensors are float32, float64, or (layer norm, batch-norm statistics, embedding backward,
// dropout) 16-bit with statistics in float32; saved statistics are in that compute type.
enum class LossReduction { kNone, kMean, kSum };
// How cross entropy weighs its terms (PyTorch's F.cross_entropy; the formula is
// ops::CrossEntropyTerms in kernels/common/softmax_ops.h): class weights [C] in the logits'
// dtype and their sum [] (both undefined: every class weighs 1), label smoothing in [0, 1].
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  LossReduction reduction = LossReduction::kMean;
  Tensor weight, weight_sum;
  double label_smoothing = 0;
};
// Cross entropy of logits [N, C] (float32 / float64) with int64 targets [N], every target
// not ignore_index in [0, C) (core checks): loss [N] (kNone; 0 where ignored) or [] (the
// sum, or the sum over the total weight of the rows not ignored: NaN when all are), stats
// [N, 2] = each row's {max, log sum exp(x - max)} saved for backward, total_weight [] =
// the sum of the counted rows' target weights (their number without weights; written for
// kMean and kSum).
using CrossEntropyFn = void(const Tensor& loss, const Tensor& stats, const Tensor& total_weight, const Tensor& logits,
                            const Tensor& target, const CrossEntropyOptions& o);
// dlogits [N, C] = the loss's gradient (CrossEntropyTerms::grad) times g_i, 0 where
// ignored; g_i = grad [N] (kNone), grad [] (kSum) or grad [] / total_weight (kMean).
using CrossEntropyBackwardFn = void(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                                    const Tensor& stats, const Tensor& grad, const Tensor& total_weight,
                                    const CrossEntropyOptions& o);
// Layer norm of the rows of x [rows, cols]: y = (x - mean) rstd * weight + bias (weight,
// bias [cols] or undefined), mean and rstd = 1 / sqrt(biased var + eps) [rows] saved.
using LayerNormFn = void(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& weight, const Tensor& bias, double eps);
// dx [rows, cols], and dweight, dbias [cols] (each undefined when not wanted; summed over
// rows in an order that does not depend on timing) from dy, x and the forward's mean, rstd.
using LayerNormBackwardFn = void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                 const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight);
// Per-channel mean and biased var [C] of x [N, C, HW] (contiguous, N * HW > 1 when the
// running statistics are given); running_mean and running_var [C] (compute type, or
// undefined) become (1 - momentum) r + momentum * stat, with the unbiased variance.
// Group norm of x [N, C, S] (contiguous) in `groups` groups of C / groups channels: y =
// (x - mean) rstd * weight[c] + bias[c] (weight, bias [C] or undefined), mean and rstd =
// 1 / sqrt(biased var + eps) [N, groups] saved (compute type).
using GroupNormFn = void(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& weight, const Tensor& bias, int64_t groups, double eps);
// dx [N, C, S], and dweight, dbias [C] (each undefined when not wanted; summed in an order
// that does not depend on timing) from dy, x, the forward's mean and rstd, and weight.
using GroupNormBackwardFn = void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                 const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                 int64_t groups);
// Fused attention (Note [Attention entry point] in core/ops.h) over q [BH, L, E], k [BH, S, E]
// and v [BH, S, Ev] (contiguous; core folds the batch dims): out [BH, L, Ev] and lse [BH, L]
// (float32 for 16-bit inputs) = each row's log-sum-exp of its scaled, masked scores (-inf for
// a row whose keys are all masked: its output is 0). mask is an additive float [BH, L, S]
// (a strided view, broadcast dims stride 0; -inf hides a key) or undefined. Dropout (p > 0)
// keeps weight (l, s) where the Philox draw at `philox` for element (bh, l, s) is >= p.
struct AttentionParams {
  double scale;
  bool causal;  // top-left: query l sees keys 0..l
  double dropout_p;
  PhiloxState philox;
};
using AttentionFn = void(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const AttentionParams& p);
// dq, dk, dv (overwritten) from dout, the forward's q, k, v, out and lse: the probabilities
// are recomputed block by block and dropout's mask regenerated from the same counters.
using AttentionBackwardFn = void(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                 const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse, const Tensor& mask, const AttentionParams& p);
// The LSTM cell's pointwise part: gates [B, 4H] (pre-activation, order i, f, g, o) and
// c_prev [B, H] give c = f c_prev + i g and h = o tanh(c), i, f, o = sigmoid and g = tanh of
// their gates; act [B, 4H] keeps the activated gates for backward. All contiguous.
using LstmCellFn = void(const Tensor& h, const Tensor& c, const Tensor& act, const Tensor& gates,
                        const Tensor& c_prev);
// dgates [B, 4H] and dc_prev [B, H] from dh and dc [B, H] (either may be undefined: zero),
// the forward's act, c_prev and c.
using LstmCellBackwardFn = void(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc,
                                const Tensor& act, const Tensor& c_prev, const Tensor& c);
// The GRU cell's pointwise part: gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh [B, 3H]
// (order r, z, n) and h_prev [B, H]: r, z = sigmoid(gi + gh), n = tanh(gi_n + r gh_n),
// h = (1 - z) n + z h_prev; saved [B, 4H] = r, z, n, gh_n for backward. All contiguous.
using GruCellFn = void(const Tensor& h, const Tensor& saved, const Tensor& gi, const Tensor& gh,
                       const Tensor& h_prev);
// dgi, dgh [B, 3H] and dh_prev [B, H] from dh [B, H], saved and h_prev.
using GruCellBackwardFn = void(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh,
                               const Tensor& saved, const Tensor& h_prev);
// One recurrent layer in one direction over a whole sequence, the unit a library such as
// cuDNN runs in one call (Note [RNN layer stub] in core/rnn_sequence.h). x [T, B, I], h0 and
// c0 [B, H] (c0: LSTM only, else undefined), w_ih [G H, I], w_hh [G H, H], b_ih and b_hh
// [G H] or undefined, G = 4 (LSTM: i, f, g, o), 3 (GRU: r, z, n) or 1; all contiguous.
// Steps run t = 0 .. T-1, or T-1 .. 0 when reverse.
enum class RnnCell : int { kLstm, kGru, kRnnTanh, kRnnRelu };
struct RnnLayerParams {
  RnnCell cell;
  bool reverse;
  bool training;  // keep what backward needs in `reserve`
};
// The bytes of `reserve` the forward fills and the backward reads for this layer (what the
// backend keeps: activated gates and states per step on the CPU, cuDNN's reserve space).
using RnnLayerReserveFn = int64_t(const Tensor& x, int64_t hidden, const RnnLayerParams& p);
// y [T, B, H] (h after the step at t, at t), h_n and c_n [B, H] (c_n undefined but for an
// LSTM), reserve [bytes] uint8 (undefined when not training).
using RnnLayerFn = void(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve,
                        const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const RnnLayerParams& p);
// Gradients (each overwritten; undefined when not wanted) from dy [T, B, H], dh_n and dc_n
// [B, H] (undefined: zero) and the forward's inputs, y and reserve.
using RnnLayerBackwardFn = void(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                                const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh,
                                const Tensor& dy, const Tensor& dh_n, const Tensor& dc_n, const Tensor& x,
                                const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                const Tensor& b_ih, const Tensor& b_hh, const Tensor& y, const Tensor& reserve,
                                const RnnLayerParams& p);
using BatchNormStatsFn = void(const Tensor& mean, const Tensor& var, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& x, double momentum);
// grad_weight [rows, D] (overwritten) = for each row, the sum of grad_output [n, D] over the
// positions whose int64 index [n] names it, added in order of position (deterministic).
using EmbeddingBackwardFn = void(const Tensor& grad_weight, const Tensor& grad_output, const Tensor& indices);
// One optimizer step of a list of parameters (each as sgd_update / adam_update take it;
// bufs holds undefined tensors when momentum is 0); lists of one device, equal lengths.
using MultiSgdUpdateFn = void(std::span<const Tensor> params, std::span<const Tensor> grads,
                              std::span<const Tensor> bufs, const ops_sgd& u);
using MultiAdamUpdateFn = void(std::span<const Tensor> params, std::span<const Tensor> grads,
                               std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                               const ops_adam& u);
// The capturable forms (PyTorch's capturable=True): the learning rate and Adam's 1-based
// step are float64 scalar tensors on the parameters' device, read by the kernel when it
// runs, so a CUDA graph's replay uses the values of that replay; u's lr and bias
// corrections are not used, and Adam computes its corrections with AdamUpdate::at.
using MultiSgdUpdateCapturableFn = void(std::span<const Tensor> params, std::span<const Tensor> grads,
                                        std::span<const Tensor> bufs, const ops_sgd& u, const Tensor& lr);
using MultiAdamUpdateCapturableFn = void(std::span<const Tensor> params, std::span<const Tensor> grads,
                                         std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                                         const ops_adam& u, const Tensor& lr, const Tensor& step);
// out = x * (u >= p) / (1 - p), u the uniform draw of rand(x.shape(), x.dtype()) at
// `state`, rounded as rand rounds it; keep [numel] uint8 holds (u >= p). 0 <= p < 1.
using DropoutFn = void(const Tensor& out, const Tensor& keep, const Tensor& x, double p, PhiloxState state);
// grad_input = grad_output * keep / (1 - p), rounded as the forward rounds its scale.
using DropoutBackwardFn = void(const Tensor& grad_input, const Tensor& grad_output, const Tensor& keep, double p);

// Sparse (CSR) weights: A [rows, cols] as row_ptr [rows + 1] and col_idx [nnz] (int32,
// contiguous; core checks row_ptr is non-decreasing from 0 to nnz and every col_idx lies in
// [0, cols)) with values [nnz]. x, out, dy and values share one dtype, float32 or float64.
// out [M, rows] = x [M, cols] @ A^T + bias [rows] (bias may be undefined); x contiguous.
using CsrLinearFn = void(const Tensor& out, const Tensor& x, const Tensor& row_ptr, const Tensor& col_idx,
                         const Tensor& values, const Tensor& bias);
// dvalues [nnz] (overwritten) = the sampled dense-dense product: for entry j of row r,
// sum over m of dy [M, rows] (m, r) * x [M, cols] (m, col_idx[j]); dy and x contiguous.
using CsrSddmmFn = void(const Tensor& dvalues, const Tensor& dy, const Tensor& x, const Tensor& row_ptr,
                        const Tensor& col_idx);

// The op profiler (core/profiler.h): while it is on, every stub call is timed and
// counted on its stub. Off, a call costs one relaxed load more.
extern std::atomic<bool> g_profiling;

class OpStubBase {
 public:
  explicit constexpr OpStubBase(const char* name) : name_(name) {}
  const char* name() const { return name_; }
  bool has(DeviceType d) const { return static_cast<int>(d) < kNumBackendDeviceTypes && present_[static_cast<int>(d)]; }

  int64_t profiled_calls() const { return calls_.load(std::memory_order_relaxed); }
  int64_t profiled_nanoseconds() const { return nanos_.load(std::memory_order_relaxed); }
  void reset_profile() const {
    calls_ = 0;
    nanos_ = 0;
  }

 protected:
  [[noreturn]] void missing(DeviceType d) const;
  template <class F>
  void timed(const F& call) const {
    const int64_t begin = profile_begin();
    call();
    profile_end(begin);
  }
  // Out of line (core/profiler.cpp), where the clock, the counters, the trace's events and
  // NVTX ranges are kept: returns the start time in nanoseconds, then counts the call.
  int64_t profile_begin() const;
  void profile_end(int64_t begin_ns) const;
  const char* name_;
  std::array<bool, kNumBackendDeviceTypes> present_{};
  mutable std::atomic<int64_t> calls_{0}, nanos_{0};
};

template <class Fn>
class OpStub : public OpStubBase {
 public:
  using OpStubBase::OpStubBase;
  void set(DeviceType d, Fn* fn) {
    if (d == DeviceType::Meta) missing(d);
    slots_[static_cast<int>(d)] = fn;
    present_[static_cast<int>(d)] = fn != nullptr;
  }
  Fn* get(DeviceType d) const {
    if (d == DeviceType::Meta) missing(d);
    Fn* fn = slots_[static_cast<int>(d)];
    if (!fn) missing(d);
    return fn;
  }
  template <class... Args>
  void operator()(Device device, Args&&... args) const {
    if (device.is_meta()) return;  // no data: the op's checks and allocations were all
    Fn* fn = get(device.type);
    if (!g_profiling.load(std::memory_order_relaxed)) [[likely]]
      return fn(static_cast<Args&&>(args)...);
    timed([&] { fn(static_cast<Args&&>(args)...); });
  }

 private:
  std::array<Fn*, kNumBackendDeviceTypes> slots_{};
};

// X(name, FnType) for every primitive op. Adding an op here adds its stub, puts it in
// all_stubs() and makes the coverage test demand it from every backend.
#define EMBER_UNARY_OPS(X) \
  X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(relu) X(gelu) X(gelu_tanh) X(erf) X(tanh) X(sigmoid) \
  X(sin) X(cos) X(silu)
#define EMBER_BINARY_OPS(X) \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) \
  X(relu_backward)
#define EMBER_OTHER_OPS(X)                                                                  \
  X(clamp, ClampFn) X(where, WhereFn) X(copy, CopyFn) X(fill, FillFn) X(arange, RangeFn)    \
  X(linspace, RangeFn) X(uniform, RandomFn) X(normal, RandomFn) X(randint, RandomFn)        \
  X(sum, ReduceFn) X(amax, ReduceFn) X(amin, ReduceFn) X(max_dim, ReduceIndexFn)            \
  X(min_dim, ReduceIndexFn) X(matmul, MatmulFn) X(linear, LinearFn) X(softmax, SoftmaxFn) X(log_softmax, SoftmaxFn) \
  X(index_select, IndexFn) X(gather, IndexFn) X(scatter_add, ScatterFn) X(check_index_range, CheckIndexRangeFn) \
  X(conv2d, Conv2dFn) \
  X(conv2d_backward_input, Conv2dBackwardInputFn) X(conv2d_backward_weight, Conv2dBackwardWeightFn)    \
  X(max_pool2d, MaxPool2dFn) X(avg_pool2d, AvgPool2dFn) X(avg_pool2d_backward, AvgPool2dBackwardFn)   \
  X(max_pool2d_backward, MaxPool2dBackwardFn) \
  X(sgd_update, SgdUpdateFn) X(adam_update, AdamUpdateFn) \
  X(cross_entropy, CrossEntropyFn) X(cross_entropy_backward, CrossEntropyBackwardFn) \
  X(layer_norm, LayerNormFn) X(layer_norm_backward, LayerNormBackwardFn) X(batch_norm_stats, BatchNormStatsFn) \
  X(embedding_backward, EmbeddingBackwardFn) X(multi_sgd_update, MultiSgdUpdateFn) \
  X(multi_adam_update, MultiAdamUpdateFn) X(multi_sgd_update_capturable, MultiSgdUpdateCapturableFn) \
  X(multi_adam_update_capturable, MultiAdamUpdateCapturableFn) \
  X(dropout, DropoutFn) X(dropout_backward, DropoutBackwardFn) \
  X(csr_linear, CsrLinearFn) X(csr_sddmm, CsrSddmmFn) \
  X(index_add, IndexAddFn) X(leaky_relu, ScalarUnaryFn) X(elu, ScalarUnaryFn) X(topk, TopkFn) \
  X(upsample2d, Upsample2dFn) X(upsample2d_backward, Upsample2dBackwardFn) \
  X(group_norm, GroupNormFn) X(group_norm_backward, GroupNormBackwardFn) \
  X(lstm_cell, LstmCellFn) X(lstm_cell_backward, LstmCellBackwardFn) \
  X(gru_cell, GruCellFn) X(gru_cell_backward, GruCellBackwardFn) \
  X(attention, AttentionFn) X(attention_backward, AttentionBackwardFn) \
  X(rnn_layer_reserve, RnnLayerReserveFn) X(rnn_layer, RnnLayerFn) X(rnn_layer_backward, RnnLayerBackwardFn)

#define EMBER_DECLARE_UNARY(name) extern OpStub<UnaryFn> name##_stub;
#define EMBER_DECLARE_BINARY(name) extern OpStub<BinaryFn> name##_stub;
#define EMBER_DECLARE_OTHER(name, Fn) extern OpStub<Fn> name##_stub;
EMBER_UNARY_OPS(EMBER_DECLARE_UNARY)
EMBER_BINARY_OPS(EMBER_DECLARE_BINARY)
EMBER_OTHER_OPS(EMBER_DECLARE_OTHER)
#undef EMBER_DECLARE_UNARY
#undef EMBER_DECLARE_BINARY
#undef EMBER_DECLARE_OTHER

// Every stub, for the coverage test and the op profiler.
const std::vector<const OpStubBase*>& all_stubs();

// Each backend fills its slots in one function, defined by the backend and called once
// by ember::init() (explicit calls, not static registrars, which static linking drops).
void register_cpu_kernels();
// Does nothing in a build without the CUDA backend.
void register_cuda_kernels();

}  // namespace ember::kernels
