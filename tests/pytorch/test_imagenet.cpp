// examples/pytorch/imagenet's ResNet-18 against its PyTorch twin (imagenet_twin.py): full
// width, 4 images of 3x32x32, batch norm in training mode, 2 steps of SGD with momentum and
// weight decay.
#include "examples/pytorch/imagenet/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, ImagenetResnet18) {
  const twin::Twin t = twin::load("imagenet");
  const auto& c = t.config;
  auto model = pt_imagenet::resnet18(c.at("num_classes"));
  t.init_module(*model);
  model->train();
  nn::CrossEntropyLoss criterion;
  optim::SGD optimizer(model->parameters(), {.lr = c.at("lr").get<double>(), .momentum = c.at("momentum").get<double>(),
                                             .weight_decay = c.at("weight_decay").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    Tensor loss = criterion((*model)(t.at(s + ".images")), t.at(s + ".target"));
    t.check_loss(step, loss);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
