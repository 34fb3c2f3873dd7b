// examples/pytorch/super_resolution against its PyTorch twin (super_resolution_twin.py):
// upscale factor 3, 3 steps of Adam (lr 0.01) with the MSE loss on 2 images 1x8x8 -> 1x24x24.
#include "examples/pytorch/super_resolution/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, SuperResolution) {
  const twin::Twin t = twin::load("super_resolution");
  auto model = std::make_shared<pt_super_resolution::Net>(t.config.at("upscale_factor").get<int64_t>());
  t.init_module(*model);
  model->train();
  const nn::MSELoss criterion;
  optim::Adam optimizer(model->parameters(), {.lr = t.config.at("lr").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    optimizer.zero_grad();
    Tensor loss = criterion((*model)(t.at(s + ".input")), t.at(s + ".target"));
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
