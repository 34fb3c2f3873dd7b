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

// BCELoss on probabilities in [0, 1]: weight (broadcast to the input) rescales each term.
struct BCELossOptions {
  Tensor weight{};
  functional::Reduction reduction = functional::Reduction::Mean;
};
class BCELoss {
 public:
  explicit BCELoss(BCELossOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy(input, target, options_.weight, options_.reduction);
  }

 private:
  BCELossOptions options_;
};

// BCEWithLogitsLoss: pos_weight [classes] weighs the positive term of each class.
struct BCEWithLogitsLossOptions {
  Tensor weight{};
  Tensor pos_weight{};
  functional::Reduction reduction = functional::Reduction::Mean;
};
class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, options_.weight, options_.pos_weight, options_.reduction);
  }

 private:
  BCEWithLogitsLossOptions options_;
};

class L1Loss {
 public:
  explicit L1Loss(functional::Reduction reduction = functional::Reduction::Mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return l1_loss(input, target, reduction_); }

 private:
  functional::Reduction reduction_;
};

struct SmoothL1LossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  double beta = 1.0;
};
class SmoothL1Loss {
 public:
  explicit SmoothL1Loss(SmoothL1LossOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return smooth_l1_loss(input, target, options_.reduction, options_.beta);
  }

 private:
  SmoothL1LossOptions options_;
};

struct HuberLossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  double delta = 1.0;
};
class HuberLoss {
 public:
  explicit HuberLoss(HuberLossOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return huber_loss(input, target, options_.reduction, options_.delta);
  }

 private:
  HuberLossOptions options_;
};

// KLDivLoss(input: log-probabilities, target); Reduction::BatchMean is the one that
// matches the KL divergence's definition (PyTorch warns on mean).
struct KLDivLossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  bool log_target = false;
};
class KLDivLoss {
 public:
  explicit KLDivLoss(KLDivLossOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return kl_div(input, target, options_.reduction, options_.log_target);
  }

 private:
  KLDivLossOptions options_;
};

}  // namespace ember::nn
