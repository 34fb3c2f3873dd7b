// pytorch/examples' vision_transformer/main.py on Fashion-MNIST (the original: CIFAR-10,
// 3 channels): images resized to --img-size, Adam with weight decay, cross entropy; the
// training and validation loss per epoch. The original's defaults (a ViT-Base at 224
// pixels) take hours on a CPU: try --img-size 28 --patch-size 7 --latent-size 64
// --num-heads 4 --num-encoders 2.
#include <cstdio>

#include "examples/pytorch/common.h"
#include "examples/pytorch/vision_transformer/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_vision_transformer", [&] {
    CLI::App app{"pytorch/examples' vision_transformer in ember: a ViT on Fashion-MNIST"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 10;
    flags.lr = 1e-2;
    flags.batch_size = 4;
    pt_vit::Args args;
    args.n_channels = 1;
    int64_t img_size = 224;
    double weight_decay = 3e-2;
    ember::pt::add_flags(app, flags);
    app.add_option("--patch-size", args.patch_size, "patch size for images")->check(CLI::Range(int64_t{1}, int64_t{4096}).description(""))->type_name("INT in [1, 4096]")->capture_default_str();
    app.add_option("--latent-size", args.latent_size, "latent size")->check(CLI::Range(int64_t{1}, int64_t{65536}).description(""))->type_name("INT in [1, 65536]")->capture_default_str();
    app.add_option("--num-heads", args.num_heads, "attention heads")->check(CLI::Range(int64_t{1}, int64_t{1024}).description(""))->type_name("INT in [1, 1024]")->capture_default_str();
    app.add_option("--num-encoders", args.num_encoders, "encoder blocks")->check(CLI::Range(int64_t{1}, int64_t{1024}).description(""))->type_name("INT in [1, 1024]")->capture_default_str();
    app.add_option("--dropout", args.dropout, "dropout value")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    app.add_option("--img-size", img_size, "image size to be reshaped to")->check(CLI::Range(int64_t{1}, int64_t{4096}).description(""))->type_name("INT in [1, 4096]")->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "weight decay value")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    args.batch_size = flags.batch_size;
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    // The class token has one row per sample of a full batch: the last, partial one is dropped.
    const ember::data::DataLoaderOptions load{.batch_size = flags.batch_size, .shuffle = true, .drop_last = true,
                                              .seed = flags.seed, .transforms = {ember::data::resize(img_size, img_size)}};
    ember::data::DataLoader train_loader(ember::pt::fashion_mnist(flags, true), load);
    ember::data::DataLoader valid_loader(ember::pt::fashion_mnist(flags, false), load);
    auto model = std::make_shared<pt_vit::ViT>(args);
    model->to(device);
    ember::optim::Adam optimizer(model->parameters(), {.lr = flags.lr, .weight_decay = weight_decay});
    ember::nn::CrossEntropyLoss criterion;
    for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
      model->train();
      double total_loss = 0;
      int64_t batches = 0;
      for (const auto& batch : train_loader) {
        optimizer.zero_grad();
        Tensor loss = criterion((*model)(batch.data.to(device)), batch.target.to(device));
        loss.backward();
        optimizer.step();
        total_loss += loss.item<double>();
        ++batches;
        if (flags.dry_run) break;
      }
      std::printf("EPOCH[TRAIN]%lld/%lld Loss: %.6f\n", static_cast<long long>(epoch + 1), static_cast<long long>(flags.epochs), total_loss / batches);
      model->eval();
      double valid_loss = 0;
      int64_t valid_batches = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : valid_loader) {
          valid_loss += criterion((*model)(batch.data.to(device)), batch.target.to(device)).item<double>();
          ++valid_batches;
          if (flags.dry_run) break;
        }
      }
      std::printf("EPOCH[VALID]%lld/%lld Loss: %.6f\n", static_cast<long long>(epoch + 1), static_cast<long long>(flags.epochs), valid_loss / valid_batches);
    }
    return 0;
  });
}
