// examples/pytorch/cpp_dcgan against its PyTorch twin (cpp_dcgan_twin.py): 2 steps of the
// original's loop on 2 images of 1x28x28 (the twin's real labels and noise), Adam (lr 2e-4,
// betas (0.5, 0.5)) for each network, binary cross entropy, batch norm in training mode.
// The twin's losses are d_loss, g_loss per step; its state dict is that of a holder of
// "generator" and "discriminator".
#include "examples/pytorch/cpp_dcgan/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

struct Holder : nn::Module {
  explicit Holder(int64_t noise_size)
      : generator(register_module("generator", std::make_shared<pt_cpp_dcgan::DCGANGenerator>(noise_size))),
        discriminator(register_module("discriminator", pt_cpp_dcgan::make_discriminator())) {}
  std::shared_ptr<pt_cpp_dcgan::DCGANGenerator> generator;
  std::shared_ptr<nn::Sequential> discriminator;
};

TEST(PyTorchTwin, CppDcgan) {
  const twin::Twin t = twin::load("cpp_dcgan");
  const auto& c = t.config;
  Holder holder(c.at("noise_size").get<int64_t>());
  t.init_module(holder);
  holder.train();
  auto& generator = *holder.generator;
  auto& discriminator = *holder.discriminator;
  const optim::Adam::Options o{
      .lr = c.at("lr").get<double>(), .beta1 = c.at("beta1").get<double>(), .beta2 = c.at("beta2").get<double>()};
  optim::Adam generator_optimizer(generator.parameters(), o);
  optim::Adam discriminator_optimizer(discriminator.parameters(), o);
  const TensorOptions f64(kFloat64, default_device());
  ASSERT_EQ(t.steps() % 2, 0);
  for (int64_t step = 0; step < t.steps() / 2; ++step) {
    const std::string s = "step" + std::to_string(step);
    const Tensor real_labels = t.at(s + ".real_labels");
    const int64_t n = real_labels.size(0);
    discriminator.zero_grad();
    Tensor real_output = discriminator(t.at(s + ".real_images")).reshape(real_labels.shape());
    Tensor d_loss_real = binary_cross_entropy(real_output, real_labels);
    d_loss_real.backward();
    const Tensor fake_images = generator(t.at(s + ".noise"));
    Tensor fake_output = discriminator(fake_images.detach()).reshape({n});
    Tensor d_loss_fake = binary_cross_entropy(fake_output, zeros({n}, f64));
    d_loss_fake.backward();
    const Tensor d_loss = d_loss_real + d_loss_fake;
    discriminator_optimizer.step();
    generator.zero_grad();
    fake_output = discriminator(fake_images).reshape({n});
    Tensor g_loss = binary_cross_entropy(fake_output, ones({n}, f64));
    g_loss.backward();
    generator_optimizer.step();
    t.check_loss(2 * step, d_loss);
    t.check_loss(2 * step + 1, g_loss);
  }
  t.check_final(holder);
}

}  // namespace
}  // namespace ember::test
