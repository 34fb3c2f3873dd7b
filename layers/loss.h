// Loss modules: (input, target) -> loss, with PyTorch's reductions and options. Each is a
// thin holder of its options around the functional form (layers/functional.h).
#pragma once

#include <utility>

#include "layers/functional.h"

namespace ember::nn {

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

}  // namespace ember::nn
