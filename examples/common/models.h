// The Fashion-MNIST examples' models, shared by the examples and their tests.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/layers.h"

namespace ember::examples {

// 784-512-256-10 with ReLU, on [N, 1, 28, 28] images.
std::shared_ptr<nn::Sequential> make_mlp();
// conv 1->32 3x3 pad 1, ReLU, max-pool 2, conv 32->64 3x3 pad 1, ReLU, max-pool 2,
// flatten, linear 64*(N/4)^2->128, ReLU, linear 128->10, on [N, 1, N, N] images (N = 28:
// the dataset's own size, linear 3136->128).
std::shared_ptr<nn::Sequential> make_cnn(int64_t image_size = 28);

}  // namespace ember::examples
