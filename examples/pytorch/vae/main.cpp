// pytorch/examples' vae/main.py on Fashion-MNIST: Adam (lr 1e-3), the summed loss per
// sample after each epoch on the training and the test set.
#include <cstdio>

#include "examples/pytorch/common.h"
#include "examples/pytorch/vae/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_vae", [&] {
    CLI::App app{"pytorch/examples' vae in ember: a variational autoencoder of Fashion-MNIST"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 10;
    flags.batch_size = 128;
    ember::pt::add_flags(app, flags);
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    ember::data::DataLoader train_loader(ember::pt::fashion_mnist(flags, true),
                                         {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed});
    ember::data::DataLoader test_loader(ember::pt::fashion_mnist(flags, false), {.batch_size = flags.batch_size, .shuffle = false});
    auto model = std::make_shared<pt_vae::VAE>();
    model->to(device);
    ember::optim::Adam optimizer(model->parameters(), {.lr = flags.lr});
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      model->train();
      double train_loss = 0;
      int64_t seen = 0;
      for (const auto& batch : train_loader) {
        const Tensor data = batch.data.to(device);
        optimizer.zero_grad();
        auto [recon_batch, mu, logvar] = (*model)(data);
        Tensor loss = pt_vae::loss_function(recon_batch, data, mu, logvar);
        loss.backward();
        train_loss += loss.item<double>();
        seen += data.size(0);
        optimizer.step();
        if (flags.dry_run) break;
      }
      std::printf("====> Epoch: %lld Average loss: %.4f\n", static_cast<long long>(epoch), train_loss / seen);
      model->eval();
      double test_loss = 0;
      int64_t tested = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : test_loader) {
          const Tensor data = batch.data.to(device);
          auto [recon_batch, mu, logvar] = (*model)(data);
          test_loss += pt_vae::loss_function(recon_batch, data, mu, logvar).item<double>();
          tested += data.size(0);
          if (flags.dry_run) break;
        }
      }
      std::printf("====> Test set loss: %.4f\n", test_loss / tested);
    }
    return 0;
  });
}
