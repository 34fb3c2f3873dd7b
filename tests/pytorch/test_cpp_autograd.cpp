// examples/pytorch/cpp_autograd against its PyTorch twin (cpp_autograd_twin.py): 3 SGD steps
// on the loss with a gradient penalty (double backward through Linear), and the gradients of
// the custom functions LinearFunction and MulConstant.
#include "examples/pytorch/cpp_autograd/model.h"
#include "tests/core/reference.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

Tensor leaf(const twin::Twin& t, const std::string& key) {
  Tensor x = t.at(key);
  x.requires_grad_();
  return x;
}

TEST(PyTorchTwin, CppAutogradGradientPenalty) {
  const twin::Twin t = twin::load("cpp_autograd");
  auto model = std::make_shared<nn::Linear>(4, 3);
  t.init_module(*model);
  optim::SGD optimizer(model->parameters(), {.lr = t.config.at("lr").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    const Tensor input = leaf(t, s + ".input");
    optimizer.zero_grad();
    Tensor loss = pt_cpp_autograd::combined_loss(*model, input, t.at(s + ".target"));
    t.check_loss(step, loss);
    loss.backward();
    EXPECT_TRUE(all_close(input.grad(), t.at(s + ".input_grad"), twin::kRtol, twin::kAtol)) << s;
    optimizer.step();
  }
  t.check_final(*model);
}

TEST(PyTorchTwin, CppAutogradCustomFunctions) {
  const twin::Twin t = twin::load("cpp_autograd");
  const Tensor x = leaf(t, "linear.x"), weight = leaf(t, "linear.weight"), bias = leaf(t, "linear.bias");
  pt_cpp_autograd::linear_function(x, weight, bias).pow(2).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), t.at("linear.x_grad"), twin::kRtol, twin::kAtol));
  EXPECT_TRUE(all_close(weight.grad(), t.at("linear.weight_grad"), twin::kRtol, twin::kAtol));
  EXPECT_TRUE(all_close(bias.grad(), t.at("linear.bias_grad"), twin::kRtol, twin::kAtol));
  const Tensor c = leaf(t, "mul.x");
  pt_cpp_autograd::mul_constant(c, 5.5).pow(2).sum().backward();
  EXPECT_TRUE(all_close(c.grad(), t.at("mul.x_grad"), twin::kRtol, twin::kAtol));
}

}  // namespace
}  // namespace ember::test
