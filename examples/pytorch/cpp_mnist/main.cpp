// libtorch's cpp/mnist on Fashion-MNIST: SGD (lr 0.01, momentum 0.5), batches of 64 in
// order (the original's SequentialSampler), the test set's average loss and accuracy after
// each epoch.
#include <cstdio>

#include "examples/pytorch/common.h"
#include "examples/pytorch/cpp_mnist/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_cpp_mnist", [&] {
    CLI::App app{"libtorch's cpp/mnist in ember: a small CNN on Fashion-MNIST with SGD"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 10;
    flags.lr = 0.01;
    double momentum = 0.5;
    ember::pt::add_flags(app, flags);
    app.add_option("--momentum", momentum, "SGD momentum")->check(ember::pt::finite_range(0.0, 1.0))
        ->type_name("FLOAT in [0, 1]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    const auto normalize = ember::data::normalize({ember::pt::kFashionMean}, {ember::pt::kFashionStd});
    ember::data::DataLoader train_loader(ember::pt::fashion_mnist(flags, true),
                                         {.batch_size = flags.batch_size, .shuffle = false, .transforms = {normalize}});
    ember::data::DataLoader test_loader(ember::pt::fashion_mnist(flags, false),
                                        {.batch_size = 1000, .shuffle = false, .transforms = {normalize}});
    auto model = std::make_shared<pt_cpp_mnist::Net>();
    model->to(device);
    ember::optim::SGD optimizer(model->parameters(), {.lr = flags.lr, .momentum = momentum});
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      model->train();
      int64_t batch_idx = 0, seen = 0;
      for (const auto& batch : train_loader) {
        const Tensor data = batch.data.to(device), targets = batch.target.to(device);
        optimizer.zero_grad();
        Tensor output = (*model)(data);
        Tensor loss = ember::nn::functional::nll_loss(output, targets);
        loss.backward();
        optimizer.step();
        seen += data.size(0);
        if (batch_idx++ % 10 == 0)
          std::printf("Train Epoch: %lld [%5lld] Loss: %.4f\n", static_cast<long long>(epoch), static_cast<long long>(seen),
                      loss.item<double>());
        if (flags.dry_run) break;
      }
      model->eval();
      double test_loss = 0;
      int64_t correct = 0, tested = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : test_loader) {
          const Tensor data = batch.data.to(device), targets = batch.target.to(device);
          const Tensor output = (*model)(data);
          test_loss += ember::nn::functional::nll_loss(output, targets, {.reduction = ember::Reduction::Sum}).item<double>();
          correct += output.argmax(1).eq(targets).sum().item<int64_t>();
          tested += targets.numel();
          if (flags.dry_run) break;
        }
      }
      std::printf("Test set: Average loss: %.4f | Accuracy: %.3f\n", test_loss / tested, static_cast<double>(correct) / tested);
    }
    return 0;
  });
}
