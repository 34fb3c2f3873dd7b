// Fashion-MNIST with a multilayer perceptron: 784-512-256-10 with ReLU.
#include "base/program.h"
#include "examples/common/models.h"
#include "examples/common/train.h"

int main(int argc, char** argv) {
  return ember::run_program("ember_mlp", [&] {
    ember::examples::line_buffered_stdout();
    CLI::App app{"ember mlp: train a 784-512-256-10 MLP on Fashion-MNIST"};
    app.failure_message(ember::cli_failure_message);
    ember::examples::TrainConfig config;
    ember::examples::add_train_flags(app, config);
    CLI11_PARSE(app, argc, argv);
    return ember::examples::train_main("mlp", config, ember::examples::make_mlp);
  });
}
