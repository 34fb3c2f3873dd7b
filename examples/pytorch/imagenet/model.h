// torchvision's ResNet-18 (torchvision/models/resnet.py, the BasicBlock variant), as
// pytorch/examples' imagenet/main.py builds it with models.resnet18(): parameter names,
// shapes and initialisation (Kaiming-normal fan_out for convolutions, ones and zeros for
// batch norms) as torchvision's, so state dicts map one to one.
#pragma once

#include <memory>
#include <vector>

#include "ember.h"

namespace pt_imagenet {

using ember::Tensor;
namespace nn = ember::nn;

// 3x3 convolution with padding, no bias.
inline std::shared_ptr<nn::Conv2d> conv3x3(int64_t in_planes, int64_t out_planes, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(in_planes, out_planes, nn::Pair{3, 3}, nn::Pair{stride, stride}, nn::Pair{1, 1},
                                      nn::Pair{1, 1}, 1, /*bias=*/false);
}
// 1x1 convolution, no bias.
inline std::shared_ptr<nn::Conv2d> conv1x1(int64_t in_planes, int64_t out_planes, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(in_planes, out_planes, nn::Pair{1, 1}, nn::Pair{stride, stride}, nn::Pair{0, 0},
                                      nn::Pair{1, 1}, 1, /*bias=*/false);
}

class BasicBlock : public nn::Callable<BasicBlock> {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride = 1, std::shared_ptr<nn::Sequential> downsample_ = nullptr)
      : conv1(register_module("conv1", conv3x3(inplanes, planes, stride))),
        bn1(register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes))),
        relu(register_module("relu", std::make_shared<nn::ReLU>())),
        conv2(register_module("conv2", conv3x3(planes, planes))),
        bn2(register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes))) {
    if (downsample_) downsample = register_module("downsample", std::move(downsample_));
  }
  Tensor forward(const Tensor& x) {
    Tensor identity = x;
    Tensor out = (*conv1)(x);
    out = (*bn1)(out);
    out = (*relu)(out);
    out = (*conv2)(out);
    out = (*bn2)(out);
    if (downsample) identity = (*downsample)(x);
    out = out + identity;
    return (*relu)(out);
  }
  std::string name() const override { return "BasicBlock"; }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Conv2d> conv2;
  std::shared_ptr<nn::BatchNorm2d> bn2;
  std::shared_ptr<nn::Sequential> downsample;
};

class ResNet : public nn::Callable<ResNet> {
  int64_t inplanes_ = 64;  // first: make_layer reads and advances it while the layers are made

 public:
  explicit ResNet(const std::vector<int64_t>& layers, int64_t num_classes = 1000)
      : conv1(register_module("conv1", std::make_shared<nn::Conv2d>(3, 64, nn::Pair{7, 7}, nn::Pair{2, 2}, nn::Pair{3, 3},
                                                                    nn::Pair{1, 1}, 1, /*bias=*/false))),
        bn1(register_module("bn1", std::make_shared<nn::BatchNorm2d>(64))),
        relu(register_module("relu", std::make_shared<nn::ReLU>())),
        maxpool(register_module("maxpool", std::make_shared<nn::MaxPool2d>(ember::Pool2dOptions{
                                               .kernel_size = {3, 3}, .stride = nn::Pair{2, 2}, .padding = {1, 1}}))),
        layer1(register_module("layer1", make_layer(64, layers.at(0)))),
        layer2(register_module("layer2", make_layer(128, layers.at(1), 2))),
        layer3(register_module("layer3", make_layer(256, layers.at(2), 2))),
        layer4(register_module("layer4", make_layer(512, layers.at(3), 2))),
        avgpool(register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(nn::Pair{1, 1}))),
        fc(register_module("fc", std::make_shared<nn::Linear>(512 * BasicBlock::expansion, num_classes))) {
    for (const auto& m : modules()) {
      if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(m)) {
        nn::init::kaiming_normal_(conv->weight, {.mode = nn::init::FanMode::FanOut, .nonlinearity = nn::init::Nonlinearity::ReLU});
      } else if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m)) {
        nn::init::constant_(bn->weight, 1);
        nn::init::constant_(bn->bias, 0);
      }
    }
  }
  Tensor forward(const Tensor& input) {
    Tensor x = (*conv1)(input);
    x = (*bn1)(x);
    x = (*relu)(x);
    x = (*maxpool)(x);
    x = (*layer1)(x);
    x = (*layer2)(x);
    x = (*layer3)(x);
    x = (*layer4)(x);
    x = (*avgpool)(x);
    x = x.flatten(1);
    return (*fc)(x);
  }
  std::string name() const override { return "ResNet"; }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;

 private:
  std::shared_ptr<nn::Sequential> make_layer(int64_t planes, int64_t blocks, int64_t stride = 1) {
    std::shared_ptr<nn::Sequential> downsample;
    if (stride != 1 || inplanes_ != planes * BasicBlock::expansion) {
      downsample = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          conv1x1(inplanes_, planes * BasicBlock::expansion, stride), std::make_shared<nn::BatchNorm2d>(planes * BasicBlock::expansion)});
    }
    auto layers = std::make_shared<nn::Sequential>();
    layers->push_back(std::make_shared<BasicBlock>(inplanes_, planes, stride, downsample));
    inplanes_ = planes * BasicBlock::expansion;
    for (int64_t i = 1; i < blocks; ++i) layers->push_back(std::make_shared<BasicBlock>(inplanes_, planes));
    return layers;
  }
};

inline std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000) {
  return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2}, num_classes);
}

}  // namespace pt_imagenet
