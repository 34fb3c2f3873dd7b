// examples/pytorch/cpp_mnist against its PyTorch twin (cpp_mnist_twin.py): 3 steps of SGD
// with momentum; the whole model in eval mode on both sides (its two dropouts, Dropout2d and
// the functional one that follows the model's mode, are its only mode-dependent parts).
#include "examples/pytorch/cpp_mnist/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, CppMnist) {
  const twin::Twin t = twin::load("cpp_mnist");
  auto model = std::make_shared<pt_cpp_mnist::Net>();
  t.init_module(*model);
  model->eval();
  optim::SGD optimizer(model->parameters(),
                       {.lr = t.config.at("lr").get<double>(), .momentum = t.config.at("momentum").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    optimizer.zero_grad();
    Tensor output = (*model)(t.at(s + ".data"));
    Tensor loss = nn::functional::nll_loss(output, t.at(s + ".targets"));
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
