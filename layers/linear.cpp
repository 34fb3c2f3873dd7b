#include "layers/linear.h"

#include <cmath>

#include "base/error.h"
#include "core/autograd.h"
#include "layers/init.h"

namespace ember::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_(in), out_(out) {
  EMBER_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  weight = register_parameter("weight", empty({out, in}));
  kaiming_uniform_(weight);
  if (with_bias) {
    bias = register_parameter("bias", empty({out}));
    const double b = 1.0 / std::sqrt(static_cast<double>(in));
    uniform_(bias, -b, b);
  }
}
Tensor Linear::forward(const Tensor& x, Activation act) { return ember::linear(x, weight, bias, act); }
std::string Linear::name() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias.defined() ? "true" : "false") + ")";
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx)
    : num_(num), dim_(dim), padding_idx_(padding_idx) {
  EMBER_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  if (padding_idx_) {
    if (*padding_idx_ < 0) *padding_idx_ += num;
    EMBER_CHECK(*padding_idx_ >= 0 && *padding_idx_ < num, "Embedding: padding_idx is out of range for ", num,
                " embeddings");
  }
  weight = register_parameter("weight", empty({num, dim}));
  normal_(weight);
  if (padding_idx_) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx_).zero_();
  }
}
std::string Embedding::name() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

std::string Flatten::name() const {
  return "Flatten(start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_) + ")";
}

}  // namespace ember::nn
