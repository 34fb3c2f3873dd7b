// pytorch/examples' imagenet/main.py with its default --arch resnet18: SGD with momentum
// 0.9 and weight decay 1e-4, StepLR(30, 0.1) per epoch, cross entropy, top-1 and top-5
// accuracy on the validation set after each epoch. ImageNet is not on this machine:
// Fashion-MNIST stands in, each image resized to --image-size (random crops and flips as
// the original's training transforms) and repeated over the 3 input channels, 10 classes.
#include <cstdio>

#include "examples/pytorch/common.h"
#include "examples/pytorch/imagenet/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_imagenet", [&] {
    CLI::App app{"pytorch/examples' imagenet (ResNet-18) in ember, on Fashion-MNIST as 3-channel images"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 90;
    flags.batch_size = 256;
    flags.lr = 0.1;
    double momentum = 0.9, weight_decay = 1e-4;
    int64_t image_size = 64;
    ember::pt::add_flags(app, flags);
    app.add_option("--momentum", momentum, "momentum")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    app.add_option("--wd,--weight-decay", weight_decay, "weight decay")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    app.add_option("--image-size", image_size, "pixels a side the images are resized to")->check(CLI::Range(int64_t{32}, int64_t{1024}).description(""))->type_name("INT in [32, 1024]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    const ember::data::Transform rgb = [](const Tensor& b, ember::Generator&) {
      return b.expand({b.size(0), 3, b.size(2), b.size(3)}).contiguous();
    };
    const auto normalize = ember::data::normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
    const auto resize = ember::data::resize(image_size, image_size);
    ember::data::DataLoader train_loader(
        ember::pt::fashion_mnist(flags, true),
        {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed,
         .transforms = {resize, ember::data::random_crop(image_size, image_size / 8), ember::data::random_horizontal_flip(), rgb, normalize}});
    ember::data::DataLoader val_loader(ember::pt::fashion_mnist(flags, false),
                                       {.batch_size = flags.batch_size, .shuffle = false, .transforms = {resize, rgb, normalize}});
    auto model = pt_imagenet::resnet18(10);
    model->to(device);
    ember::nn::CrossEntropyLoss criterion;
    ember::optim::SGD optimizer(model->parameters(), {.lr = flags.lr, .momentum = momentum, .weight_decay = weight_decay});
    ember::optim::StepLR scheduler(optimizer, 30, 0.1);
    for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
      model->train();
      int64_t i = 0;
      for (const auto& batch : train_loader) {
        Tensor loss = criterion((*model)(batch.data.to(device)), batch.target.to(device));
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        if (i++ % 10 == 0) std::printf("Epoch: [%lld][%lld]\tLoss %.4e\n", static_cast<long long>(epoch), static_cast<long long>(i - 1), loss.item<double>());
        if (flags.dry_run) break;
      }
      model->eval();
      int64_t top1 = 0, top5 = 0, seen = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : val_loader) {
          const Tensor output = (*model)(batch.data.to(device));
          const std::vector<int64_t> target = batch.target.to_vector<int64_t>();
          const std::vector<int64_t> pred = ember::topk(output, 5, 1).second.to_vector<int64_t>();
          for (size_t r = 0; r < target.size(); ++r) {
            top1 += pred[r * 5] == target[r];
            for (size_t k = 0; k < 5; ++k) top5 += pred[r * 5 + k] == target[r];
          }
          seen += static_cast<int64_t>(target.size());
          if (flags.dry_run) break;
        }
      }
      std::printf(" * Acc@1 %.3f Acc@5 %.3f\n", 100.0 * top1 / seen, 100.0 * top5 / seen);
      scheduler.step();
    }
    return 0;
  });
}
