// libtorch's cpp/dcgan on Fashion-MNIST: images normalized to [-1, 1], batches of 64 in
// order, Adam (lr 2e-4, betas (0.5, 0.5)) for both networks, real labels drawn in
// [0.8, 1), binary cross entropy. Every --checkpoint-every batches it writes each network
// with its optimizer (generator-checkpoint.safetensors, discriminator-checkpoint.safetensors:
// ember's checkpoints, where the original's torch::save writes a model and an optimizer
// file each) and 10 samples, (G(z) + 1) / 2, as dcgan-sample-<n>.safetensors; with
// --restore-from-checkpoint it starts from those files (the original's
// kRestoreFromCheckpoint).
#include <cstdio>
#include <string>

#include "examples/pytorch/common.h"
#include "examples/pytorch/cpp_dcgan/model.h"

using ember::Tensor;
using pt_cpp_dcgan::kNoiseSize;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_cpp_dcgan", [&] {
    CLI::App app{"libtorch's cpp/dcgan in ember: a DCGAN on Fashion-MNIST"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 30;
    flags.lr = 2e-4;
    int64_t checkpoint_every = 200, samples_per_checkpoint = 10;
    bool restore = false;
    ember::pt::add_flags(app, flags);
    app.add_option("--checkpoint-every", checkpoint_every, "batches between checkpoints")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40).description(""))->type_name("INT in [1, 1099511627776]")->capture_default_str();
    app.add_flag("--restore-from-checkpoint", restore, "start from the checkpoints in the working folder");
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;
    const ember::TensorOptions on_device(ember::kFloat32, device);

    auto generator = std::make_shared<pt_cpp_dcgan::DCGANGenerator>(kNoiseSize);
    generator->to(device);
    auto discriminator = pt_cpp_dcgan::make_discriminator();
    discriminator->to(device);

    ember::data::DataLoader data_loader(ember::pt::fashion_mnist(flags, true),
                                        {.batch_size = flags.batch_size, .shuffle = false,
                                         .transforms = {ember::data::normalize({0.5}, {0.5})}});
    const int64_t batches_per_epoch = data_loader.batches_per_epoch();

    ember::optim::Adam generator_optimizer(generator->parameters(), {.lr = flags.lr, .beta1 = 0.5, .beta2 = 0.5});
    ember::optim::Adam discriminator_optimizer(discriminator->parameters(), {.lr = flags.lr, .beta1 = 0.5, .beta2 = 0.5});

    if (restore) {
      ember::optim::load_checkpoint("generator-checkpoint.safetensors", *generator, &generator_optimizer);
      ember::optim::load_checkpoint("discriminator-checkpoint.safetensors", *discriminator, &discriminator_optimizer);
    }

    int64_t checkpoint_counter = 1;
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      int64_t batch_index = 0;
      for (const auto& batch : data_loader) {
        // Train discriminator with real images.
        discriminator->zero_grad();
        const Tensor real_images = batch.data.to(device);
        const int64_t n = real_images.size(0);
        const Tensor real_labels = ember::rand({n}, on_device) * 0.2 + 0.8;  // uniform in [0.8, 1)
        Tensor real_output = (*discriminator)(real_images).reshape(real_labels.shape());
        Tensor d_loss_real = ember::binary_cross_entropy(real_output, real_labels);
        d_loss_real.backward();

        // Train discriminator with fake images.
        const Tensor noise = ember::randn({n, kNoiseSize, 1, 1}, on_device);
        const Tensor fake_images = (*generator)(noise);
        Tensor fake_labels = ember::zeros({n}, on_device);
        Tensor fake_output = (*discriminator)(fake_images.detach()).reshape(fake_labels.shape());
        Tensor d_loss_fake = ember::binary_cross_entropy(fake_output, fake_labels);
        d_loss_fake.backward();

        const Tensor d_loss = d_loss_real + d_loss_fake;
        discriminator_optimizer.step();

        // Train generator.
        generator->zero_grad();
        fake_labels = ember::ones({n}, on_device);
        fake_output = (*discriminator)(fake_images).reshape(fake_labels.shape());
        Tensor g_loss = ember::binary_cross_entropy(fake_output, fake_labels);
        g_loss.backward();
        generator_optimizer.step();
        batch_index++;
        if (batch_index % 10 == 0 || flags.dry_run)
          std::printf("[%2lld/%2lld][%3lld/%3lld] D_loss: %.4f | G_loss: %.4f\n", static_cast<long long>(epoch),
                      static_cast<long long>(flags.epochs), static_cast<long long>(batch_index),
                      static_cast<long long>(batches_per_epoch), d_loss.item<double>(), g_loss.item<double>());

        if (batch_index % checkpoint_every == 0) {
          // Checkpoint the model and optimizer state.
          ember::optim::save_checkpoint("generator-checkpoint.safetensors", *generator, &generator_optimizer);
          ember::optim::save_checkpoint("discriminator-checkpoint.safetensors", *discriminator, &discriminator_optimizer);
          // Sample the generator and save the images.
          ember::NoGradGuard no_grad;
          const Tensor samples = (*generator)(ember::randn({samples_per_checkpoint, kNoiseSize, 1, 1}, on_device));
          ember::save_safetensors("dcgan-sample-" + std::to_string(checkpoint_counter) + ".safetensors",
                                  {{"samples", (samples + 1.0) / 2.0}});
          std::printf("-> checkpoint %lld\n", static_cast<long long>(++checkpoint_counter));
        }
        if (flags.dry_run) break;
      }
    }
    std::printf("Training complete!\n");
    return 0;
  });
}
