// Fashion-MNIST with a small convolutional network (examples/common/models.h).
#include "examples/common/models.h"
#include "examples/common/train.h"

int main(int argc, char** argv) {
  CLI::App app{"ember cnn: train a two-layer convolutional network on Fashion-MNIST"};
  ember::examples::TrainConfig config;
  ember::examples::add_train_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return ember::examples::train_main("cnn", config, ember::examples::make_cnn);
}
