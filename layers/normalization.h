// Normalization layers: BatchNorm1d/2d, LayerNorm, GroupNorm and InstanceNorm2d, with
// PyTorch's parameter and buffer names (weight, bias, running_mean, running_var,
// num_batches_tracked) and defaults (InstanceNorm2d: affine and track_running_stats off).
#pragma once

#include <string>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

// BatchNorm over dim 1: [N, C] or [N, C, L] (1d), [N, C, H, W] (2d).
class BatchNorm : public Callable<BatchNorm> {
 public:
  BatchNorm(int64_t num_features, int64_t dims, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  Tensor forward(const Tensor& x);
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

class LayerNorm : public Callable<LayerNorm> {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x);
  std::string name() const override;
  Tensor& weight;  // normalized_shape, or undefined when not affine
  Tensor& bias;

 private:
  Shape shape_;
  double eps_;
};

// GroupNorm over [N, C, *]: weight ones and bias zeros [C] when affine.
class GroupNorm : public Callable<GroupNorm> {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) { return group_norm(x, groups_, weight, bias, eps_); }
  std::string name() const override;
  Tensor& weight;  // [C], or undefined when not affine
  Tensor& bias;

 private:
  int64_t groups_, channels_;
  double eps_;
};

struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;
};

// InstanceNorm2d over [N, C, H, W] or unbatched [C, H, W]: each plane by its own
// statistics, or (eval with track_running_stats) by the running ones.
class InstanceNorm2d : public Callable<InstanceNorm2d> {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override;
  Tensor& weight;  // [C] when affine
  Tensor& bias;
  Tensor& running_mean;  // [C] when track_running_stats
  Tensor& running_var;
  Tensor& num_batches_tracked;

 private:
  int64_t features_;
  InstanceNormOptions options_;
};

}  // namespace ember::nn
