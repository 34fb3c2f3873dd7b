// libtorch's cpp/mnist (pytorch/examples cpp/mnist/mnist.cpp): Net, two 5x5 convolutions
// with max pooling, a feature dropout (libtorch's FeatureDropout: nn::Dropout2d) after the
// second, two fully connected layers with a functional dropout that follows the model's
// mode; log-softmax out. Trained with SGD (lr 0.01, momentum 0.5) and the NLL loss.
#pragma once

#include <memory>
#include <string>

#include "ember.h"

namespace pt_cpp_mnist {

using ember::Tensor;
namespace nn = ember::nn;

class Net : public nn::Callable<Net> {
 public:
  Net()
      : conv1(register_module("conv1", std::make_shared<nn::Conv2d>(1, 10, nn::Pair{5, 5}))),
        conv2(register_module("conv2", std::make_shared<nn::Conv2d>(10, 20, nn::Pair{5, 5}))),
        conv2_drop(register_module("conv2_drop", std::make_shared<nn::Dropout2d>())),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(320, 50))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(50, 10))) {}

  Tensor forward(const Tensor& input) {
    Tensor x = ember::relu(ember::max_pool2d((*conv1)(input), {.kernel_size = {2, 2}}));
    x = ember::relu(ember::max_pool2d((*conv2_drop)((*conv2)(x)), {.kernel_size = {2, 2}}));
    x = x.view({-1, 320});
    x = ember::relu((*fc1)(x));
    x = nn::functional::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = (*fc2)(x);
    return ember::log_softmax(x, /*dim=*/1);
  }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout2d> conv2_drop;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace pt_cpp_mnist
