// libtorch's twin of examples/cnn.
#include "bench/peers/peer_train.h"

struct CnnImpl : torch::nn::Module {
  torch::nn::Conv2d c1{torch::nn::Conv2dOptions(1, 32, 3).padding(1)};
  torch::nn::Conv2d c2{torch::nn::Conv2dOptions(32, 64, 3).padding(1)};
  torch::nn::Linear l1{3136, 128}, l2{128, 10};
  CnnImpl() {
    register_module("c1", c1);
    register_module("c2", c2);
    register_module("l1", l1);
    register_module("l2", l2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    return l2(torch::relu(l1(x.flatten(1))));
  }
};
TORCH_MODULE(Cnn);

int main(int argc, char** argv) {
  peers::Args a = peers::parse(argc, argv);
  torch::manual_seed(a.seed);
  return peers::run(a, Cnn());
}
