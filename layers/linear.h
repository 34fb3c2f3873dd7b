// Linear layers and lookups: Linear, Embedding, Flatten. Each mirrors its PyTorch
// namesake: parameter names, shapes and default initialisation (Kaiming-uniform with
// a = sqrt(5) for Linear weights, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same
// bound for biases), so results and state dicts are comparable. Their tensor handles
// are their registry's slots (Note [One place per parameter] in layers/module.h): tie an
// output layer to an embedding with `decoder->weight = encoder->weight`.
#pragma once

#include <optional>
#include <string>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

class Linear : public Callable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) { return forward(x, Activation::kNone); }
  // With an activation fused into the op (what Sequential does for Linear, ReLU).
  Tensor forward(const Tensor& x, Activation act);
  std::string name() const override;
  Tensor& weight;  // [out, in]
  Tensor& bias;    // [out], or undefined

 private:
  int64_t in_, out_;
};

class Embedding : public Callable<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx_); }
  std::string name() const override;
  Tensor& weight;  // [num, dim], N(0, 1); the padding row starts at zero

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

class Flatten : public Callable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) { return x.flatten(start_, end_); }
  std::string name() const override;

 private:
  int64_t start_, end_;
};

}  // namespace ember::nn
