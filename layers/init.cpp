// nn::init (layers/init.h): PyTorch's initialisation formulas. The plain distributions are
// core's ops; trunc_normal_'s inverse CDF and orthogonal_'s QR run in float64 on the CPU
// (init routines, run once, not ops that need kernels) and are copied to the tensor.
#include "layers/init.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn::init {
namespace {

void check_floating(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": the tensor is undefined");
  EMBER_CHECK(is_floating(t.dtype()), op, ": expects a floating tensor, got ", dtype_name(t.dtype()));
}

// Writes float64 values (row-major, t's shape) into t, on its device and in its dtype.
const Tensor& assign(const Tensor& t, const std::vector<double>& values) {
  NoGradGuard no_grad;
  t.copy_(tensor(values, t.shape(), {t.dtype(), t.device()}));
  return t;
}

// The inverse of erf on [-1, 1]: Giles' approximation ("Approximating the erfinv
// function", 2010; about 1e-7 relative), then two Newton steps on erf(x) - y in double.
double erfinv(double y) {
  if (y <= -1) return -std::numeric_limits<double>::infinity();
  if (y >= 1) return std::numeric_limits<double>::infinity();
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      x = c + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      x = c + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  return x;
}

double norm_cdf(double x) { return (1 + std::erf(x / std::sqrt(2.0))) / 2; }

// s_k = v . col[k:], for a column of length m (what Householder applies).
double dot_tail(const double* v, const double* col, int64_t k, int64_t m) {
  double s = 0;
  for (int64_t i = k; i < m; ++i) s += v[i] * col[i];
  return s;
}
void axpy_tail(double a, const double* v, double* col, int64_t k, int64_t m) {
  for (int64_t i = k; i < m; ++i) col[i] += a * v[i];
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::Tanh:
      return 5.0 / 3;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: {
      const double slope = param.value_or(0.01);
      EMBER_CHECK(std::isfinite(slope), "calculate_gain: negative_slope ", slope, " is not a valid number");
      return std::sqrt(2.0 / (1 + slope * slope));
    }
    case Nonlinearity::SELU:
      return 3.0 / 4;
    default:  // the linear and convolution ones, and Sigmoid
      return 1;
  }
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() >= 2,
              "calculate_fan_in_and_fan_out: fan in and fan out need a tensor of at least 2 dims, got ",
              t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

const Tensor& constant_(const Tensor& t, double value) {
  EMBER_CHECK(t.defined(), "constant_: the tensor is undefined");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
const Tensor& zeros_(const Tensor& t) { return constant_(t, 0); }
const Tensor& ones_(const Tensor& t) { return constant_(t, 1); }

const Tensor& uniform_(const Tensor& t, double a, double b, Generator* gen) {
  check_floating("uniform_", t);
  EMBER_CHECK(a <= b, "uniform_: needs a <= b, got a=", a, " b=", b);
  NoGradGuard no_grad;
  t.copy_(add(mul(rand(t.shape(), {t.dtype(), t.device()}, gen), Scalar(b - a)), Scalar(a)));
  return t;
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* gen) {
  check_floating("normal_", t);
  EMBER_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  NoGradGuard no_grad;
  t.copy_(add(mul(randn(t.shape(), {t.dtype(), t.device()}, gen), Scalar(std)), Scalar(mean)));
  return t;
}

// PyTorch's method: u ~ U(2 cdf(alpha) - 1, 2 cdf(beta) - 1), x = mean + std sqrt(2)
// erfinv(u), clamped to [a, b] (which only rounding can leave).
const Tensor& trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_floating("trunc_normal_", t);
  EMBER_CHECK(std > 0 && a < b, "trunc_normal_: needs std > 0 and a < b, got std=", std, " a=", a, " b=", b);
  if (t.device().is_meta() || t.numel() == 0) return t;
  const double lo = 2 * norm_cdf((a - mean) / std) - 1, hi = 2 * norm_cdf((b - mean) / std) - 1;
  std::vector<double> v = rand(t.shape(), {kFloat64, Device::cpu()}, gen).to_vector<double>();
  for (double& x : v) x = std::clamp(mean + std * std::sqrt(2.0) * erfinv(lo + (hi - lo) * x), a, b);
  return assign(t, v);
}

const Tensor& xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -std::sqrt(3.0) * std, std::sqrt(3.0) * std, gen);
}

const Tensor& xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  return normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

namespace {
double kaiming_std(const Tensor& t, const KaimingOptions& o) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const int64_t fan = o.mode == FanMode::FanIn ? fan_in : fan_out;
  return calculate_gain(o.nonlinearity, o.a) / std::sqrt(static_cast<double>(std::max<int64_t>(fan, 1)));
}
}  // namespace

const Tensor& kaiming_uniform_(const Tensor& t, KaimingOptions o, Generator* gen) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, o);
  if (t.numel() == 0) return t;  // PyTorch: a no-op
  return uniform_(t, -bound, bound, gen);
}

const Tensor& kaiming_normal_(const Tensor& t, KaimingOptions o, Generator* gen) {
  const double std = kaiming_std(t, o);
  if (t.numel() == 0) return t;
  return normal_(t, 0, std, gen);
}

std::pair<Tensor, Tensor> householder_qr(const Tensor& a_in) {
  EMBER_CHECK(a_in.defined(), "householder_qr: the tensor is undefined");
  EMBER_CHECK(a_in.dim() == 2 && a_in.dtype() == kFloat64 && a_in.device().is_cpu(),
              "householder_qr: expects a 2-D float64 CPU tensor, got ", shape_str(a_in.shape()), " ",
              dtype_name(a_in.dtype()), " on ", a_in.device().str());
  const int64_t m = a_in.size(0), n = a_in.size(1), k = std::min(m, n);
  // Column-major copies: each reflection reads and updates whole column tails.
  const std::vector<double> rows = a_in.to_vector<double>();
  std::vector<double> r(static_cast<size_t>(m * n)), q(static_cast<size_t>(m * k), 0.0), v(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) r[j * m + i] = rows[i * n + j];
  std::vector<double> vnorm2(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) {
    // H = I - 2 v v^T / (v^T v) maps column c's tail x to (alpha, 0, ...), |alpha| = |x|,
    // alpha's sign opposite x[c]'s so that v = x - alpha e_c does not cancel.
    double* vc = &v[c * m];
    const double* x = &r[c * m];
    const double norm = std::sqrt(dot_tail(x, x, c, m));
    const double alpha = x[c] > 0 ? -norm : norm;
    for (int64_t i = c; i < m; ++i) vc[i] = x[i];
    vc[c] -= alpha;
    vnorm2[c] = dot_tail(vc, vc, c, m);
    if (vnorm2[c] == 0) continue;  // the tail is already zero
    for (int64_t j = c; j < n; ++j) axpy_tail(-2 * dot_tail(vc, &r[j * m], c, m) / vnorm2[c], vc, &r[j * m], c, m);
  }
  // Q = H_0 ... H_{k-1} applied to the first k columns of the identity, last reflection first.
  for (int64_t j = 0; j < k; ++j) q[j * m + j] = 1;
  for (int64_t c = k - 1; c >= 0; --c) {
    if (vnorm2[c] == 0) continue;
    const double* vc = &v[c * m];
    for (int64_t j = 0; j < k; ++j) axpy_tail(-2 * dot_tail(vc, &q[j * m], c, m) / vnorm2[c], vc, &q[j * m], c, m);
  }
  // Q S and S R with S = diag(sign(R_cc)): the same product, R's diagonal >= 0.
  std::vector<double> q_rows(static_cast<size_t>(m * k)), r_rows(static_cast<size_t>(k * n), 0.0);
  for (int64_t c = 0; c < k; ++c) {
    const double s = r[c * m + c] < 0 ? -1 : 1;
    for (int64_t i = 0; i < m; ++i) q_rows[i * k + c] = s * q[c * m + i];
    for (int64_t j = c; j < n; ++j) r_rows[c * n + j] = s * r[j * m + c];
  }
  return {tensor(q_rows, {m, k}, kFloat64), tensor(r_rows, {k, n}, kFloat64)};
}

const Tensor& orthogonal_(const Tensor& t, double gain, Generator* gen) {
  check_floating("orthogonal_", t);
  EMBER_CHECK(t.dim() >= 2, "orthogonal_: only tensors with 2 or more dimensions are supported, got ",
              shape_str(t.shape()));
  if (t.device().is_meta() || t.numel() == 0) return t;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  Tensor flat = randn({rows, cols}, {kFloat64, Device::cpu()}, gen);
  if (rows < cols) flat = flat.t();
  Tensor q = householder_qr(flat).first;
  if (rows < cols) q = q.t();
  return assign(t, mul(q, Scalar(gain)).to_vector<double>());
}

const Tensor& eye_(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() == 2, "eye_: only 2-D tensors are supported, got ",
              t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"));
  NoGradGuard no_grad;
  t.copy_(eye(t.size(0), t.size(1), {t.dtype(), t.device()}));
  return t;
}

const Tensor& dirac_(const Tensor& t, int64_t groups) {
  EMBER_CHECK(t.defined() && t.dim() >= 3 && t.dim() <= 5, "dirac_: only tensors of 3, 4 or 5 dims are supported, got ",
              t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"));
  EMBER_CHECK(groups > 0 && t.size(0) % groups == 0, "dirac_: dim 0 (", t.size(0), ") is not divisible by groups=",
              groups);
  if (t.device().is_meta() || t.numel() == 0) return t;
  const int64_t per_group = t.size(0) / groups, channels = std::min(per_group, t.size(1));
  std::vector<double> v(static_cast<size_t>(t.numel()), 0.0);
  int64_t centre = 0;  // the flat offset of the kernel's centre within one [in] slice
  for (int64_t d = 2; d < t.dim(); ++d) centre = centre * t.size(d) + t.size(d) / 2;
  const int64_t kernel = t.numel() / (t.size(0) * t.size(1));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t d = 0; d < channels; ++d) v[static_cast<size_t>(((g * per_group + d) * t.size(1) + d) * kernel + centre)] = 1;
  return assign(t, v);
}

}  // namespace ember::nn::init
