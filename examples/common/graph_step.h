// --cuda-graph: the whole training step (forward, loss, backward, the capturable
// optimizer step, the device-side sums of loss and right answers) captured once in a CUDA
// graph (core/cuda_graph.h) and replayed per batch, as PyTorch's whole-network capture:
// one launch per step instead of a few hundred.
//
// Each batch is copied into static input tensors on the device, then the graph replays.
// The first kWarmupSteps batches run eagerly, so that the optimizer's state and the
// allocator's pools exist before the capture (state made in a capture would be made again,
// zeroed, at every replay). The gradients are made by the captured backward, in the
// graph's private pool: each replay writes them at the same addresses, where the captured
// step reads them. A batch of another size (the epoch's last, partial one) runs eagerly
// too: the same update, no second graph.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "core/cuda_graph.h"
#include "optim/optimizer.h"

namespace ember::examples {

class GraphStep {
 public:
  static constexpr int kWarmupSteps = 3;
  // loss(x, y): the batch's mean loss and its count of right answers (int64 scalar), on
  // the device; the optimizer must be capturable.
  using LossFn = std::function<std::pair<Tensor, Tensor>(const Tensor& x, const Tensor& y)>;
  GraphStep(optim::Optimizer& opt, LossFn loss, Device device, int64_t batch_size, Shape sample_shape,
            DType input_dtype);

  // Zeroes the epoch's sums.
  void start_epoch();
  // One training step on the batch (x [n, ...], y [n]), on the device.
  void step(const Tensor& x, const Tensor& y);
  // The epoch's sum of n * loss (float64) and of right answers (int64), on the device.
  const Tensor& loss_sum() const { return loss_sum_; }
  const Tensor& correct() const { return correct_; }
  int64_t replays() const { return replays_; }

 private:
  // The step's work on x, y, eager or captured: the sums are updated in place.
  void run(const Tensor& x, const Tensor& y);

  optim::Optimizer& opt_;
  LossFn loss_;
  int64_t batch_size_;
  Tensor x_, y_;  // the graph's static inputs
  Tensor loss_sum_, correct_;
  int64_t eager_steps_ = 0, replays_ = 0;
  CudaGraph graph_;
};

}  // namespace ember::examples
