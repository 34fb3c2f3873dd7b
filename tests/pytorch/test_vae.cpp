// examples/pytorch/vae against its PyTorch twin (vae_twin.py): 3 Adam steps. The
// reparameterization's noise is the twin's (a VAE whose reparameterize takes it), as
// ember's randn cannot draw PyTorch's numbers.
#include "examples/pytorch/vae/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

class RecordedNoise : public pt_vae::VAE {
 public:
  Tensor eps;
  Tensor reparameterize(const Tensor& mu, const Tensor& logvar) override {
    const Tensor std = exp(0.5 * logvar);
    return mu + eps * std;
  }
};

TEST(PyTorchTwin, Vae) {
  const twin::Twin t = twin::load("vae");
  auto model = std::make_shared<RecordedNoise>();
  t.init_module(*model);
  optim::Adam optimizer(model->parameters(), {.lr = t.config.at("lr").get<double>()});
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    const Tensor data = t.at(s + ".data");
    model->eps = t.at(s + ".eps");
    optimizer.zero_grad();
    auto [recon_batch, mu, logvar] = (*model)(data);
    Tensor loss = pt_vae::loss_function(recon_batch, data, mu, logvar);
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
