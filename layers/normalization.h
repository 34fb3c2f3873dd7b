// Normalization layers: BatchNorm1d/2d and LayerNorm, with PyTorch's parameter and buffer
// names (weight, bias, running_mean, running_var, num_batches_tracked) and defaults.
#pragma once

#include <string>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

// BatchNorm over dim 1: [N, C] or [N, C, L] (1d), [N, C, H, W] (2d).
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, int64_t dims, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  // Slots of the registry (Note [One place per parameter] in layers/module.h); weight and
  // bias are undefined when not affine.
  Tensor& weight;
  Tensor& bias;
  Tensor& running_mean;
  Tensor& running_var;
  Tensor& num_batches_tracked;

 private:
  int64_t features_, dims_;
  double eps_, momentum_;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm(num_features, 1, eps, momentum, affine) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm(num_features, 2, eps, momentum, affine) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  Tensor& weight;  // normalized_shape, or undefined when not affine
  Tensor& bias;

 private:
  Shape shape_;
  double eps_;
};

}  // namespace ember::nn
