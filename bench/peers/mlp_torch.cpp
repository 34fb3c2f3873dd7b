// libtorch's twin of examples/mlp: 784-512-256-10 with ReLU.
#include "bench/peers/peer_train.h"

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear l1{784, 512}, l2{512, 256}, l3{256, 10};
  MlpImpl() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.flatten(1);
    return l3(torch::relu(l2(torch::relu(l1(x)))));
  }
};
TORCH_MODULE(Mlp);

int main(int argc, char** argv) {
  peers::Args a = peers::parse(argc, argv);
  torch::manual_seed(a.seed);
  return peers::run(a, Mlp());
}
