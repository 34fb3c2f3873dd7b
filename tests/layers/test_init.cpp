// nn::init against PyTorch (nn_init.safetensors, tests/refcases/nn_init_twin.py): the gains
// and fans PyTorch computes, each distribution's bound and spread (ember draws from its own
// generator, so its samples are checked against PyTorch's formula values with sampling
// tolerances), Householder QR against torch.linalg.qr, orthogonality of orthogonal_, and
// eye_ / dirac_ value for value; bad arguments as errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/core/reference.h"

#ifndef EMBER_REFCASES_DIR
#define EMBER_REFCASES_DIR "tests/refcases"
#endif

namespace ember::test {
namespace {

namespace init = nn::init;
using nlohmann::json;

SafetensorsFile twin() { return load_safetensors(std::string(EMBER_REFCASES_DIR) + "/nn_init.safetensors"); }

init::Nonlinearity nonlinearity(const std::string& n) {
  static const std::vector<std::pair<std::string, init::Nonlinearity>> names = {
      {"linear", init::Nonlinearity::Linear}, {"conv1d", init::Nonlinearity::Conv1d},
      {"conv2d", init::Nonlinearity::Conv2d}, {"conv3d", init::Nonlinearity::Conv3d},
      {"conv_transpose1d", init::Nonlinearity::ConvTranspose1d},
      {"conv_transpose2d", init::Nonlinearity::ConvTranspose2d},
      {"conv_transpose3d", init::Nonlinearity::ConvTranspose3d}, {"sigmoid", init::Nonlinearity::Sigmoid},
      {"tanh", init::Nonlinearity::Tanh}, {"relu", init::Nonlinearity::ReLU},
      {"leaky_relu", init::Nonlinearity::LeakyReLU}, {"selu", init::Nonlinearity::SELU}};
  for (const auto& [k, v] : names)
    if (k == n) return v;
  ADD_FAILURE() << "unknown nonlinearity " << n;
  return init::Nonlinearity::Linear;
}

TEST(Init, GainsAreTorchs) {
  const SafetensorsFile f = twin();
  const json gains = json::parse(f.metadata.at("gains"));
  const std::vector<double> want = f.at("gains").to_vector<double>();
  ASSERT_EQ(gains.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::optional<double> param = gains[i][1].is_null() ? std::nullopt : std::optional(gains[i][1].get<double>());
    EXPECT_NEAR(init::calculate_gain(nonlinearity(gains[i][0]), param), want[i], 1e-15 * want[i]) << gains[i];
  }
  EXPECT_EMBER_ERROR(init::calculate_gain(init::Nonlinearity::LeakyReLU, NAN), "calculate_gain", "not a valid number");
}

TEST(Init, FansAreTorchs) {
  const SafetensorsFile f = twin();
  const json shapes = json::parse(f.metadata.at("fan_shapes"));
  const std::vector<int64_t> fans = f.at("fans").to_vector<int64_t>();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [in, out] = init::calculate_fan_in_and_fan_out(empty(shapes[i].get<Shape>()));
    EXPECT_EQ(in, fans[2 * i]) << shapes[i];
    EXPECT_EQ(out, fans[2 * i + 1]) << shapes[i];
  }
  EXPECT_EMBER_ERROR(init::calculate_fan_in_and_fan_out(empty({4})), "calculate_fan_in_and_fan_out", "at least 2 dims",
                     "[4]");
}

struct Moments {
  double mean = 0, std = 0, min = 0, max = 0, max_abs = 0;
};
Moments moments(const Tensor& t) {
  const std::vector<double> v = values(t);
  Moments m{0, 0, v[0], v[0], 0};
  for (double x : v) {
    m.mean += x / static_cast<double>(v.size());
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.max_abs = std::max(m.max_abs, std::fabs(x));
  }
  for (double x : v) m.std += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size() - 1);
  m.std = std::sqrt(m.std);
  return m;
}

// Tolerances from the sample size n (never from one run's values), 6 standard errors. For
// U(-b, b) a sample std estimates b / sqrt(3) with relative standard error
// sqrt(Var(x^2)) / (2 E[x^2] sqrt(n)) = sqrt(4/45) / (2/3) / 2 / sqrt(n) = 0.447 / sqrt(n),
// taken as 0.5 / sqrt(n); for a normal 1 / sqrt(2n) (a truncated normal's is smaller).
// The maximum of n uniform draws is above b (1 - 20 / n) except with probability e^-20.
// A mean is within 6 std / sqrt(n).
TEST(Init, DistributionsMatchTorchsFormulas) {
  const SafetensorsFile f = twin();
  const int64_t cases = std::stoll(f.metadata.at("num_cases"));
  ASSERT_EQ(cases, 13);
  Generator gen(30);
  for (int64_t i = 0; i < cases; ++i) {
    const json c = json::parse(f.metadata.at("case" + std::to_string(i)));
    SCOPED_TRACE(c.dump());
    const std::string op = c.at("op");
    const std::string key = "case" + std::to_string(i) + ".";
    Tensor w = empty(c.at("shape").get<Shape>());  // float32, on the test device
    const double n = static_cast<double>(w.numel());
    if (op == "xavier_uniform_") init::xavier_uniform_(w, c.at("gain").get<double>(), &gen);
    if (op == "xavier_normal_") init::xavier_normal_(w, c.at("gain").get<double>(), &gen);
    if (op.rfind("kaiming", 0) == 0) {
      const init::KaimingOptions o{.a = c.at("a").get<double>(),
                                   .mode = c.at("mode") == "fan_in" ? init::FanMode::FanIn : init::FanMode::FanOut,
                                   .nonlinearity = nonlinearity(c.at("nonlinearity"))};
      if (op == "kaiming_uniform_") init::kaiming_uniform_(w, o, &gen);
      else init::kaiming_normal_(w, o, &gen);
    }
    if (op == "trunc_normal_")
      init::trunc_normal_(w, c.at("mean").get<double>(), c.at("std").get<double>(), c.at("a").get<double>(),
                          c.at("b").get<double>(), &gen);
    const Moments m = moments(w);
    const double std = f.at(key + "std").item<double>();
    if (op.find("uniform") != std::string::npos) {
      const double bound = f.at(key + "bound").item<double>();
      EXPECT_LE(m.max_abs, bound * (1 + 1e-6));  // float32 rounding of the draw
      EXPECT_GE(m.max_abs, bound * (1 - 20 / n));
      EXPECT_NEAR(m.std, std, 6 * 0.5 / std::sqrt(n) * std);
      EXPECT_NEAR(m.mean, 0, 6 * std / std::sqrt(n));
    } else if (op == "trunc_normal_") {
      EXPECT_GE(m.min, c.at("a").get<double>());
      EXPECT_LE(m.max, c.at("b").get<double>());
      const double mean = f.at(key + "mean").item<double>();
      EXPECT_NEAR(m.mean, mean, 6 * std / std::sqrt(n));
      EXPECT_NEAR(m.std, std, 6 / std::sqrt(2 * n) * std);
    } else {
      EXPECT_NEAR(m.std, std, 6 / std::sqrt(2 * n) * std);
      EXPECT_NEAR(m.mean, 0, 6 * std / std::sqrt(n));
    }
    // PyTorch's own draw of the same shape, through the same checks: the formulas agree.
    EXPECT_NEAR(f.at(key + "torch_std").item<double>(), std, 6 / std::sqrt(n) * std);
  }
}

TEST(Init, ConstantsAndTheirErrors) {
  const Tensor t = empty({2, 3}).requires_grad_();  // a parameter: written outside autograd
  init::constant_(t, 2.5);
  EXPECT_EQ(values(t), std::vector<double>(6, 2.5));
  init::zeros_(t);
  EXPECT_EQ(values(t), std::vector<double>(6, 0.0));
  EXPECT_EQ(&init::ones_(t), &t);
  EXPECT_EQ(values(t), std::vector<double>(6, 1.0));
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}, kInt64)), "uniform_", "floating tensor", "int64");
  EXPECT_EMBER_ERROR(init::uniform_(t, 1, 0), "uniform_", "a <= b");
  EXPECT_EMBER_ERROR(init::normal_(t, 0, -1), "normal_", "std must be >= 0");
  EXPECT_EMBER_ERROR(init::trunc_normal_(t, 0, 1, 2, -2), "trunc_normal_", "a < b");
  EXPECT_EMBER_ERROR(init::xavier_uniform_(empty({5})), "fan in and fan out", "[5]");
  EXPECT_EMBER_ERROR(init::kaiming_normal_(empty({5})), "at least 2 dims");
  EXPECT_EMBER_ERROR(init::orthogonal_(empty({5})), "orthogonal_", "2 or more dimensions");
  EXPECT_EMBER_ERROR(init::eye_(empty({2, 2, 2})), "eye_", "only 2-D");
  EXPECT_EMBER_ERROR(init::dirac_(empty({3, 3})), "dirac_", "3, 4 or 5 dims");
  EXPECT_EMBER_ERROR(init::dirac_(empty({3, 3, 3}), 2), "dirac_", "not divisible by groups=2");
  // A zero-element tensor is left alone (PyTorch: a no-op), a meta one only checked.
  EXPECT_NO_THROW(init::kaiming_uniform_(empty({0, 4})));
  EXPECT_NO_THROW(init::orthogonal_(empty({3, 4}, Device::meta())));
}

TEST(Init, HouseholderQrIsTorchsSignedQr) {
  const SafetensorsFile f = twin();
  const int64_t n = std::stoll(f.metadata.at("num_qr"));
  for (int64_t i = 0; i < n; ++i) {
    const std::string key = "qr" + std::to_string(i) + ".";
    const Tensor a = f.at(key + "a");
    SCOPED_TRACE(shape_str(a.shape()));
    const auto [q, r] = init::householder_qr(a);
    const Tensor wq = f.at(key + "q"), wr = f.at(key + "r");
    ASSERT_EQ(q.shape(), wq.shape());
    ASSERT_EQ(r.shape(), wr.shape());
    // Backward stable: errors of a few hundred units of roundoff of the matrix's size.
    const double tol = 1e-13 * std::max(a.size(0), a.size(1));
    EXPECT_TRUE(all_close(q, wq, 0, tol));
    EXPECT_TRUE(all_close(r, wr, 0, tol * 10));
    EXPECT_TRUE(all_close(matmul(q, r), a, 0, tol * 10));
  }
  EXPECT_EMBER_ERROR(init::householder_qr(empty({3, 3})), "householder_qr", "float64 CPU");
}

// W W^T (or W^T W for tall ones) = gain^2 I, up to the float32 rounding of W: each element
// moves by at most u = 2^-24 relatively, so an entry w_i . w_k moves by at most
// 2u |w_i| |w_k| = 2u gain^2 (Cauchy-Schwarz; rows of norm gain); 4u leaves room for the
// float64 QR's own error (~1e-15).
TEST(Init, OrthogonalIsOrthogonalAndScaled) {
  for (const Shape& shape : {Shape{6, 10}, Shape{10, 6}, Shape{4, 3, 2, 2}, Shape{1, 5}, Shape{7, 7}}) {
    SCOPED_TRACE(shape_str(shape));
    for (double gain : {1.0, 2.0}) {
      Tensor w = empty(shape);
      init::orthogonal_(w, gain);
      const Tensor m = w.reshape({shape[0], -1}).to(Device::cpu(), kFloat64);
      const int64_t rows = m.size(0), cols = m.size(1);
      const Tensor gram = rows <= cols ? matmul(m, m.t()) : matmul(m.t(), m);
      const int64_t k = std::min(rows, cols);
      const Tensor want = mul(eye(k, k, kFloat64), Scalar(gain * gain));
      EXPECT_TRUE(all_close(gram, want.to(Device::cpu()), 0, 4 * 0x1p-24 * gain * gain));
    }
  }
}

TEST(Init, EyeAndDiracAreTorchs) {
  const SafetensorsFile f = twin();
  const int64_t n = std::stoll(f.metadata.at("num_exact"));
  for (int64_t i = 0; i < n; ++i) {
    const json e = json::parse(f.metadata.at("exact" + std::to_string(i)));
    SCOPED_TRACE(e.dump());
    Tensor w = full(e.at("shape").get<Shape>(), 7.0);
    if (e.at("op") == "eye_") init::eye_(w);
    else init::dirac_(w, e.at("groups").get<int64_t>());
    EXPECT_EQ(values(w), values(f.at("exact" + std::to_string(i) + ".out")));
  }
}

TEST(Init, TheSameGeneratorGivesTheSameDrawsOnEveryDevice) {
  Generator a(9), b(9);
  Tensor x = empty({5, 7}), y = empty({5, 7}, Device::cpu());
  init::trunc_normal_(x, 0, 1, -2, 2, &a);
  init::trunc_normal_(y, 0, 1, -2, 2, &b);
  EXPECT_EQ(values(x), values(y));
  init::orthogonal_(x, 1, &a);
  init::orthogonal_(y, 1, &b);
  EXPECT_EQ(values(x), values(y));
}

}  // namespace
}  // namespace ember::test
