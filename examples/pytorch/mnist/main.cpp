// pytorch/examples' mnist/main.py on Fashion-MNIST: Adadelta (lr 1.0), StepLR(1, gamma 0.7)
// per epoch, the test set's average loss and accuracy after each epoch.
#include <cstdio>

#include "examples/pytorch/common.h"
#include "examples/pytorch/mnist/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_mnist", [&] {
    CLI::App app{"pytorch/examples' mnist in ember: a small CNN on Fashion-MNIST with Adadelta and StepLR"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 14;
    flags.lr = 1.0;
    double gamma = 0.7;
    ember::pt::add_flags(app, flags);
    app.add_option("--gamma", gamma, "learning rate step gamma")->check(ember::pt::finite_range(0.0, 1.0))
        ->type_name("FLOAT in [0, 1]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    const auto normalize = ember::data::normalize({ember::pt::kFashionMean}, {ember::pt::kFashionStd});
    ember::data::DataLoader train_loader(ember::pt::fashion_mnist(flags, true),
                                         {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed, .transforms = {normalize}});
    ember::data::DataLoader test_loader(ember::pt::fashion_mnist(flags, false),
                                        {.batch_size = 1000, .shuffle = false, .transforms = {normalize}});
    auto model = std::make_shared<pt_mnist::Net>();
    model->to(device);
    ember::optim::Adadelta optimizer(model->parameters(), {.lr = flags.lr});
    ember::optim::StepLR scheduler(optimizer, 1, gamma);
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      model->train();
      int64_t batch_idx = 0;
      for (const auto& batch : train_loader) {
        optimizer.zero_grad();
        Tensor output = (*model)(batch.data.to(device));
        Tensor loss = ember::nn::functional::nll_loss(output, batch.target.to(device));
        loss.backward();
        optimizer.step();
        if (batch_idx++ % 10 == 0) std::printf("Train Epoch: %lld [batch %lld]\tLoss: %.6f\n", static_cast<long long>(epoch), static_cast<long long>(batch_idx - 1), loss.item<double>());
        if (flags.dry_run) break;
      }
      model->eval();
      double test_loss = 0;
      int64_t correct = 0, seen = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : test_loader) {
          const Tensor target = batch.target.to(device);
          const Tensor output = (*model)(batch.data.to(device));
          test_loss += ember::nn::functional::nll_loss(output, target, {.reduction = ember::Reduction::Sum}).item<double>();
          correct += output.argmax(1).eq(target).sum().item<int64_t>();
          seen += target.numel();
          if (flags.dry_run) break;
        }
      }
      std::printf("Test set: Average loss: %.4f, Accuracy: %lld/%lld (%.0f%%)\n", test_loss / seen,
                  static_cast<long long>(correct), static_cast<long long>(seen), 100.0 * correct / seen);
      scheduler.step();
    }
    return 0;
  });
}
