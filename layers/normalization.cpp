#include "layers/normalization.h"

#include "base/error.h"
#include "core/autograd.h"

namespace ember::nn {

namespace {
// Checked before the members bind to the tensors made with it.
int64_t checked_features(int64_t features) {
  EMBER_CHECK(features > 0, "BatchNorm: num_features must be positive, got ", features);
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

}  // namespace ember::nn
