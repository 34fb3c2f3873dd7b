#include "examples/common/models.h"

namespace ember::examples {

using namespace nn;

std::shared_ptr<Sequential> make_mlp() {
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(784, 512), std::make_shared<ReLU>(),
      std::make_shared<Linear>(512, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
}

std::shared_ptr<Sequential> make_cnn(int64_t image_size) {
  const int64_t side = image_size / 2 / 2;  // after the two 2x2 max-pools (floor, as they round)
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(1, 32, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}),
      std::make_shared<Conv2d>(32, 64, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<Flatten>(),
      std::make_shared<Linear>(64 * side * side, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
}

}  // namespace ember::examples
