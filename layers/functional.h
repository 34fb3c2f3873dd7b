// nn::functional: the stateless forms of the layers, written with core's ops (so they
// run on every backend and autograd differentiates them without extra code); the fused
// ones (cross entropy, layer norm, batch norm's statistics, embedding, dropout) call
// core's fused op on every device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops.h"

namespace ember::nn::functional {

using Reduction = ember::Reduction;
// "none", "mean", "sum", "batchmean" (kl_div's only); throws ember::Error otherwise.
Reduction parse_reduction(const std::string& s);

// x [..., in] @ weight [out, in]^T + bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// Zeroes elements with probability p and scales the rest by 1 / (1 - p) when training;
// x itself otherwise (core's dropout, whose train flag is this one).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
// Normalizes over every dim but 1 ([N, C], [N, C, L] or [N, C, H, W]). Training: batch
// statistics (biased variance), and running_mean / running_var, when given, are updated
// in place with the unbiased variance: r = (1 - momentum) r + momentum * stat.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
// Normalizes over the trailing dims of normalized_shape (biased variance).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// weight [num, dim] rows picked by int64 indices; rows of padding_idx get no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// Averages over output windows like PyTorch's adaptive pooling: window i of n over a size
// L spans [floor(i L / n), ceil((i + 1) L / n)).
Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size);

struct LossOptions {
  Reduction reduction = Reduction::Mean;
  Tensor weight{};             // per-class weights [C], or undefined
  int64_t ignore_index = -100;  // targets equal to it contribute nothing
  double label_smoothing = 0;   // cross_entropy only
};
// Cross entropy from logits [N, C] or [N, C, d1, ...] and int64 class indices [N] or
// [N, d1, ...], with PyTorch's reductions, class weights, ignore_index and label smoothing.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& options = {});
// Negative log likelihood from log-probabilities (same shapes as cross_entropy).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const LossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// Activations and losses that are core ops (core/ops.h has their semantics), under the
// names of torch.nn.functional.
using ember::binary_cross_entropy;
using ember::binary_cross_entropy_with_logits;
using ember::elu;
using ember::huber_loss;
using ember::kl_div;
using ember::l1_loss;
using ember::leaky_relu;
using ember::silu;
using ember::smooth_l1_loss;

}  // namespace ember::nn::functional
