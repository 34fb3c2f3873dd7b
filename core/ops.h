// ember's functional ops. Each checks its arguments (shapes, dtypes, devices, dims) and
// raises ember::Error naming itself and the values involved, allocates its output, and
// dispatches to the backend of the inputs' device (core/dispatch.h). Inputs must all be
// on one device; nothing is copied between devices implicitly.
//
// Elementwise ops broadcast (NumPy rules) and promote dtypes as PyTorch does
// (promote_types; a Scalar operand does not widen a tensor of its category).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ember {

// ----- creation -----
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// [start, end) in steps of `step`, like torch.arange. arange(end) defaults to int64 as in
// PyTorch; the other forms use options.dtype (float32 unless given).
Tensor arange(int64_t end);
Tensor arange(double start, double end, double step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});
// Uniform [0, 1), standard normal, and integers in [low, high), from `gen` (default: the
// process-wide generator, see manual_seed).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = kInt64,
               Generator* gen = nullptr);
// rand / randn of t's shape, dtype and device.
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);

// ----- elementwise -----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, Scalar b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);  // integer inputs compute in float32, as in PyTorch
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate = false: 0.5 x (1 + erf(x / sqrt 2)); true: the tanh form.
Tensor gelu(const Tensor& x, bool approximate = false);
Tensor erf(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
// x sigmoid(x) (PyTorch's F.silu).
Tensor silu(const Tensor& x);
// x where x > 0, negative_slope x elsewhere (F.leaky_relu).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x where x > 0, alpha (e^x - 1) elsewhere (F.elu).
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// cond must be bool; a and b promote as in an arithmetic op (0-dim operands included).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Comparisons give bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ----- reductions -----
// `dims` empty means all dims. Integer and bool inputs sum to int64, as in PyTorch.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Maximum / minimum over dims (all when empty); NaN propagates.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
// (values, int64 indices of the first maximum) over one dim.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// Index of the maximum over one dim, or of the flattened tensor when dim is not given.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with Bessel's `correction` (1: divide by n - 1, PyTorch's default; 0: by n).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// torch.linalg.vector_norm over dims (all when empty): (sum |x|^p)^(1/p) for p > 0, max |x|
// for p = inf, min |x| for p = -inf, the count of nonzeros for p = 0; p = 2 is also
// torch.norm's "fro". Floating x.
Tensor norm(const Tensor& x, double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Whether every / some element is nonzero, over all elements or along dim: bool tensors.
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);

// ----- linear algebra -----
// torch.matmul: 1-D @ 1-D is a dot product, 2-D @ 2-D a matrix product, and N-D operands
// are batches of matrices whose batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// An activation that an op applies to its output as it writes it (Note [Fused
// activations] in layers/containers.cpp): the same values as the separate op, one pass over
// memory less in forward. nn::Sequential passes it for a Linear or Conv2d followed by ReLU.
enum class Activation { kNone, kReLU };
// act(x [..., in] @ weight [out, in]^T + bias [out]) (bias may be undefined), floating
// tensors. Its backward computes the weight gradient directly in weight's layout (g^T x),
// with no transpose copy.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Activation act = Activation::kNone);

// ----- along a dim -----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// index: 1-D int64 or int32.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[i][index[i][j]] for dim 1; index has x's number of dims.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of self with src added at the positions index gives along dim.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// The k largest (smallest when !largest) elements along dim and their int64 indices, in
// order (ties: the lower index first; NaN counts as the largest value, as in PyTorch).
// sorted = false is accepted and gives the same sorted result.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
// Views of x along dim: pieces of split_size (the last may be smaller), pieces of the
// given sizes (summing to the dim's size), or `chunks` pieces of ceil(size / chunks).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Tensor.unfold: a view of every window of `size` elements along dim, `step` apart, as a
// new last dim: dim's size becomes (size_d - size) / step + 1.
Tensor unfold(const Tensor& x, int64_t dim, int64_t size, int64_t step);
// The lower / upper triangle of the last two dims; diagonal > 0 moves the edge up-right.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// A copy of self with source's slice i along dim added to slice index[i] (1-D int64 /
// int32, each in [0, self.size(dim))); the sums are made in order of i (deterministic).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
// int64 tensor with a trailing dim of num_classes (-1: max index + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ----- convolution and pooling (NCHW) -----
// weight [out, in / groups, kh, kw]; bias [out] or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              std::pair<int64_t, int64_t> stride = {1, 1}, std::pair<int64_t, int64_t> padding = {0, 0},
              std::pair<int64_t, int64_t> dilation = {1, 1}, int64_t groups = 1, Activation act = Activation::kNone);
struct Pool2dOptions {
  std::pair<int64_t, int64_t> kernel_size;
  std::optional<std::pair<int64_t, int64_t>> stride{};  // default: kernel_size
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
  int64_t divisor_override = 0;   // avg_pool2d only; 0 = none
};
// With Activation::kReLU, relu(max_pool2d(x)), which equals max_pool2d(relu(x)) value for
// value and gradient for gradient (a ReLU commutes with the max): the ReLU then costs a
// pass over the pooled output instead of the larger input.
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options, Activation act = Activation::kNone);
// Also returns the int64 index (h * W + w within each plane) of each maximum.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
// F.conv_transpose2d: the data gradient of conv2d (its backward-input kernel; cuDNN's
// backward-data on a GPU), not zero insertion. weight [in, out / groups, kh, kw]; output
// H = (H_in - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1 (so for W),
// output_padding < stride or < dilation.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        std::pair<int64_t, int64_t> stride = {1, 1}, std::pair<int64_t, int64_t> padding = {0, 0},
                        std::pair<int64_t, int64_t> output_padding = {0, 0}, int64_t groups = 1,
                        std::pair<int64_t, int64_t> dilation = {1, 1});
// F.pixel_shuffle: [*, C r^2, H, W] -> [*, C, H r, W r]; pixel_unshuffle is its inverse.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// F.interpolate of [N, C, H, W] (nn::Upsample): exactly one of size and scale_factor.
enum class InterpolateMode { kNearest, kBilinear };
struct InterpolateOptions {
  std::optional<std::pair<int64_t, int64_t>> size{};
  std::optional<std::pair<double, double>> scale_factor{};
  InterpolateMode mode = InterpolateMode::kNearest;
  bool align_corners = false;  // bilinear only
};
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

// ----- fused neural-network ops (one kernel forward, one backward) -----
// BatchMean (the sum over the size of dim 0) is kl_div's only; the other losses refuse it.
enum class Reduction { None, Mean, Sum, BatchMean };
// Cross entropy of logits [N, C] or [N, C, d...] with int64 / int32 class indices [N] or
// [N, d...], PyTorch's F.cross_entropy: per element (None; 0 where the target is
// ignore_index), summed, or the mean over the elements not ignored, each counted with its
// target's class weight (NaN when all are ignored). weight: per-class weights [C] or
// undefined (it gets no gradient); label_smoothing in [0, 1] spreads that share of each
// target over all classes.
// 16-bit logits compute in float32. A target outside [0, C) is an ember::Error.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, const Tensor& weight = {}, double label_smoothing = 0);
// (x - mean) / sqrt(var + eps) * weight + bias over the last normalized_dims dims of x
// (biased variance); weight and bias have those dims' shape, or are undefined.
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// Per-channel (dim 1) mean and biased variance of x [N, C, ...] (float32 for 16-bit x),
// outside autograd. running_mean and running_var ([C], of that dtype, or undefined) are
// updated in place: r = (1 - momentum) r + momentum * stat, with the unbiased variance.
std::pair<Tensor, Tensor> batch_norm_stats(const Tensor& x, const Tensor& running_mean = {},
                                           const Tensor& running_var = {}, double momentum = 0.1);
// Batch norm with the batch's statistics (batch_norm_stats, which updates the running
// ones): (x - mean) / sqrt(var + eps) * weight + bias per channel; weight, bias [C] or undefined.
Tensor batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, double momentum = 0.1, double eps = 1e-5);
// Rows of weight [num, dim] picked by indices (any shape, int64 / int32, each in [0, num)):
// [..., dim]. Its weight gradient is embedding_backward's; padding_idx's row gets none.
// PyTorch's F.embedding(input, weight) order, as nn::functional::embedding.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// The dense weight gradient [num_weights, dim] of embedding: grad_output [..., dim] summed
// into the rows indices [...] name, in order of position (the same bits every run).
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          std::optional<int64_t> padding_idx = std::nullopt);
// torch.dropout(input, p, train): when train, x * keep / (1 - p), keep = (rand(x.shape(),
// x.dtype(), gen) >= p), the same draw on every device, and its backward multiplies by the
// saved mask (p = 0: x itself; p = 1: x * 0, no draw); when not train, x itself. p in [0, 1].
Tensor dropout(const Tensor& x, double p, bool train, Generator* gen = nullptr);
// The former order dropout(x, p, gen) would turn a generator into `train`: refused.
Tensor dropout(const Tensor& x, double p, Generator* gen) = delete;
// F.dropout2d / dropout3d: zeroes whole channels of x [N, C, *] (or [C, *]): one draw per
// (n, c), the kept ones scaled by 1 / (1 - p); when not train, x itself.
Tensor dropout2d(const Tensor& x, double p, bool train, Generator* gen = nullptr);
// F.group_norm: x [N, C, *] in num_groups groups of C / num_groups channels, each normalized
// by its own mean and biased variance, then weight and bias [C] (or undefined) per channel.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// F.instance_norm: each (n, c) plane of x [N, C, *] normalized by its own statistics
// (use_input_stats, as in training) or by running_mean / running_var [C]; running ones given
// while use_input_stats are updated as batch norm's are, with the planes' mean statistics.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

// ----- recurrent cells: PyTorch's torch.lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell -----
// x [B, I], h and c [B, H]; w_ih [G H, I], w_hh [G H, H], b_ih and b_hh [G H] or undefined
// (G = 4 for LSTM in gate order i, f, g, o; 3 for GRU in order r, z, n; 1 for RNN).
// lstm_cell returns (h', c').
std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                const Tensor& b_hh = {});
Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
// The cells' pointwise halves, one kernel each way, for layers that project a whole
// sequence's inputs in one GEMM: gates [B, 4H] = x W_ih^T + b_ih + h W_hh^T + b_hh gives
// (h', c') from c; gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh [B, 3H] give h' from h.
std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gates, const Tensor& c);
Tensor gru_cell_pointwise(const Tensor& gi, const Tensor& gh, const Tensor& h);

// ----- losses (core/ops_loss.cpp): PyTorch's F.* forms, input and target of one shape -----
// -w (t log x + (1 - t) log(1 - x)), each log clamped at -100 as PyTorch does; x in [0, 1].
// weight broadcasts to input's shape, or is undefined.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
// BCE of sigmoid(input), as log-sum-exp: (1 - t) x + (1 + (pw - 1) t) softplus(-x), times w.
// pos_weight broadcasts along the last dim (the classes). Finite gradients for any x.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta = 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
// input holds log-probabilities; target probabilities (log-probabilities when log_target):
// t (log t - x), 0 where t = 0. BatchMean divides the sum by input.size(0), PyTorch's
// mathematically correct choice; Mean divides by the number of elements.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);

// ----- attention (core/ops_attention.cpp) -----
// What scaled_dot_product_attention takes besides q, k and v: PyTorch's keyword arguments.
// Note [Attention entry point]: this one declaration is what every implementation of
// attention serves: the fused kernels (the `attention` stubs: a tiled online softmax on
// the CPU, a flash-style kernel on CUDA; memory linear in the sequence length) and the
// math path composed from matmul, softmax and dropout (memory growing with L * S), kept
// as their reference. The path is chosen per call (Note [Attention path] in
// core/ops_attention.cpp; EMBER_ATTENTION=math|flash|auto forces one). Nothing here presumes
// a materialized score matrix: the mask is an input, not a callback, and dropout draws from
// a Generator, which the fused kernels replay from its Philox counters in backward.
struct AttentionOptions {
  // Broadcastable to the scores [batch..., L, S]: bool (true: the key takes part, as in
  // PyTorch 2) or an additive float mask of the query's dtype. Undefined: none.
  Tensor attn_mask{};
  bool is_causal = false;  // the top-left causal mask: query i sees keys 0..i; no attn_mask with it
  double dropout_p = 0;    // on the attention weights, whenever > 0: pass 0 outside training, as PyTorch
  std::optional<double> scale{};  // default 1 / sqrt(E)
  Generator* generator = nullptr;  // dropout's draws; null: the default generator
};
// PyTorch 2's F.scaled_dot_product_attention: softmax(q k^T scale + mask) v, with dropout
// on the weights; q [..., L, E], k [..., S, E], v [..., S, Ev] of one floating dtype ->
// [..., L, Ev], batch dims broadcast. A query row whose keys are all masked out gets zero
// weights, so a zero output and zero gradients (PyTorch >= 2.5; earlier versions give NaN).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});
// The math path, which also returns the attention weights [..., L, S] as applied to v
// (after dropout): for MultiheadAttention's need_weights (PyTorch's
// _scaled_dot_product_attention_math). The same output as the function above.
std::pair<Tensor, Tensor> scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                                            const AttentionOptions& options = {});

// ----- fused optimizer updates (in place, outside autograd) -----
struct SgdStepOptions {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
// One SGD step of `param` with `grad`; momentum_buffer (same shape, or undefined when
// momentum is 0) starts as the gradient when first_step.
void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStepOptions& o,
               bool first_step);
struct AdamStepOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  int64_t step = 1;                     // 1-based, for the bias corrections
};
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamStepOptions& o);

// One step of a list of parameters (every device's fused multi-tensor kernel; each
// parameter's result is what the one-parameter form gives). Lists of equal length;
// momentum_buffers may hold undefined tensors when momentum is 0, and all start as their
// gradient when first_step.
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& o, bool first_step);
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const AdamStepOptions& o);
// Capturable list steps, for CUDA graphs (PyTorch's capturable=True): the learning rate
// (o.lr is not used) and Adam's 1-based step (o.step is not used) are float64 scalar
// tensors on the parameters' one device, read when the update runs; a graph replays them
// with their values at each replay. The caller advances `step` (on the device) before.
// The results equal the forms above given the same numbers (Adam: see AdamUpdate::at).
void sgd_step_capturable_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& o, bool first_step,
                          const Tensor& lr);
void adam_step_capturable_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                           const AdamStepOptions& o, const Tensor& lr, const Tensor& step);

// ----- comparisons of whole tensors, for tests and checks -----
// True when shapes match and |a - b| <= atol + rtol |b| elementwise (NaNs equal when equal_nan).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);

}  // namespace ember
