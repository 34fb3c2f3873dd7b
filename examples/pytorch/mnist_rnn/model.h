// pytorch/examples' mnist_rnn/main.py: Net, an LSTM (batch_first) reading an image's 28
// rows as a sequence of 28 steps, its last output through BatchNorm1d, dropout and two
// fully connected layers, log-softmax out; trained with Adadelta and StepLR(1, 0.7).
//
// The original's dropouts are nn.Dropout2d applied to [N, 64]: on a 2-D input, torch 1.13's
// dropout2d and ember's draw one mask entry per (n, c), that is per element.
#pragma once

#include <memory>

#include "ember.h"

namespace pt_mnist_rnn {

using ember::Tensor;
namespace nn = ember::nn;
namespace F = ember::nn::functional;

class Net : public nn::Callable<Net> {
 public:
  Net()
      : rnn(register_module("rnn", std::make_shared<nn::LSTM>(28, 64, nn::RNNOptions{.batch_first = true}))),
        batchnorm(register_module("batchnorm", std::make_shared<nn::BatchNorm1d>(64))),
        dropout1(register_module("dropout1", std::make_shared<nn::Dropout2d>(0.25))),
        dropout2(register_module("dropout2", std::make_shared<nn::Dropout2d>(0.5))),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(64, 32))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(32, 10))) {}

  Tensor forward(const Tensor& x) {
    // Shape of input is (batch_size, 1, 28, 28)
    // converting shape of input to (batch_size, 28, 28)
    // as required by RNN when batch_first is set True
    const Tensor input = x.reshape({-1, 28, 28});
    auto [output, hidden] = (*rnn)(input);

    // RNN output shape is (batch, seq_len, hidden_size) here (batch_first)
    // Get last output of RNN
    output = output.select(1, output.size(1) - 1);
    output = (*batchnorm)(output);
    output = (*dropout1)(output);
    output = (*fc1)(output);
    output = ember::relu(output);
    output = (*dropout2)(output);
    output = (*fc2)(output);
    output = ember::log_softmax(output, 1);
    return output;
  }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::LSTM> rnn;
  std::shared_ptr<nn::BatchNorm1d> batchnorm;
  std::shared_ptr<nn::Dropout2d> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace pt_mnist_rnn
