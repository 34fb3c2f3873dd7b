// examples/pytorch/siamese_network against its PyTorch twin (siamese_network_twin.py): 2
// steps of Adadelta with StepLR stepped after each, BCE, batch norm in training mode (its
// running statistics updated twice a step, once per image of the pairs).
#include "examples/pytorch/siamese_network/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, SiameseNetwork) {
  const twin::Twin t = twin::load("siamese_network");
  auto model = std::make_shared<pt_siamese_network::SiameseNetwork>();
  t.init_module(*model);
  model->train();
  optim::Adadelta optimizer(model->parameters(), {.lr = t.config.at("lr").get<double>()});
  optim::StepLR scheduler(optimizer, 1, t.config.at("gamma").get<double>());
  nn::BCELoss criterion;
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    optimizer.zero_grad();
    const Tensor outputs = (*model)(t.at(s + ".images_1"), t.at(s + ".images_2")).squeeze();
    Tensor loss = criterion(outputs, t.at(s + ".targets"));
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
    scheduler.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
