// Magnitude pruning of the Linear weights of a model, and the masks that keep the pruned
// weights at zero while the model is fine-tuned (PyTorch's torch.nn.utils.prune, with
// global_unstructured's global ranking and the 2:4 pattern of sparse tensor cores).
//
// Note [Keeping pruned weights at zero]. Zeroing the gradient alone is not enough: Adam's
// first moment, filled before pruning, keeps moving a weight whose gradient is now zero,
// and so would SGD's momentum. So each mask works twice: a post-accumulate-grad hook zeroes
// the pruned gradients (the moments of pruned weights then decay and never grow, and a
// gradient-norm clip sees only live weights), and Pruning::apply(), called after every
// optimizer step, sets the pruned weights back to exactly zero. Weight decay, coupled or
// decoupled, adds nothing to a weight that is zero before the step and zero after it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "layers/module.h"

namespace ember::nn {

struct PruneOptions {
  double sparsity = 0.5;  // share of the weights set to zero, in [0, 1]
  // Global: one magnitude ranking over all chosen weights (layers end up with different
  // sparsities); per layer: each layer loses exactly that share of its own weights.
  bool global = true;
  // 2:4: in every group of 4 consecutive weights along the input dim, the 2 largest stay
  // (in_features must be a multiple of 4; sparsity must be 0.5; `global` does not apply).
  bool two_of_four = false;
};

// Prunes, in place, the weights of every nn::Linear in `model` (itself and its children,
// recursively): the smallest |w| go, exactly round(sparsity * count) of them (ties: the
// earlier position goes first), and keeps their masks. An ember::Error for a sparsity
// outside [0, 1], a model without Linear layers, or a 2:4 request that does not fit.
class Pruning {
 public:
  Pruning(Module& model, const PruneOptions& options);

  // weight *= mask for every pruned weight (outside autograd): call after optimizer.step().
  void apply() const;
  // Pruned weights / all chosen weights, counted from the masks.
  double sparsity() const;
  // The masks by parameter name ("1.weight"): 1 where a weight stays, 0 where it was
  // pruned, of the weight's shape, dtype and device.
  const std::vector<std::pair<std::string, Tensor>>& masks() const { return masks_; }

 private:
  std::vector<Tensor> weights_;
  std::vector<std::pair<std::string, Tensor>> masks_;
};

}  // namespace ember::nn
