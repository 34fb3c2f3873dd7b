// Fashion-MNIST with a multilayer perceptron: 784-512-256-10 with ReLU.
#include "examples/common/train.h"

int main(int argc, char** argv) {
  CLI::App app{"ember mlp: train a 784-512-256-10 MLP on Fashion-MNIST"};
  ember::examples::TrainConfig config;
  ember::examples::add_train_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  using namespace ember::nn;
  return ember::examples::train_main("mlp", config, [] {
    return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
        std::make_shared<Flatten>(), std::make_shared<Linear>(784, 512), std::make_shared<ReLU>(),
        std::make_shared<Linear>(512, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
  });
}
