// Fashion-MNIST with a small convolutional network:
// conv 1->32 3x3 pad 1, ReLU, max-pool 2, conv 32->64 3x3 pad 1, ReLU, max-pool 2,
// flatten, linear 64*(N/4)^2->128, ReLU, linear 128->10, for N x N images (--image-size; 28:
// the dataset's own, linear 3136->128).
#include "examples/common/train.h"

int main(int argc, char** argv) {
  CLI::App app{"ember cnn: train a two-layer convolutional network on Fashion-MNIST"};
  ember::examples::TrainConfig config;
  ember::examples::add_train_flags(app, config);
  ember::examples::add_image_size_flag(app, config);
  CLI11_PARSE(app, argc, argv);
  using namespace ember::nn;
  const int64_t side = config.image_size / 2 / 2;  // after the two 2x2 max-pools (floor, as they round)
  return ember::examples::train_main("cnn", config, [side] {
    return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
        std::make_shared<Conv2d>(1, 32, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}), std::make_shared<ReLU>(),
        std::make_shared<MaxPool2d>(ember::Pool2dOptions{.kernel_size = {2, 2}}),
        std::make_shared<Conv2d>(32, 64, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}), std::make_shared<ReLU>(),
        std::make_shared<MaxPool2d>(ember::Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<Flatten>(),
        std::make_shared<Linear>(64 * side * side, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
  });
}
