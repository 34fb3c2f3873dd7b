// pytorch/examples' time_sequence_prediction/train.py: Sequence, two LSTMCells and a
// Linear run over a sine wave one point at a time, then fed their own output to predict
// `future` points more. Float64, as the original.
#pragma once

#include <memory>
#include <vector>

#include "ember.h"

namespace pt_time_sequence_prediction {

using ember::Tensor;
namespace nn = ember::nn;

class Sequence : public nn::Callable<Sequence> {
 public:
  Sequence()
      : lstm1(register_module("lstm1", std::make_shared<nn::LSTMCell>(1, 51))),
        lstm2(register_module("lstm2", std::make_shared<nn::LSTMCell>(51, 51))),
        linear(register_module("linear", std::make_shared<nn::Linear>(51, 1))) {}

  // input [N, L]; returns [N, L + future].
  Tensor forward(const Tensor& input, int64_t future = 0) {
    std::vector<Tensor> outputs;
    // The original finds the device through a dummy parameter; here it is the input's.
    const ember::TensorOptions options(ember::kFloat64, input.device());
    Tensor h_t = ember::zeros({input.size(0), 51}, options);
    Tensor c_t = ember::zeros({input.size(0), 51}, options);
    Tensor h_t2 = ember::zeros({input.size(0), 51}, options);
    Tensor c_t2 = ember::zeros({input.size(0), 51}, options);

    Tensor output;
    for (const Tensor& input_t : ember::split(input, 1, 1)) {
      std::tie(h_t, c_t) = (*lstm1)(input_t, std::tuple{h_t, c_t});
      std::tie(h_t2, c_t2) = (*lstm2)(h_t, std::tuple{h_t2, c_t2});
      output = (*linear)(h_t2);
      outputs.push_back(output);
    }
    for (int64_t i = 0; i < future; ++i) {  // if we should predict the future
      std::tie(h_t, c_t) = (*lstm1)(output, std::tuple{h_t, c_t});
      std::tie(h_t2, c_t2) = (*lstm2)(h_t, std::tuple{h_t2, c_t2});
      output = (*linear)(h_t2);
      outputs.push_back(output);
    }
    return ember::cat(outputs, 1);
  }
  std::string name() const override { return "Sequence"; }

  std::shared_ptr<nn::LSTMCell> lstm1, lstm2;
  std::shared_ptr<nn::Linear> linear;
};

}  // namespace pt_time_sequence_prediction
