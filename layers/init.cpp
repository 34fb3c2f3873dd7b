#include "layers/init.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn {

void uniform_(const Tensor& t, double lo, double hi, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(add(mul(rand(t.shape(), {t.dtype(), t.device()}, gen), Scalar(hi - lo)), Scalar(lo)));
}

void normal_(const Tensor& t, double mean, double stddev, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(add(mul(randn(t.shape(), {t.dtype(), t.device()}, gen), Scalar(stddev)), Scalar(mean)));
}

int64_t fan_in(const Tensor& w) {
  EMBER_CHECK(w.dim() >= 2, "fan_in: needs a weight of at least 2 dims, got ", shape_str(w.shape()));
  int64_t f = w.size(1);
  for (int64_t d = 2; d < w.dim(); ++d) f *= w.size(d);
  return f;
}

void kaiming_uniform_(const Tensor& t, double a, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(fan_in(t), 1)));
  uniform_(t, -bound, bound, gen);
}

namespace {
double fan_sum(const Tensor& t) {
  EMBER_CHECK(t.dim() >= 2, "xavier init: needs a tensor of at least 2 dims, got ", shape_str(t.shape()));
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.size(d));
  return static_cast<double>(t.size(0) + t.size(1)) * receptive;
}
}  // namespace

void xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  const double b = gain * std::sqrt(6.0 / fan_sum(t));
  uniform_(t, -b, b, gen);
}

void xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  normal_(t, 0, gain * std::sqrt(2.0 / fan_sum(t)), gen);
}

}  // namespace ember::nn
