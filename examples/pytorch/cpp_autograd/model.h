// libtorch's cpp/autograd (pytorch/examples): higher-order gradients (a gradient penalty
// on a Linear layer, through autograd::grad with create_graph) and custom autograd
// functions (LinearFunction, MulConstant), written with ember's autograd.
#pragma once

#include <vector>

#include "ember.h"

namespace pt_cpp_autograd {

using ember::Tensor;
namespace nn = ember::nn;

// MSE loss plus the penalty (|d output / d input|_2 per row - 1)^2, averaged. The original
// passes `true` as grad's fourth argument, which in libtorch (as in ember) is retain_graph,
// not create_graph, so its penalty is a constant; here create_graph is set as its comment
// intends, and the penalty's gradient reaches the weights (double backward through linear).
inline Tensor combined_loss(nn::Linear& model, const Tensor& input, const Tensor& target) {
  const Tensor output = model(input);
  const Tensor loss = nn::MSELoss()(output, target);
  const Tensor grad_output = ember::ones_like(output);
  const Tensor gradient = ember::autograd::grad({output}, {input}, {grad_output}, std::nullopt,
                                                /*create_graph=*/true)[0];
  const Tensor gradient_penalty = ember::pow(gradient.norm(2, {1}) - 1, 2).mean();
  return loss + gradient_penalty;
}

// LinearFunction::apply: input [N, in] @ weight [out, in]^T (+ bias), with the hand-written
// backward of the original.
inline Tensor linear_function(const Tensor& input, const Tensor& weight, const Tensor& bias = {}) {
  Tensor output;
  {
    ember::NoGradGuard no_grad;
    output = input.matmul(weight.t());
    if (bias.defined()) output = output + bias.unsqueeze(0).expand_as(output);
  }
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  const auto backward = [input, weight, bias](const Tensor& grad_output) {
    std::vector<Tensor> grads{grad_output.matmul(weight), grad_output.t().matmul(input)};
    if (bias.defined()) grads.push_back(grad_output.sum({0}));
    return grads;
  };
  return ember::autograd::custom_function("LinearFunction", inputs, output, backward);
}

// MulConstant::apply: tensor * constant, backward grad * constant.
inline Tensor mul_constant(const Tensor& tensor, double constant) {
  Tensor output;
  {
    ember::NoGradGuard no_grad;
    output = tensor * constant;
  }
  return ember::autograd::custom_function("MulConstant", {tensor}, output, [constant](const Tensor& grad_output) {
    return std::vector<Tensor>{grad_output * constant};
  });
}

}  // namespace pt_cpp_autograd
