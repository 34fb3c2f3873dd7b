// pytorch/examples' dcgan/main.py on Fashion-MNIST (nc 1; the original's LSUN, CIFAR-10 and
// image folders are not here): images resized to 64x64 and normalized to [-1, 1], Adam (lr
// 2e-4, betas (beta1, 0.999)) for both networks, BCE; the losses and D's outputs each step,
// and after each epoch both networks' state dicts in --outf (safetensors where the
// original's torch.save writes .pth). The original's sample images (torchvision's
// save_image) are not written.
#include <cstdio>
#include <filesystem>
#include <string>

#include "examples/pytorch/common.h"
#include "examples/pytorch/dcgan/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_dcgan", [&] {
    CLI::App app{"pytorch/examples' dcgan in ember: a DCGAN on Fashion-MNIST at 64x64"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 25;  // the original's --niter
    flags.lr = 2e-4;
    int64_t nz = 100, ngf = 64, ndf = 64;
    double beta1 = 0.5;
    std::string outf;
    ember::pt::add_flags(app, flags);
    app.add_option("--nz", nz, "size of the latent z vector")->check(CLI::Range(int64_t{1}, int64_t{4096}).description(""))
        ->type_name("INT in [1, 4096]")->capture_default_str();
    app.add_option("--ngf", ngf, "generator features")->check(CLI::Range(int64_t{1}, int64_t{4096}).description(""))
        ->type_name("INT in [1, 4096]")->capture_default_str();
    app.add_option("--ndf", ndf, "discriminator features")->check(CLI::Range(int64_t{1}, int64_t{4096}).description(""))
        ->type_name("INT in [1, 4096]")->capture_default_str();
    app.add_option("--beta1", beta1, "beta1 for adam")->check(ember::pt::finite_range(0.0, 1.0))
        ->type_name("FLOAT in [0, 1]")->capture_default_str();
    app.add_option("--outf", outf, "folder to write the model checkpoints to (default: none written)");
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;
    constexpr int64_t nc = 1, image_size = 64;

    ember::data::DataLoader dataloader(
        ember::pt::fashion_mnist(flags, true),
        {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed,
         .transforms = {ember::data::resize(image_size, image_size), ember::data::normalize({0.5}, {0.5})}});

    auto netG = std::make_shared<pt_dcgan::Generator>(nz, ngf, nc);
    netG->apply(pt_dcgan::weights_init);
    netG->to(device);
    auto netD = std::make_shared<pt_dcgan::Discriminator>(ndf, nc);
    netD->apply(pt_dcgan::weights_init);
    netD->to(device);
    const ember::nn::BCELoss criterion;
    const double real_label = 1, fake_label = 0;
    ember::optim::Adam optimizerD(netD->parameters(), {.lr = flags.lr, .beta1 = beta1, .beta2 = 0.999});
    ember::optim::Adam optimizerG(netG->parameters(), {.lr = flags.lr, .beta1 = beta1, .beta2 = 0.999});
    if (!outf.empty()) std::filesystem::create_directories(outf);

    for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
      int64_t i = 0;
      const int64_t batches = dataloader.batches_per_epoch();
      for (const auto& data : dataloader) {
        // (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        netD->zero_grad();
        const Tensor real = data.data.to(device);
        const int64_t batch_size = real.size(0);
        Tensor label = ember::full({batch_size}, real_label, ember::TensorOptions(real.dtype(), device));
        Tensor output = (*netD)(real);
        Tensor errD_real = criterion(output, label);
        errD_real.backward();
        const double D_x = output.mean().item<double>();

        const Tensor noise = ember::randn({batch_size, nz, 1, 1}, ember::TensorOptions(real.dtype(), device));
        const Tensor fake = (*netG)(noise);
        label = ember::full({batch_size}, fake_label, ember::TensorOptions(real.dtype(), device));
        output = (*netD)(fake.detach());
        Tensor errD_fake = criterion(output, label);
        errD_fake.backward();
        const double D_G_z1 = output.mean().item<double>();
        const Tensor errD = errD_real + errD_fake;
        optimizerD.step();

        // (2) Update G network: maximize log(D(G(z)))
        netG->zero_grad();
        label = ember::full({batch_size}, real_label, ember::TensorOptions(real.dtype(), device));  // fake labels are real for generator cost
        output = (*netD)(fake);
        Tensor errG = criterion(output, label);
        errG.backward();
        const double D_G_z2 = output.mean().item<double>();
        optimizerG.step();

        std::printf("[%lld/%lld][%lld/%lld] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f\n",
                    static_cast<long long>(epoch), static_cast<long long>(flags.epochs), static_cast<long long>(i++),
                    static_cast<long long>(batches), errD.item<double>(), errG.item<double>(), D_x, D_G_z1, D_G_z2);
        if (flags.dry_run) break;
      }
      // do checkpointing
      if (!outf.empty()) {
        ember::save_safetensors(outf + "/netG_epoch_" + std::to_string(epoch) + ".safetensors", netG->state_dict());
        ember::save_safetensors(outf + "/netD_epoch_" + std::to_string(epoch) + ".safetensors", netD->state_dict());
      }
    }
    return 0;
  });
}
