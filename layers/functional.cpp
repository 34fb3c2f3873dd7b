#include "layers/functional.h"

#include <cmath>

#include "base/error.h"
#include "core/autograd.h"
#include "memory/site.h"

namespace ember::nn::functional {

Reduction parse_reduction(const std::string& s) {
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  if (s == "batchmean") return Reduction::BatchMean;
  EMBER_FAIL("reduction: unknown reduction '", s, "' (expected none, mean, sum or batchmean)");
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return ember::linear(x, weight, bias); }

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) { return ember::dropout(x, p, training, gen); }

namespace {

// Losses compute in float32 from 16-bit inputs (autocast's outputs): a bf16 log-softmax
// would round the loss to 3 significant digits.
Tensor to_float32_if_16bit(const Tensor& t) {
  return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16) ? t.to(kFloat32) : t;
}

// [C] viewed to broadcast along dim 1 of a tensor with `ndim` dims.
Tensor along_channels(const Tensor& t, int64_t ndim) {
  Shape s(static_cast<size_t>(ndim), 1);
  s[1] = t.numel();
  return t.reshape(s);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  EMBER_OP_SITE("batch_norm");
  EMBER_CHECK(x.dim() >= 2, "batch_norm: expects [N, C, ...], got ", shape_str(x.shape()));
  const int64_t C = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    if (t->defined())
      EMBER_CHECK(t->dim() == 1 && t->size(0) == C, "batch_norm: per-channel tensors must be [", C, "], got ",
                  shape_str(t->shape()));
  if (training) return batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps);
  EMBER_CHECK(running_mean.defined() && running_var.defined(), "batch_norm: eval mode needs running statistics");
  const Tensor mean_ = along_channels(running_mean, x.dim()), var_ = along_channels(running_var, x.dim());
  Tensor y = mul(sub(x, mean_), rsqrt(add(var_, Scalar(eps))));
  if (weight.defined()) y = mul(y, along_channels(weight, x.dim()));
  if (bias.defined()) y = add(y, along_channels(bias, x.dim()));
  return y;
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  EMBER_OP_SITE("layer_norm");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  EMBER_CHECK(k >= 1 && x.dim() >= k &&
                  Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
              "layer_norm: input ", shape_str(x.shape()), " does not end in normalized_shape ",
              shape_str(normalized_shape));
  return ember::layer_norm(x, k, weight, bias, eps);
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  EMBER_OP_SITE("embedding");
  return ember::embedding(indices, weight, padding_idx);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size) {
  EMBER_OP_SITE("adaptive_avg_pool2d");
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_avg_pool2d: expects [C, H, W] or [N, C, H, W], got ",
              shape_str(x.shape()));
  const auto [oh, ow] = output_size;
  EMBER_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d: output size must be positive, got [", oh, ", ", ow, "]");
  const int64_t H = x.size(-2), W = x.size(-1);
  if (H % oh == 0 && W % ow == 0)
    return avg_pool2d(x, {.kernel_size = {H / oh, W / ow}});
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
      cols.push_back(mean(x.narrow(-2, h0, h1 - h0).narrow(-1, w0, w1 - w0), {-2, -1}));
    }
    rows.push_back(stack(cols, -1));
  }
  return stack(rows, -2);
}

namespace {

Tensor reduce_loss(const Tensor& per_element, const Tensor& divisor, Reduction r) {
  EMBER_CHECK(r != Reduction::BatchMean, "reduction batchmean is kl_div's only; use none, mean or sum");
  if (r == Reduction::None) return per_element;
  Tensor total = sum(per_element);
  return r == Reduction::Sum ? total : div(total, divisor);
}

// Class dim 1: [N, C, d...] with targets [N, d...].
void check_class_shapes(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(input.dim() >= 2, op, ": expects input [N, C, ...], got ", shape_str(input.shape()));
  Shape want = input.shape();
  want.erase(want.begin() + 1);
  EMBER_CHECK(target.shape() == want, op, ": target ", shape_str(target.shape()), " does not match input ",
              shape_str(input.shape()), " (expected ", shape_str(want), ")");
  EMBER_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op, ": target must hold int64 class indices, got ",
              dtype_name(target.dtype()));
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, const LossOptions& o) {
  EMBER_OP_SITE("nll_loss");
  check_class_shapes("nll_loss", log_probs_in, target);
  const Tensor log_probs = to_float32_if_16bit(log_probs_in);
  const int64_t C = log_probs.size(1);
  Tensor t = target.to(kInt64);
  Tensor valid = ne(t, Scalar(o.ignore_index));
  Tensor safe = where(valid, t, zeros_like(t));
  if (safe.numel() > 0 && !safe.device().is_meta()) {  // meta: no values to check
    const int64_t lo = min(safe).item<int64_t>(), hi = max(safe).item<int64_t>();
    EMBER_CHECK(lo >= 0 && hi < C, "nll_loss: target ", lo < 0 ? lo : hi, " is out of range for ", C, " classes");
  }
  Tensor picked = gather(log_probs, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor w = valid.to(log_probs.dtype());
  if (o.weight.defined()) {
    EMBER_CHECK(o.weight.dim() == 1 && o.weight.size(0) == C, "nll_loss: weight must be [", C, "], got ",
                shape_str(o.weight.shape()));
    w = mul(w, index_select(o.weight.to(log_probs.dtype()), 0, safe.reshape({-1})).view(safe.shape()));
  }
  // mean divides by the total weight of the targets that count (their number without weights).
  return reduce_loss(neg(mul(picked, w)), sum(w), o.reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& o) {
  EMBER_OP_SITE("cross_entropy");
  check_class_shapes("cross_entropy", logits, target);
  return ember::cross_entropy(logits, target, o.ignore_index, o.reduction, o.weight, o.label_smoothing);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  EMBER_OP_SITE("mse_loss");
  EMBER_CHECK(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()), " and target ",
              shape_str(target.shape()), " differ in shape");
  Tensor d = sub(input, target);
  Tensor sq = mul(d, d);
  return reduce_loss(sq, scalar_tensor(static_cast<double>(sq.numel()), {sq.dtype(), sq.device()}), reduction);
}

}  // namespace ember::nn::functional
