#include "layers/linear.h"

#include <cmath>

#include "base/error.h"
#include "core/autograd.h"
#include "layers/init.h"

namespace ember::nn {
namespace {

// The weights, checked before they are allocated (the members bind to them first).
Tensor linear_weight(int64_t in, int64_t out) {
  EMBER_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  return empty({out, in});
}
Tensor embedding_weight(int64_t num, int64_t dim) {
  EMBER_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  return empty({num, dim});
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias)
    : weight(register_parameter("weight", linear_weight(in, out))),
      bias(register_parameter("bias", with_bias ? empty({out}) : Tensor())),
      in_(in),
      out_(out) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (with_bias) {
    const double b = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -b, b);
  }
}
Tensor Linear::forward(const Tensor& x, Activation act) { return ember::linear(x, weight, bias, act); }
std::string Linear::name() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias.defined() ? "true" : "false") + ")";
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx)
    : weight(register_parameter("weight", embedding_weight(num, dim))),
      num_(num),
      dim_(dim),
      padding_idx_(padding_idx) {
  if (padding_idx_) {
    if (*padding_idx_ < 0) *padding_idx_ += num;
    EMBER_CHECK(*padding_idx_ >= 0 && *padding_idx_ < num, "Embedding: padding_idx is out of range for ", num,
                " embeddings");
  }
  init::normal_(weight);
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
