// pytorch/examples' mnist/main.py: Net, two 3x3 convolutions, a max pool, dropout and two
// fully connected layers, log-softmax out; trained with Adadelta and StepLR(1, 0.7).
#pragma once

#include "ember.h"

namespace pt_mnist {

using ember::Tensor;
namespace nn = ember::nn;
namespace F = ember::nn::functional;

class Net : public nn::Callable<Net> {
 public:
  Net()
      : conv1(register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, nn::Pair{3, 3}, nn::Pair{1, 1}))),
        conv2(register_module("conv2", std::make_shared<nn::Conv2d>(32, 64, nn::Pair{3, 3}, nn::Pair{1, 1}))),
        dropout1(register_module("dropout1", std::make_shared<nn::Dropout>(0.25))),
        dropout2(register_module("dropout2", std::make_shared<nn::Dropout>(0.5))),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(9216, 128))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(128, 10))) {}

  Tensor forward(const Tensor& input) {
    Tensor x = (*conv1)(input);
    x = ember::relu(x);
    x = (*conv2)(x);
    x = ember::relu(x);
    x = ember::max_pool2d(x, {.kernel_size = {2, 2}});
    x = (*dropout1)(x);
    x = x.flatten(1);
    x = (*fc1)(x);
    x = ember::relu(x);
    x = (*dropout2)(x);
    x = (*fc2)(x);
    return ember::log_softmax(x, 1);
  }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace pt_mnist
