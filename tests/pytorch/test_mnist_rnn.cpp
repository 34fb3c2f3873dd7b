// examples/pytorch/mnist_rnn against its PyTorch twin (mnist_rnn_twin.py): 3 steps of
// Adadelta with StepLR stepped after each; BatchNorm1d in training mode, Dropout2d in eval
// mode on both sides (its masks cannot match).
#include "examples/pytorch/mnist_rnn/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, MnistRnn) {
  const twin::Twin t = twin::load("mnist_rnn");
  auto model = std::make_shared<pt_mnist_rnn::Net>();
  t.init_module(*model);
  model->train();
  model->dropout1->eval();
  model->dropout2->eval();
  optim::Adadelta optimizer(model->parameters(), {.lr = t.config.at("lr").get<double>()});
  optim::StepLR scheduler(optimizer, 1, t.config.at("gamma").get<double>());
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    optimizer.zero_grad();
    Tensor output = (*model)(t.at(s + ".data"));
    Tensor loss = nn::functional::nll_loss(output, t.at(s + ".target"));
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
    scheduler.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
