// Helpers the autograd tests share: a float64 leaf of seeded values, and gradgradcheck
// as a gtest assertion (its failure message names the input, element and values).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tests/core/reference.h"

namespace ember::test {

inline Tensor leaf(const Shape& shape, uint64_t seed, const std::function<double(double)>& map = {}) {
  Tensor t = random_tensor(shape, kFloat64, Layout::Contiguous, seed, map);
  t.requires_grad_();
  return t;
}

inline ::testing::AssertionResult gradgrad_ok(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                              const std::vector<Tensor>& inputs, double eps = 1e-6,
                                              double atol = 1e-5, double rtol = 1e-3) {
  try {
    gradgradcheck(fn, inputs, eps, atol, rtol);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ember::test
