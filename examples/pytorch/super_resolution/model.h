// pytorch/examples' super_resolution/model.py: Net, the efficient sub-pixel CNN: four
// convolutions with ReLU between them, the last giving upscale_factor^2 channels that
// PixelShuffle rearranges into an image upscale_factor times larger; weights orthogonal,
// scaled by calculate_gain('relu') but for the last layer's.
#pragma once

#include <memory>
#include <string>

#include "ember.h"

namespace pt_super_resolution {

using ember::Tensor;
namespace nn = ember::nn;
namespace init = ember::nn::init;

class Net : public nn::Callable<Net> {
 public:
  explicit Net(int64_t upscale_factor)
      : relu(register_module("relu", std::make_shared<nn::ReLU>())),
        conv1(register_module("conv1", std::make_shared<nn::Conv2d>(1, 64, nn::Pair{5, 5}, nn::Pair{1, 1}, nn::Pair{2, 2}))),
        conv2(register_module("conv2", std::make_shared<nn::Conv2d>(64, 64, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}))),
        conv3(register_module("conv3", std::make_shared<nn::Conv2d>(64, 32, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}))),
        conv4(register_module("conv4", std::make_shared<nn::Conv2d>(32, upscale_factor * upscale_factor, nn::Pair{3, 3},
                                                                    nn::Pair{1, 1}, nn::Pair{1, 1}))),
        pixel_shuffle(register_module("pixel_shuffle", std::make_shared<nn::PixelShuffle>(upscale_factor))) {
    initialize_weights();
  }

  Tensor forward(const Tensor& input) {
    Tensor x = (*relu)((*conv1)(input));
    x = (*relu)((*conv2)(x));
    x = (*relu)((*conv3)(x));
    x = (*pixel_shuffle)((*conv4)(x));
    return x;
  }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3, conv4;
  std::shared_ptr<nn::PixelShuffle> pixel_shuffle;

 private:
  void initialize_weights() {
    init::orthogonal_(conv1->weight, init::calculate_gain(init::Nonlinearity::ReLU));
    init::orthogonal_(conv2->weight, init::calculate_gain(init::Nonlinearity::ReLU));
    init::orthogonal_(conv3->weight, init::calculate_gain(init::Nonlinearity::ReLU));
    init::orthogonal_(conv4->weight);
  }
};

}  // namespace pt_super_resolution
