// Training steps that survive running out of memory: the batch's gradient, computed in
// micro-batches when the whole batch does not fit.
//
// Note [Automatic micro-batching]. A step tries the batch whole (or in the micro-batch
// size that worked before). When its forward or backward raises OutOfMemoryError, the
// attempt is rolled back -- its tensors and graph were freed as the exception unwound,
// and the gradients it had accumulated are cleared -- and the step is tried again in
// smaller pieces. The new size comes from what the failed attempt measured: the
// allocator's OutOfMemoryError estimates, from the bytes the piece had allocated when it
// failed, the largest piece that fits (an upper bound, as the piece was not finished);
// a safety fraction of it is taken, and halving when there is no useful estimate. Each piece's
// mean loss is scaled by its share of the batch, so that the accumulated gradient is the
// gradient of the batch's mean loss: the optimizer's update is the full-batch update and
// the global batch never changes. The size that worked is kept for the next steps.
//
// Data-parallel training (comm/) must keep ranks in step: after each attempt every rank
// calls `agree` with its proposal -- its current size if it succeeded, the smaller size
// if it ran out, 0 if it ran out with one sample -- and all take the smallest (one
// collective per attempt; 0 stops every rank). A rank whose
// attempt succeeded but whose peer ran out rolls back too, and all retry with the same
// size; gradients are exchanged only after an attempt every rank completed.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace ember::optim {

// A step's loss on (a slice of) the batch: the mean over its samples.
using LossFn = std::function<Tensor(const Tensor& data, const Tensor& target)>;

struct MicroBatchOptions {
  // Given this rank's proposal, the smallest proposal over all ranks (one collective).
  // Unset: a single process, the proposal stands.
  std::function<int64_t(int64_t proposal)> agree{};
  double safety = 0.9;  // share of the estimated fitting size that is tried
  // Called as each attempt starts, before its first piece: a caller that gathers
  // per-piece figures (accuracy) in its loss function restarts them here.
  std::function<void()> on_attempt{};
};

struct MicroBatchResult {
  double loss = 0;           // the batch's mean loss
  int64_t micro_batch = 0;   // the size its pieces had (the batch when it fit whole)
  int64_t pieces = 0;
  int64_t retries = 0;       // attempts rolled back in this step
};

class MicroBatcher {
 public:
  // `params`: the gradients cleared and accumulated; `device`: where memory runs out.
  MicroBatcher(std::vector<Tensor> params, Device device, MicroBatchOptions options = {});

  // Clears the parameters' gradients, then accumulates into them the gradient of the mean
  // of loss(data, target) over the batch (dim 0), in pieces when needed. Rethrows the
  // OutOfMemoryError when even a one-sample piece does not fit.
  MicroBatchResult backward(const Tensor& data, const Tensor& target, const LossFn& loss);

  // The micro-batch size that worked last (0 before the first step).
  int64_t micro_batch() const { return micro_batch_; }

 private:
  void clear_grads();
  std::vector<Tensor> params_;
  Device device_;
  MicroBatchOptions options_;
  int64_t micro_batch_ = 0;
};

}  // namespace ember::optim
