// pytorch/examples' super_resolution/main.py, with Fashion-MNIST standing in for BSDS300
// (not on this machine): the target is each image's centre crop of crop_size = 28 - 28 %
// upscale_factor pixels (the original's calculate_valid_crop_size on 256), the input that
// crop resized bilinearly to crop_size / upscale_factor (the original resizes the Y channel
// with PIL, whose downscaling also antialiases; Fashion-MNIST has one channel already).
// Adam (lr 0.01), MSE; the average PSNR on the test set after each epoch, and with --outf
// a checkpoint there (model_epoch_<n>.safetensors; the original writes model_epoch_<n>.pth
// in the working folder).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "examples/pytorch/common.h"
#include "examples/pytorch/super_resolution/model.h"

using ember::Tensor;

namespace {

// (input, target) of a batch of [B, 1, 28, 28] images in [0, 1].
std::pair<Tensor, Tensor> input_and_target(const Tensor& images, int64_t upscale_factor) {
  const int64_t side = images.size(2), crop_size = side - side % upscale_factor, off = (side - crop_size) / 2;
  Tensor target = images.narrow(2, off, crop_size).narrow(3, off, crop_size).contiguous();
  const int64_t small = crop_size / upscale_factor;
  Tensor input = ember::interpolate(target, {.size = std::pair{small, small}, .mode = ember::InterpolateMode::kBilinear});
  return {input, target};
}

}  // namespace

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_super_resolution", [&] {
    CLI::App app{"pytorch/examples' super_resolution in ember: a sub-pixel CNN upscaling Fashion-MNIST crops"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 2;
    flags.lr = 0.01;
    flags.seed = 123;
    int64_t upscale_factor = 3, test_batch_size = 10;
    std::string outf;
    ember::pt::add_flags(app, flags);
    app.add_option("--upscale-factor", upscale_factor, "super resolution upscale factor")
        ->check(CLI::Range(int64_t{1}, int64_t{14}).description(""))->type_name("INT in [1, 14]")->capture_default_str();
    app.add_option("--test-batch-size", test_batch_size, "testing batch size")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20).description(""))->type_name("INT in [1, 1048576]")->capture_default_str();
    app.add_option("--outf", outf, "folder to write a checkpoint to after each epoch (default: none written)");
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    std::printf("===> Loading datasets\n");
    ember::data::DataLoader training_data_loader(ember::pt::fashion_mnist(flags, true),
                                                 {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed});
    ember::data::DataLoader testing_data_loader(ember::pt::fashion_mnist(flags, false),
                                                {.batch_size = test_batch_size, .shuffle = false});

    std::printf("===> Building model\n");
    auto model = std::make_shared<pt_super_resolution::Net>(upscale_factor);
    model->to(device);
    const ember::nn::MSELoss criterion;
    ember::optim::Adam optimizer(model->parameters(), {.lr = flags.lr});

    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      double epoch_loss = 0;
      int64_t iteration = 0;
      const int64_t batches = training_data_loader.batches_per_epoch();
      for (const auto& batch : training_data_loader) {
        const auto [input, target] = input_and_target(batch.data.to(device), upscale_factor);
        optimizer.zero_grad();
        Tensor loss = criterion((*model)(input), target);
        epoch_loss += loss.item<double>();
        loss.backward();
        optimizer.step();
        std::printf("===> Epoch[%lld](%lld/%lld): Loss: %.4f\n", static_cast<long long>(epoch), static_cast<long long>(++iteration),
                    static_cast<long long>(batches), loss.item<double>());
        if (flags.dry_run) break;
      }
      std::printf("===> Epoch %lld Complete: Avg. Loss: %.4f\n", static_cast<long long>(epoch), epoch_loss / iteration);

      double avg_psnr = 0;
      int64_t tested = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : testing_data_loader) {
          const auto [input, target] = input_and_target(batch.data.to(device), upscale_factor);
          const double mse = criterion((*model)(input), target).item<double>();
          avg_psnr += 10 * std::log10(1 / mse);
          ++tested;
          if (flags.dry_run) break;
        }
      }
      std::printf("===> Avg. PSNR: %.4f dB\n", avg_psnr / tested);

      if (!outf.empty()) {
        std::filesystem::create_directories(outf);
        const std::string model_out_path = outf + "/model_epoch_" + std::to_string(epoch) + ".safetensors";
        ember::optim::save_checkpoint(model_out_path, *model, nullptr);
        std::printf("Checkpoint saved to %s\n", model_out_path.c_str());
      }
    }
    return 0;
  });
}
