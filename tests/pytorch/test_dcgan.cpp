// examples/pytorch/dcgan against its PyTorch twin (dcgan_twin.py): nz 16, ngf = ndf = 8,
// nc 1; 2 steps of the original's loop on 2 images (D on real and on detached fake, then G),
// Adam (lr 2e-4, betas (0.5, 0.999)) for each network, BCE, batch norm in training mode.
// The twin's losses are errD, errG per step; its state dict is that of a holder of "netG"
// and "netD".
#include "examples/pytorch/dcgan/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

struct Holder : nn::Module {
  Holder(int64_t nz, int64_t ngf, int64_t ndf, int64_t nc)
      : netG(register_module("netG", std::make_shared<pt_dcgan::Generator>(nz, ngf, nc))),
        netD(register_module("netD", std::make_shared<pt_dcgan::Discriminator>(ndf, nc))) {}
  std::shared_ptr<pt_dcgan::Generator> netG;
  std::shared_ptr<pt_dcgan::Discriminator> netD;
};

TEST(PyTorchTwin, Dcgan) {
  const twin::Twin t = twin::load("dcgan");
  const auto& c = t.config;
  Holder holder(c.at("nz").get<int64_t>(), c.at("ngf").get<int64_t>(), c.at("ndf").get<int64_t>(), c.at("nc").get<int64_t>());
  t.init_module(holder);
  holder.train();
  auto& netG = *holder.netG;
  auto& netD = *holder.netD;
  const nn::BCELoss criterion;
  const double lr = c.at("lr").get<double>(), beta1 = c.at("beta1").get<double>();
  optim::Adam optimizerD(netD.parameters(), {.lr = lr, .beta1 = beta1, .beta2 = 0.999});
  optim::Adam optimizerG(netG.parameters(), {.lr = lr, .beta1 = beta1, .beta2 = 0.999});
  ASSERT_EQ(t.steps() % 2, 0);
  for (int64_t step = 0; step < t.steps() / 2; ++step) {
    const std::string s = "step" + std::to_string(step);
    const Tensor real = t.at(s + ".real");
    const TensorOptions o(kFloat64, default_device());
    const int64_t batch_size = real.size(0);
    netD.zero_grad();
    Tensor output = netD(real);
    Tensor errD_real = criterion(output, full({batch_size}, 1.0, o));
    errD_real.backward();
    const Tensor fake = netG(t.at(s + ".noise"));
    output = netD(fake.detach());
    Tensor errD_fake = criterion(output, full({batch_size}, 0.0, o));
    errD_fake.backward();
    const Tensor errD = errD_real + errD_fake;
    optimizerD.step();
    netG.zero_grad();
    output = netD(fake);
    Tensor errG = criterion(output, full({batch_size}, 1.0, o));
    errG.backward();
    optimizerG.step();
    t.check_loss(2 * step, errD);
    t.check_loss(2 * step + 1, errG);
  }
  t.check_final(holder);
}

}  // namespace
}  // namespace ember::test
