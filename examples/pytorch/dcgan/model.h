// pytorch/examples' dcgan/main.py: the Generator (transposed convolutions with batch norm and
// ReLU, tanh out) and the Discriminator (strided convolutions with batch norm and LeakyReLU
// 0.2, sigmoid out) for 64x64 images, and weights_init (convolutions N(0, 0.02), batch
// norms' weights N(1, 0.02) and biases 0), applied to both. nz, ngf, ndf and nc are the
// original's command-line globals, here constructor arguments.
#pragma once

#include <memory>
#include <string>

#include "ember.h"

namespace pt_dcgan {

using ember::Tensor;
namespace nn = ember::nn;

// Called on every module by Module::apply, as the original's netG.apply(weights_init): it
// picks the modules by class ("Conv" in the name: Conv2d and ConvTranspose2d; "BatchNorm").
inline void weights_init(nn::Module& m) {
  if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) {
    nn::init::normal_(c->weight, 0.0, 0.02);
  } else if (auto* t = dynamic_cast<nn::ConvTranspose2d*>(&m)) {
    nn::init::normal_(t->weight, 0.0, 0.02);
  } else if (auto* b = dynamic_cast<nn::BatchNorm*>(&m)) {
    nn::init::normal_(b->weight, 1.0, 0.02);
    nn::init::zeros_(b->bias);
  }
}

class Generator : public nn::Callable<Generator> {
 public:
  Generator(int64_t nz, int64_t ngf, int64_t nc)
      : main(register_module(
            "main",
            std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                // input is Z, going into a convolution
                std::make_shared<nn::ConvTranspose2d>(nz, ngf * 8, nn::Pair{4, 4},
                                                      nn::ConvTranspose2dOptions{.stride = {1, 1}, .padding = {0, 0}, .bias = false}),
                std::make_shared<nn::BatchNorm2d>(ngf * 8), std::make_shared<nn::ReLU>(),
                // state size. (ngf*8) x 4 x 4
                std::make_shared<nn::ConvTranspose2d>(ngf * 8, ngf * 4, nn::Pair{4, 4},
                                                      nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}),
                std::make_shared<nn::BatchNorm2d>(ngf * 4), std::make_shared<nn::ReLU>(),
                // state size. (ngf*4) x 8 x 8
                std::make_shared<nn::ConvTranspose2d>(ngf * 4, ngf * 2, nn::Pair{4, 4},
                                                      nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}),
                std::make_shared<nn::BatchNorm2d>(ngf * 2), std::make_shared<nn::ReLU>(),
                // state size. (ngf*2) x 16 x 16
                std::make_shared<nn::ConvTranspose2d>(ngf * 2, ngf, nn::Pair{4, 4},
                                                      nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}),
                std::make_shared<nn::BatchNorm2d>(ngf), std::make_shared<nn::ReLU>(),
                // state size. (ngf) x 32 x 32
                std::make_shared<nn::ConvTranspose2d>(ngf, nc, nn::Pair{4, 4},
                                                      nn::ConvTranspose2dOptions{.stride = {2, 2}, .padding = {1, 1}, .bias = false}),
                std::make_shared<nn::Tanh>(),
                // state size. (nc) x 64 x 64
            }))) {}

  Tensor forward(const Tensor& input) { return (*main)(input); }
  std::string name() const override { return "Generator"; }

  std::shared_ptr<nn::Sequential> main;
};

class Discriminator : public nn::Callable<Discriminator> {
 public:
  Discriminator(int64_t ndf, int64_t nc)
      : main(register_module(
            "main", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                        // input is (nc) x 64 x 64
                        conv(nc, ndf, 2, 1), std::make_shared<nn::LeakyReLU>(0.2),
                        // state size. (ndf) x 32 x 32
                        conv(ndf, ndf * 2, 2, 1), std::make_shared<nn::BatchNorm2d>(ndf * 2), std::make_shared<nn::LeakyReLU>(0.2),
                        // state size. (ndf*2) x 16 x 16
                        conv(ndf * 2, ndf * 4, 2, 1), std::make_shared<nn::BatchNorm2d>(ndf * 4),
                        std::make_shared<nn::LeakyReLU>(0.2),
                        // state size. (ndf*4) x 8 x 8
                        conv(ndf * 4, ndf * 8, 2, 1), std::make_shared<nn::BatchNorm2d>(ndf * 8),
                        std::make_shared<nn::LeakyReLU>(0.2),
                        // state size. (ndf*8) x 4 x 4
                        conv(ndf * 8, 1, 1, 0), std::make_shared<nn::Sigmoid>(),
                    }))) {}

  Tensor forward(const Tensor& input) { return (*main)(input).view({-1, 1}).squeeze(1); }
  std::string name() const override { return "Discriminator"; }

  std::shared_ptr<nn::Sequential> main;

 private:
  // nn.Conv2d(in, out, 4, stride, padding, bias=False)
  static std::shared_ptr<nn::Module> conv(int64_t in, int64_t out, int64_t stride, int64_t padding) {
    return std::make_shared<nn::Conv2d>(in, out, nn::Pair{4, 4}, nn::Pair{stride, stride}, nn::Pair{padding, padding},
                                        nn::Pair{1, 1}, 1, /*bias=*/false);
  }
};

}  // namespace pt_dcgan
