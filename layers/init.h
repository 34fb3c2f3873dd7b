// nn::init: in-place initialisation of parameters, outside autograd, with PyTorch's
// formulas (torch.nn.init), so that a model initialised here starts where PyTorch's would.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::nn {

void uniform_(const Tensor& t, double lo, double hi, Generator* gen = nullptr);
void normal_(const Tensor& t, double mean = 0, double stddev = 1, Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)); PyTorch's default
// a = sqrt(5) gives b = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& t, double a = 2.23606797749979, Generator* gen = nullptr);
// fan_in of a weight: dim 1 times the product of dims 2... ([out, in, kh, kw] -> in * kh * kw).
int64_t fan_in(const Tensor& weight);

// Xavier (Glorot), torch.nn.init's formulas: U(-b, b) with b = gain sqrt(6 / (fan_in +
// fan_out)), and N(0, gain sqrt(2 / (fan_in + fan_out))); fan_out is dim 0 times the
// product of dims 2... (the attention and transformer layers initialise with them).
void xavier_uniform_(const Tensor& t, double gain = 1, Generator* gen = nullptr);
void xavier_normal_(const Tensor& t, double gain = 1, Generator* gen = nullptr);

}  // namespace ember::nn
