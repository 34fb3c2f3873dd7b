// examples/pytorch/regression against its PyTorch twin (regression_twin.py): 4 SGD steps.
#include "examples/pytorch/regression/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, Regression) {
  const twin::Twin t = twin::load("regression");
  auto fc = pt_regression::make_model();
  t.init_module(*fc);
  const Tensor W_target = t.at("W_target"), b_target = t.at("b_target");
  optim::SGD optim(fc->parameters(), {.lr = t.config.at("lr").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const Tensor batch_x = pt_regression::make_features(t.at("step" + std::to_string(step) + ".random"));
    const Tensor batch_y = pt_regression::f(batch_x, W_target, b_target);
    optim.zero_grad();
    Tensor output = smooth_l1_loss((*fc)(batch_x), batch_y);
    t.check_loss(step, output);
    output.backward();
    optim.step();
  }
  t.check_final(*fc);
}

}  // namespace
}  // namespace ember::test
