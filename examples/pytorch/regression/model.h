// libtorch's cpp/regression (pytorch/examples): fit a degree-4 polynomial with one Linear
// layer on the features x, x^2, x^3, x^4, with SGD and the smooth L1 loss.
#pragma once

#include <memory>
#include <vector>

#include "ember.h"

namespace pt_regression {

using ember::Tensor;
constexpr int64_t kPolyDegree = 4;

// [x, x^2, x^3, x^4] of a 1-D x, as columns.
inline Tensor make_features(Tensor x) {
  x = x.unsqueeze(1);
  std::vector<Tensor> xs;
  for (int64_t i = 0; i < kPolyDegree; ++i) xs.push_back(x.pow(i + 1));
  return ember::cat(xs, 1);
}

// The function to learn.
inline Tensor f(const Tensor& x, const Tensor& W_target, const Tensor& b_target) {
  return x.matmul(W_target) + b_target.item();
}

inline std::shared_ptr<ember::nn::Linear> make_model() {
  return std::make_shared<ember::nn::Linear>(kPolyDegree, 1);
}

}  // namespace pt_regression
