// pytorch/examples' siamese_network/main.py: torchvision's ResNet-18 (examples/pytorch/
// imagenet/model.h) with a 1-channel first convolution and without its fc, applied to
// both images; the two feature vectors, concatenated, go through a small MLP and a
// sigmoid: the probability that the two images show the same class.
#pragma once

#include <memory>

#include "ember.h"
#include "examples/pytorch/imagenet/model.h"

namespace pt_siamese_network {

using ember::Tensor;
namespace nn = ember::nn;

class SiameseNetwork : public nn::Callable<SiameseNetwork> {
 public:
  SiameseNetwork() {
    auto resnet18 = pt_imagenet::resnet18();
    resnet18->conv1 = resnet18->replace_module(
        "conv1", std::make_shared<nn::Conv2d>(1, 64, nn::Pair{7, 7}, nn::Pair{2, 2}, nn::Pair{3, 3}, nn::Pair{1, 1}, 1, /*bias=*/false));
    fc_in_features = resnet18->fc->weight.size(1);
    // The ResNet's children but its last (fc), in order.
    resnet = register_module("resnet", std::make_shared<nn::Sequential>());
    const auto children = resnet18->children();
    for (size_t i = 0; i + 1 < children.size(); ++i) resnet->push_back(children[i]);
    fc = register_module("fc", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                   std::make_shared<nn::Linear>(fc_in_features * 2, 256), std::make_shared<nn::ReLU>(),
                                   std::make_shared<nn::Linear>(256, 1)}));
    sigmoid = register_module("sigmoid", std::make_shared<nn::Sigmoid>());
    resnet->apply(init_weights);
    fc->apply(init_weights);
  }

  static void init_weights(nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::xavier_uniform_(linear->weight);
      nn::init::constant_(linear->bias, 0.01);
    }
  }

  Tensor forward_once(const Tensor& x) {
    const Tensor output = (*resnet)(x);
    return output.view({output.size(0), -1});
  }
  Tensor forward(const Tensor& input1, const Tensor& input2) {
    const Tensor output1 = forward_once(input1);
    const Tensor output2 = forward_once(input2);
    Tensor output = ember::cat({output1, output2}, 1);
    output = (*fc)(output);
    return (*sigmoid)(output);
  }
  std::string name() const override { return "SiameseNetwork"; }

  int64_t fc_in_features = 0;
  std::shared_ptr<nn::Sequential> resnet, fc;
  std::shared_ptr<nn::Sigmoid> sigmoid;
};

}  // namespace pt_siamese_network
