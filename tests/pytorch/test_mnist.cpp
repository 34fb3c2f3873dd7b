// examples/pytorch/mnist and mnist_rnn against their PyTorch twins (mnist_twin.py,
// mnist_rnn_twin.py): the two originals train alike, 3 steps of Adadelta with StepLR stepped
// after each and an NLL loss; dropout (mnist_rnn: Dropout2d) in eval mode on both sides (its
// masks cannot match), mnist_rnn's BatchNorm1d in training mode.
#include "examples/pytorch/mnist/model.h"
#include "examples/pytorch/mnist_rnn/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

template <class Net>
void train_as_the_twin(const std::string& name) {
  const twin::Twin t = twin::load(name);
  auto model = std::make_shared<Net>();
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

TEST(PyTorchTwin, Mnist) { train_as_the_twin<pt_mnist::Net>("mnist"); }

TEST(PyTorchTwin, MnistRnn) { train_as_the_twin<pt_mnist_rnn::Net>("mnist_rnn"); }

}  // namespace
}  // namespace ember::test
