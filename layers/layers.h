// The layers of ember::nn. Each mirrors its PyTorch namesake: parameter names, shapes
// and default initialisation (Kaiming-uniform with a = sqrt(5) for Linear and Conv2d
// weights, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for biases), so
// results and state dicts are comparable.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

using Pair = std::pair<int64_t, int64_t>;

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override { return forward(x, Activation::kNone); }
  // With an activation fused into the op (what Sequential does for Linear, ReLU).
  Tensor forward(const Tensor& x, Activation act);
  std::string name() const override;
  Tensor weight, bias;  // [out, in], [out] or undefined

 private:
  int64_t in_, out_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = {1, 1}, Pair padding = {0, 0},
         Pair dilation = {1, 1}, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override { return forward(x, Activation::kNone); }
  // With an activation fused into the op (what Sequential does for Conv2d, ReLU).
  Tensor forward(const Tensor& x, Activation act);
  std::string name() const override;
  Tensor weight, bias;  // [out, in / groups, kh, kw], [out]

 private:
  int64_t in_, out_, groups_;
  Pair kernel_, stride_, padding_, dilation_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options_); }
  // relu(pool(x)): what Sequential runs for ReLU, MaxPool2d.
  Tensor forward(const Tensor& x, Activation act) { return max_pool2d(x, options_, act); }
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options_); }
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size) : size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool2d(x, size_); }
  std::string name() const override;

 private:
  Pair size_;
};

// BatchNorm over dim 1: [N, C] or [N, C, L] (1d), [N, C, H, W] (2d).
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, int64_t dims, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

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
  Tensor weight, bias;

 private:
  Shape shape_;
  double eps_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return functional::dropout(x, p_, is_training()); }
  std::string name() const override;

 private:
  double p_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override { return functional::embedding(indices, weight, padding_idx_); }
  std::string name() const override;
  Tensor weight;  // [num, dim], N(0, 1); the padding row starts at zero

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU()"; }
};
class GELU : public Module {
 public:
  explicit GELU(bool approximate_tanh = false) : tanh_(approximate_tanh) {}
  Tensor forward(const Tensor& x) override { return gelu(x, tanh_); }
  std::string name() const override { return tanh_ ? "GELU(approximate=tanh)" : "GELU()"; }

 private:
  bool tanh_;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string name() const override { return "Tanh()"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid()"; }
};
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override;

 private:
  int64_t start_, end_;
};

// Applies its children in order; children are named "0", "1", ... as in PyTorch.
// Activation checkpointing: runs `inner` keeping only its input, and in backward runs
// it again -- with the same random draws, so dropout masks repeat -- to differentiate
// it. Memory: the activations inside `inner` live only while its backward runs, at the
// price of a second forward. The parameters of `inner` get their gradients during that
// backward (their post-accumulate hooks fire from it).
class Checkpoint : public Module {
 public:
  explicit Checkpoint(std::shared_ptr<Module> inner);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Checkpoint"; }

 private:
  std::shared_ptr<Module> inner_;
};

// Runs its modules in order. A ReLU followed by a MaxPool2d runs inside the pool, after
// the max; otherwise a Linear or Conv2d followed by a ReLU runs as one op with the ReLU
// fused into it (Note [Fused activations] in layers.cpp): the same results bit for bit,
// passes over the activations saved. set_fusion(false) runs the modules one by one.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  void set_fusion(bool on) { fuse_ = on; }
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children().at(i).second; }

 private:
  bool fuse_ = true;
};

// Activation checkpointing of a Sequential by blocks, as the examples' --checkpoint: each
// module with parameters and the parameter-free modules after it (its ReLU, its pool) form
// a block; every block but the last runs inside a Checkpoint of a Sequential of it. The
// modules are shared with `model`, not copied.
std::shared_ptr<Sequential> checkpoint_blocks(const Sequential& model);

// ----- losses: (input, target) -> loss -----

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(functional::LossOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return functional::cross_entropy(logits, target, options_);
  }

 private:
  functional::LossOptions options_;
};

class NLLLoss {
 public:
  explicit NLLLoss(functional::LossOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return functional::nll_loss(log_probs, target, options_);
  }

 private:
  functional::LossOptions options_;
};

class MSELoss {
 public:
  explicit MSELoss(functional::Reduction reduction = functional::Reduction::Mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return functional::mse_loss(input, target, reduction_);
  }

 private:
  functional::Reduction reduction_;
};

// ----- initialisation (in place, outside autograd) -----
void uniform_(const Tensor& t, double lo, double hi, Generator* gen = nullptr);
void normal_(const Tensor& t, double mean = 0, double stddev = 1, Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)); PyTorch's default
// a = sqrt(5) gives b = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& t, double a = 2.23606797749979, Generator* gen = nullptr);
// fan_in of a weight: dim 1 times the product of dims 2... ([out, in, kh, kw] -> in * kh * kw).
int64_t fan_in(const Tensor& weight);

}  // namespace ember::nn
