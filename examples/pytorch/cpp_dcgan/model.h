// libtorch's cpp/dcgan (pytorch/examples cpp/dcgan/dcgan.cpp): DCGANGenerator (four
// transposed convolutions, batch norm and ReLU between them, tanh out) turning noise
// [N, 100, 1, 1] into [N, 1, 28, 28], and the discriminator, a Sequential of strided
// convolutions with batch norm and LeakyReLU 0.2, sigmoid out.
#pragma once

#include <memory>
#include <string>

#include "ember.h"

namespace pt_cpp_dcgan {

using ember::Tensor;
namespace nn = ember::nn;

// The size of the noise vector fed to the generator.
inline constexpr int64_t kNoiseSize = 100;

class DCGANGenerator : public nn::Callable<DCGANGenerator> {
 public:
  explicit DCGANGenerator(int64_t noise_size)
      : conv1(register_module("conv1", std::make_shared<nn::ConvTranspose2d>(noise_size, 256, nn::Pair{4, 4},
                                                                           nn::ConvTranspose2dOptions{.bias = false}))),
        conv2(register_module("conv2", std::make_shared<nn::ConvTranspose2d>(
                                           256, 128, nn::Pair{3, 3},
                                           nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}))),
        conv3(register_module("conv3", std::make_shared<nn::ConvTranspose2d>(
                                           128, 64, nn::Pair{4, 4},
                                           nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}))),
        conv4(register_module("conv4", std::make_shared<nn::ConvTranspose2d>(
                                           64, 1, nn::Pair{4, 4},
                                           nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}))),
        batch_norm1(register_module("batch_norm1", std::make_shared<nn::BatchNorm2d>(256))),
        batch_norm2(register_module("batch_norm2", std::make_shared<nn::BatchNorm2d>(128))),
        batch_norm3(register_module("batch_norm3", std::make_shared<nn::BatchNorm2d>(64))) {}

  Tensor forward(const Tensor& input) {
    Tensor x = ember::relu((*batch_norm1)((*conv1)(input)));
    x = ember::relu((*batch_norm2)((*conv2)(x)));
    x = ember::relu((*batch_norm3)((*conv3)(x)));
    return ember::tanh((*conv4)(x));
  }
  std::string name() const override { return "DCGANGenerator"; }

  std::shared_ptr<nn::ConvTranspose2d> conv1, conv2, conv3, conv4;
  std::shared_ptr<nn::BatchNorm2d> batch_norm1, batch_norm2, batch_norm3;
};

inline std::shared_ptr<nn::Sequential> make_discriminator() {
  const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding) {
    return std::make_shared<nn::Conv2d>(in, out, nn::Pair{k, k}, nn::Pair{stride, stride}, nn::Pair{padding, padding},
                                        nn::Pair{1, 1}, 1, /*bias=*/false);
  };
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      // Layer 1
      conv(1, 64, 4, 2, 1), std::make_shared<nn::LeakyReLU>(0.2),
      // Layer 2
      conv(64, 128, 4, 2, 1), std::make_shared<nn::BatchNorm2d>(128), std::make_shared<nn::LeakyReLU>(0.2),
      // Layer 3
      conv(128, 256, 4, 2, 1), std::make_shared<nn::BatchNorm2d>(256), std::make_shared<nn::LeakyReLU>(0.2),
      // Layer 4
      conv(256, 1, 3, 1, 0), std::make_shared<nn::Sigmoid>()});
}

}  // namespace pt_cpp_dcgan
