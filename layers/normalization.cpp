#include "layers/normalization.h"

#include "base/error.h"
#include "core/autograd.h"

namespace ember::nn {

namespace {
// Checked before the members bind to the tensors made with it.
int64_t checked_features(int64_t features, const char* layer = "BatchNorm") {
  EMBER_CHECK(features > 0, layer, ": num_features must be positive, got ", features);
  return features;
}
}  // namespace

BatchNorm::BatchNorm(int64_t features, int64_t dims, double eps, double momentum, bool affine)
    : weight(register_parameter("weight", affine ? ones({checked_features(features)}) : Tensor())),
      bias(register_parameter("bias", affine ? zeros({features}) : Tensor())),
      running_mean(register_buffer("running_mean", zeros({checked_features(features)}))),
      running_var(register_buffer("running_var", ones({features}))),
      num_batches_tracked(register_buffer("num_batches_tracked", zeros({}, kInt64))),
      features_(features),
      dims_(dims),
      eps_(eps),
      momentum_(momentum) {}
Tensor BatchNorm::forward(const Tensor& x) {
  const bool ok = dims_ == 1 ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  EMBER_CHECK(ok, name(), ": expects ", dims_ == 1 ? "[N, C] or [N, C, L]" : "[N, C, H, W]", " input, got ",
              shape_str(x.shape()));
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.copy_(add(num_batches_tracked, Scalar(1)));
  }
  return functional::batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_);
}
std::string BatchNorm::name() const {
  return "BatchNorm" + std::to_string(dims_) + "d(" + std::to_string(features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + ")";
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine)
    : weight(register_parameter("weight", affine ? ones(shape) : Tensor())),
      bias(register_parameter("bias", affine ? zeros(shape) : Tensor())),
      shape_(std::move(shape)),
      eps_(eps) {}
Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, shape_, weight, bias, eps_); }
std::string LayerNorm::name() const { return "LayerNorm(" + shape_str(shape_) + ")"; }

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine)
    : weight(register_parameter("weight", affine ? ones({channels}) : Tensor())),
      bias(register_parameter("bias", affine ? zeros({channels}) : Tensor())),
      groups_(groups),
      channels_(channels),
      eps_(eps) {
  EMBER_CHECK(groups > 0 && channels > 0 && channels % groups == 0, "GroupNorm: num_channels ", channels,
              " must be positive and divisible by num_groups ", groups);
}
std::string GroupNorm::name() const {
  return detail::str("GroupNorm(", groups_, ", ", channels_, ", eps=", eps_, ", affine=", weight.defined(), ")");
}

InstanceNorm2d::InstanceNorm2d(int64_t features, InstanceNormOptions o)
    : weight(register_parameter("weight", o.affine ? ones({checked_features(features, "InstanceNorm2d")}) : Tensor())),
      bias(register_parameter("bias", o.affine ? zeros({features}) : Tensor())),
      running_mean(register_buffer("running_mean", o.track_running_stats ? zeros({features}) : Tensor())),
      running_var(register_buffer("running_var", o.track_running_stats ? ones({features}) : Tensor())),
      num_batches_tracked(
          register_buffer("num_batches_tracked", o.track_running_stats ? zeros({}, kInt64) : Tensor())),
      features_(checked_features(features, "InstanceNorm2d")),
      options_(o) {}
Tensor InstanceNorm2d::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, name(), ": expects [N, C, H, W] or [C, H, W] input, got ",
              shape_str(x.shape()));
  const bool batched = x.dim() == 4;
  const Tensor in = batched ? x : x.unsqueeze(0);
  EMBER_CHECK(in.size(1) == features_ || !(options_.affine || options_.track_running_stats), name(), ": expects ",
              features_, " channels, got input ", shape_str(x.shape()));
  // PyTorch's _InstanceNorm: the batch's statistics unless evaluating with running ones
  // (which training updates); num_batches_tracked is kept for state dicts, never counted.
  const bool use_input_stats = is_training() || !options_.track_running_stats;
  const Tensor y = instance_norm(in, running_mean, running_var, weight, bias, use_input_stats, options_.momentum,
                                 options_.eps);
  return batched ? y : y.squeeze(0);
}
std::string InstanceNorm2d::name() const {
  return detail::str("InstanceNorm2d(", features_, ", eps=", options_.eps, ", momentum=", options_.momentum,
                     ", affine=", options_.affine, ", track_running_stats=", options_.track_running_stats, ")");
}

}  // namespace ember::nn
