// Fashion-MNIST with a small convolutional network (examples/common/models.h), on images
// resized to --image-size pixels a side.
#include "base/program.h"
#include "examples/common/models.h"
#include "examples/common/train.h"

int main(int argc, char** argv) {
  return ember::run_program("ember_cnn", [&] {
    ember::examples::line_buffered_stdout();
    CLI::App app{"ember cnn: train a two-layer convolutional network on Fashion-MNIST"};
    app.failure_message(ember::cli_failure_message);
    ember::examples::TrainConfig config;
    ember::examples::add_train_flags(app, config);
    ember::examples::add_image_size_flag(app, config);
    CLI11_PARSE(app, argc, argv);
    const int64_t size = config.image_size;
    return ember::examples::train_main("cnn", config, [size] { return ember::examples::make_cnn(size); });
  });
}
