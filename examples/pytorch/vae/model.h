// pytorch/examples' vae/main.py: a variational autoencoder of 28x28 images, 784-400-20 and
// back, trained with Adam on the reconstruction's binary cross entropy plus the KL
// divergence, both summed over the batch.
#pragma once

#include <tuple>

#include "ember.h"

namespace pt_vae {

using ember::Tensor;
namespace nn = ember::nn;

// forward returns three tensors: VAE is an nn::Callable, whose forward may return anything.
class VAE : public nn::Callable<VAE> {
 public:
  VAE()
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(784, 400))),
        fc21(register_module("fc21", std::make_shared<nn::Linear>(400, 20))),
        fc22(register_module("fc22", std::make_shared<nn::Linear>(400, 20))),
        fc3(register_module("fc3", std::make_shared<nn::Linear>(20, 400))),
        fc4(register_module("fc4", std::make_shared<nn::Linear>(400, 784))) {}

  std::pair<Tensor, Tensor> encode(const Tensor& x) {
    const Tensor h1 = ember::relu((*fc1)(x));
    return {(*fc21)(h1), (*fc22)(h1)};
  }
  virtual Tensor reparameterize(const Tensor& mu, const Tensor& logvar) {
    const Tensor std = ember::exp(0.5 * logvar);
    const Tensor eps = ember::randn_like(std);
    return mu + eps * std;
  }
  Tensor decode(const Tensor& z) {
    const Tensor h3 = ember::relu((*fc3)(z));
    return ember::sigmoid((*fc4)(h3));
  }
  // (reconstruction, mu, logvar)
  std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& x) {
    auto [mu, logvar] = encode(x.view({-1, 784}));
    const Tensor z = reparameterize(mu, logvar);
    return {decode(z), mu, logvar};
  }
  std::string name() const override { return "VAE"; }

  std::shared_ptr<nn::Linear> fc1, fc21, fc22, fc3, fc4;
};

// Reconstruction + KL divergence losses summed over all elements and batch.
inline Tensor loss_function(const Tensor& recon_x, const Tensor& x, const Tensor& mu, const Tensor& logvar) {
  const Tensor BCE = ember::binary_cross_entropy(recon_x, x.view({-1, 784}), {}, ember::Reduction::Sum);
  // Appendix B of Kingma and Welling, Auto-Encoding Variational Bayes (ICLR 2014):
  // 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
  const Tensor KLD = -0.5 * ember::sum(1 + logvar - mu.pow(2) - logvar.exp());
  return BCE + KLD;
}

}  // namespace pt_vae
