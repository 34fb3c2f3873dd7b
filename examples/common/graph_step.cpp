// The training step of --cuda-graph (graph_step.h): eager warm-up and odd-sized batches,
// one capture of the whole step, then a replay per batch.
#include "examples/common/graph_step.h"

#include "base/error.h"

namespace ember::examples {

GraphStep::GraphStep(optim::Optimizer& opt, LossFn loss, Device device, int64_t batch_size, Shape sample_shape,
                     DType input_dtype)
    : opt_(opt), loss_(std::move(loss)), batch_size_(batch_size) {
  EMBER_CHECK(device.is_cuda(), "--cuda-graph: needs a CUDA device, got ", device.str());
  EMBER_CHECK(opt.capturable(), "--cuda-graph: the optimizer must be capturable");
  Shape shape{batch_size};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  x_ = zeros(shape, {input_dtype, device});
  y_ = zeros({batch_size}, {kInt64, device});
  loss_sum_ = zeros({}, {kFloat64, device});
  correct_ = zeros({}, {kInt64, device});
}

void GraphStep::start_epoch() {
  loss_sum_.zero_();
  correct_.zero_();
}

void GraphStep::run(const Tensor& x, const Tensor& y) {
  // As PyTorch's whole-network capture: backward makes the gradients (in a capture, from
  // the graph's private pool, so every replay writes them at the same addresses), rather
  // than zeroing and adding into old ones, two kernels a parameter that a replay would run.
  opt_.zero_grad(/*set_to_none=*/true);
  auto [loss, right] = loss_(x, y);
  loss.backward();
  opt_.step();
  // The eager loop's sums, written into the same tensors at every replay.
  loss_sum_.add_(mul(loss.detach().to(kFloat64), Scalar(static_cast<double>(x.size(0)))));
  correct_.add_(right);
}

void GraphStep::step(const Tensor& x, const Tensor& y) {
  if (x.size(0) != batch_size_ || (!graph_.captured() && eager_steps_ < kWarmupSteps)) {
    run(x, y);
    ++eager_steps_;
    return;
  }
  x_.copy_(x);
  y_.copy_(y);
  if (!graph_.captured()) {
    CudaGraphCapture capture(graph_, x_.device());
    run(x_, y_);
  }
  graph_.replay();  // the capture queued nothing: its first replay is this batch's step
  ++replays_;
}

}  // namespace ember::examples
