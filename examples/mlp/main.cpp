// Fashion-MNIST with a multilayer perceptron: 784-512-256-10 with ReLU.
#include "examples/common/models.h"
#include "examples/common/train.h"

int main(int argc, char** argv) {
  ember::examples::line_buffered_stdout();
  CLI::App app{"ember mlp: train a 784-512-256-10 MLP on Fashion-MNIST"};
  ember::examples::TrainConfig config;
  ember::examples::add_train_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return ember::examples::train_main("mlp", config, ember::examples::make_mlp);
}
