// The cross-entropy kernels (kernels/cuda/cross_entropy.cuh) against
// nn::functional::cross_entropy on float64 CPU tensors holding exactly the values the
// kernel read: awkward shapes, rows that are not 16-byte aligned, logits of magnitude 1e4,
// ignore_index and out-of-range targets, the deterministic mean.
//
// Tolerances: bounds on |kernel - exact| derived from the kernels' arithmetic, per element
// (cross_entropy_bounds), as test_softmax.cpp's are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/cross_entropy.cuh"
#include "layers/functional.h"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace test;

namespace nnf = ember::nn::functional;

// Targets in [0, c), every fifth row ignore_index (-100), reproducible from the seed.
std::vector<int64_t> random_targets(int64_t n, int64_t c, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = i % 5 == 3 ? -100 : int64_t(rng() % uint64_t(c));
  return t;
}

struct CpuCrossEntropy {
  std::vector<double> loss;   // per row (reduction none)
  double mean = 0, sum = 0;
  std::vector<double> dmean;  // d mean / d logits
  std::vector<double> dnone;  // d sum(loss * g) / d logits
};

// nn::functional::cross_entropy on float64 CPU tensors, and its autograd gradients.
CpuCrossEntropy cpu_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& t,
                                  const std::vector<double>& g, int64_t n, int64_t c) {
  CpuCrossEntropy r;
  const Tensor target = tensor(std::vector<double>(t.begin(), t.end()), {n}, kInt64);
  for (auto red : {nnf::Reduction::None, nnf::Reduction::Mean, nnf::Reduction::Sum}) {
    const Tensor X = tensor(x, {n, c}, kFloat64);
    X.requires_grad_();
    nnf::LossOptions options;
    options.reduction = red;
    const Tensor loss = nnf::cross_entropy(X, target, options);
    if (red == nnf::Reduction::None) {
      r.loss = loss.to_vector<double>();
      loss.backward(tensor(g, {n}, kFloat64));
      r.dnone = X.grad().to_vector<double>();
    } else if (red == nnf::Reduction::Mean) {
      r.mean = loss.item();
      loss.backward();
      r.dmean = X.grad().to_vector<double>();
    } else {
      r.sum = loss.item();
    }
  }
  return r;
}

std::string ce_where(RowVariant v, int64_t n, int64_t c) {
  return std::string("cross_entropy variant ") + rowwise::row_variant_name(v) + " [" + std::to_string(n) + ", " +
         std::to_string(c) + "]";
}

// Bounds on |kernel - exact| of the cross-entropy outputs. With M a row's max, t_k =
// exp(x_k - M), S = sum t_k, L = log S and p_k = t_k / S:
//  * S as the online softmax builds it (test_softmax.cpp's forward_bound): a thread's terms,
//    each with its own exp and its chunk's rescale (a multiply and an exp), then the merge
//    levels (5 for a warp, 10 for a block), so |S^ - S| / S <= gamma_{d_S} + u sum t_k
//    (M - x_k) / S, and L^ adds log's kLog ulps of L;
//  * loss = L^ - (x_t - M): the subtraction inside (u |x_t - M|) and the final one (u |loss|);
//  * the sum adds the rows' losses in chains of at most n + 10 (per block, then the
//    reduction's tree), the mean one division more;
//  * dx = (exp((x - M) - L^) - onehot) g: the exponent's two subtractions (u |x - M|,
//    u |log p|) and L^'s error, exp's kExp ulps, then two roundings (subtraction,
//    multiply) of |p - onehot| |g|, g's own rounding (grad / count), and the store to T;
// plus the float64 reference's gamma_{c+10} (2^-53) of the same magnitudes.
struct CrossEntropyBounds {
  std::vector<double> loss, dnone, dmean;
  double sum = 0, mean = 0;
};
template <class T>
CrossEntropyBounds cross_entropy_bounds(const std::vector<double>& x, const std::vector<int64_t>& t,
                                        const std::vector<double>& g, int64_t n, int64_t c, RowVariant v,
                                        const CpuCrossEntropy& want) {
  const double u = compute_roundoff<T>(), uT = store_roundoff<T>(), ref = gamma_n(double(c) + 10, std::ldexp(1.0, -53));
  const CrossEntropyPlan p = cross_entropy_config(n, c, int(sizeof(T)), true, v);
  const int64_t lanes = p.block_per_row ? int64_t(p.cfg.block.x) : 32;
  const double levels = p.block_per_row ? 10 : 5, per_thread = double((c + lanes - 1) / lanes + 2);
  const double d_s = kExpRoundings + per_thread * (2 + kExpRoundings) + levels * (2 + kExpRoundings);
  CrossEntropyBounds b{std::vector<double>(size_t(n), 0.0), std::vector<double>(size_t(n * c), 0.0),
                       std::vector<double>(size_t(n * c), 0.0)};
  const double count = double(std::count_if(t.begin(), t.end(), [](int64_t i) { return i != -100; }));
  double abs_sum = 0, e_sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (t[size_t(r)] == -100) continue;
    const double* xr = x.data() + r * c;
    const double m = *std::max_element(xr, xr + c);
    double s = 0, spread = 0;
    for (int64_t k = 0; k < c; ++k) {
      const double e = std::exp(xr[k] - m);
      s += e;
      spread += e * (m - xr[k]);
    }
    const double log_s = std::log(s), e_log = gamma_n(d_s, u) + u * spread / s + gamma_n(kLogRoundings, u) * log_s;
    const double l = std::abs(want.loss[size_t(r)]), xt = m - xr[t[size_t(r)]];
    b.loss[size_t(r)] = e_log + u * xt + u * l + ref * (l + log_s + xt);
    abs_sum += l;
    e_sum += b.loss[size_t(r)];
    for (int64_t k = 0; k < c; ++k) {
      const size_t i = size_t(r * c + k);
      const double pk = std::exp(xr[k] - m - log_s), diff = std::abs(pk - (k == t[size_t(r)] ? 1 : 0));
      const double e_p = pk * (gamma_n(kExpRoundings, u) + u * (m - xr[k]) + u * (m - xr[k] + log_s) + e_log);
      for (int mean = 0; mean < 2; ++mean) {
        const double gr = mean ? 1 / count : std::abs(g[size_t(r)]);
        const double computed = gr * (e_p + gamma_n(2, u) * (diff + e_p)) + (mean ? u * gr * (diff + e_p) : 0);
        const double dx = std::abs(mean ? want.dmean[i] : want.dnone[i]);
        (mean ? b.dmean : b.dnone)[i] = computed + uT * (dx + computed) + ref * gr * (pk + 1) + kAtol<T>;
      }
    }
  }
  b.sum = gamma_n(double(n) + 10, u) * abs_sum + e_sum + ref * abs_sum;
  b.mean = count > 0 ? b.sum / count + u * std::abs(want.mean) : 0;
  return b;
}

template <class T>
void check_cross_entropy(const std::vector<double>& x_in, int64_t n, int64_t c, RowVariant v, uint32_t seed,
                         size_t offset_x = 0, size_t offset_dx = 0) {
  using A = compute_t<T>;
  const auto x = rounded<T>(x_in);
  const auto t = random_targets(n, c, seed);
  const auto g = rounded<A>(random_doubles(n, seed + 1, -1, 1));
  const DeviceArray<T> logits(from_doubles<T>(x), offset_x);
  const DeviceArray<int64_t> target(t);
  DeviceArray<A> loss(n), stats(2 * n), reduced(1), total(1), grad_rows(from_doubles<A>(g)), one(std::vector<A>{1});
  DeviceArray<unsigned char> workspace(cross_entropy_workspace_bytes<T>(n, c, v));
  DeviceArray<T> dx_none(n * c, offset_dx), dx_mean(n * c, offset_dx);

  cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kSum,
                        nullptr, 0.0, reduced.data(), total.data(), workspace.data(), nullptr, v);
  const double got_sum = to_double(reduced.host()[0]);
  cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kMean,
                        nullptr, 0.0, reduced.data(), total.data(), workspace.data(), nullptr, v);
  cross_entropy_backward(logits.data(), target.data(), stats.data(), grad_rows.data(), nullptr, nullptr, nullptr, 0.0,
                         dx_none.data(), n, c, -100, LossReduction::kNone, nullptr, v);
  cross_entropy_backward(logits.data(), target.data(), stats.data(), one.data(), total.data(), nullptr, nullptr, 0.0,
                         dx_mean.data(), n, c, -100, LossReduction::kMean, nullptr, v);
  const std::string at = ce_where(v, n, c);
  int64_t counted = 0;
  for (int64_t i : t) counted += i != -100;
  EXPECT_EQ(to_double(total.host()[0]), double(counted)) << at;
  if (n == 0) {
    EXPECT_TRUE(std::isnan(to_double(reduced.host()[0]))) << at << ": the mean of no rows is NaN";
    EXPECT_EQ(got_sum, 0.0) << at;
    return;
  }
  const CpuCrossEntropy want = cpu_cross_entropy(x, t, g, n, c);
  const CrossEntropyBounds bound = cross_entropy_bounds<T>(x, t, g, n, c, v, want);
  EXPECT_TRUE(all_within(loss.host(), want.loss, bound.loss)) << at << " loss";
  EXPECT_TRUE(all_within(reduced.host(), {want.mean}, {bound.mean})) << at << " mean";
  EXPECT_TRUE(all_within(std::vector<double>{got_sum}, {want.sum}, {bound.sum})) << at << " sum";
  EXPECT_TRUE(all_within(dx_none.host(), want.dnone, bound.dnone)) << at << " dlogits (none)";
  EXPECT_TRUE(all_within(dx_mean.host(), want.dmean, bound.dmean)) << at << " dlogits (mean)";
}

const std::vector<RowVariant> kCrossEntropyVariants = {RowVariant::kWarp, RowVariant::kBlock};

TEST(CudaSoftmax, CrossEntropyMatchesCpu) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 700;
  for (RowVariant v : kCrossEntropyVariants)
    for (int64_t n : {0, 1, 3, 70})
      for (int64_t c : kAwkwardSizes) {
        if (c == 0 || (n == 70 && c > 33)) continue;
        const auto x = random_doubles(n * c, seed++, -4, 4);
        check_cross_entropy<float>(x, n, c, v, seed);
        if (n == 3) {
          check_cross_entropy<__nv_bfloat16>(x, n, c, v, seed);
          check_cross_entropy<__half>(x, n, c, v, seed);
          check_cross_entropy<double>(x, n, c, v, seed);
        }
      }
}

TEST(CudaSoftmax, CrossEntropyRowsNotAlignedAndLogitsOf1e4) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 800;
  for (RowVariant v : kCrossEntropyVariants)
    for (int64_t c : {int64_t(33), int64_t(1023), int64_t(4096)}) {
      const int64_t n = 5;
      const auto x = random_doubles(n * c, seed++, -4, 4);
      check_cross_entropy<float>(x, n, c, v, seed, 1, 1);  // both views shifted alike: peeled rows
      check_cross_entropy<float>(x, n, c, v, seed, 1, 0);  // shifted differently: scalar backward
      check_cross_entropy<__nv_bfloat16>(x, n, c, v, seed, 3, 0);
      auto big = random_doubles(n * c, seed++, -8, 0);
      for (int64_t i = 0; i < n * c; ++i) big[i] += (i / c) % 2 ? -1e4 : 1e4;
      check_cross_entropy<float>(big, n, c, v, seed);
    }
}

// Ignored rows: loss 0, gradient 0, left out of the mean; all ignored: the mean is NaN
// (0 / 0, as PyTorch) and the gradient 0. A target out of range: Note [Out-of-range targets].
TEST(CudaSoftmax, CrossEntropyIgnoredAndOutOfRangeTargets) {
  EMBER_NEED_DEVICE();
  for (RowVariant v : kCrossEntropyVariants) {
    const int64_t n = 4, c = 10;
    const auto x = random_doubles(n * c, 900, -2, 2);
    const DeviceArray<float> logits(from_doubles<float>(x));
    DeviceArray<float> loss(n), stats(2 * n), reduced(1), total(1), one(std::vector<float>{1}), dx(n * c);
    DeviceArray<unsigned char> workspace(cross_entropy_workspace_bytes<float>(n, c, v));
    const auto run = [&](const std::vector<int64_t>& t, int64_t ignore_index) {
      const DeviceArray<int64_t> target(t);
      cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, ignore_index,
                            LossReduction::kMean, nullptr, 0.0, reduced.data(), total.data(), workspace.data(), nullptr,
                            v);
      cross_entropy_backward(logits.data(), target.data(), stats.data(), one.data(), total.data(), nullptr, nullptr,
                             0.0, dx.data(), n, c, ignore_index, LossReduction::kMean, nullptr, v);
    };
    const std::string at = ce_where(v, n, c);

    run({-100, -100, -100, -100}, -100);
    EXPECT_TRUE(std::isnan(reduced.host()[0])) << at;
    EXPECT_EQ(total.host()[0], 0.0f) << at;
    for (float l : loss.host()) EXPECT_EQ(l, 0.0f) << at;
    for (float d : dx.host()) EXPECT_EQ(d, 0.0f) << at;

    run({2, 7, 9, 3}, 7);  // another ignore_index: row 1 ignored, -100 is not special
    EXPECT_EQ(total.host()[0], 3.0f) << at;
    EXPECT_EQ(loss.host()[1], 0.0f) << at;
    const auto d1 = dx.host();
    for (int64_t j = 0; j < c; ++j) EXPECT_EQ(d1[c + j], 0.0f) << at;

    run({2, 10, -1, 3}, -100);  // rows 1 and 2 out of range
    const auto l = loss.host();
    const auto d = dx.host();
    EXPECT_TRUE(std::isfinite(l[0]) && std::isfinite(l[3])) << at;
    EXPECT_TRUE(std::isnan(l[1]) && std::isnan(l[2])) << at;
    EXPECT_TRUE(std::isnan(reduced.host()[0])) << at;
    for (int64_t j = 0; j < c; ++j) {
      EXPECT_TRUE(std::isfinite(d[j]) && std::isfinite(d[3 * c + j])) << at;
      EXPECT_TRUE(std::isnan(d[c + j]) && std::isnan(d[2 * c + j])) << at;
    }
  }
}

// The mean is the same bits on every run (per-block partials summed in a fixed order).
TEST(CudaSoftmax, CrossEntropyMeanIsDeterministic) {
  EMBER_NEED_DEVICE();
  const int64_t n = 2000, c = 7;
  const auto x = rounded<float>(random_doubles(n * c, 1000, -3, 3));
  const auto t = random_targets(n, c, 1001);
  const DeviceArray<float> logits(from_doubles<float>(x));
  const DeviceArray<int64_t> target(t);
  DeviceArray<float> loss(n), stats(2 * n), reduced(1), total(1);
  DeviceArray<unsigned char> workspace(cross_entropy_workspace_bytes<float>(n, c));
  std::vector<float> means;
  for (int run = 0; run < 3; ++run) {
    cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kMean,
                          nullptr, 0.0, reduced.data(), total.data(), workspace.data(), nullptr);
    means.push_back(reduced.host()[0]);
  }
  EXPECT_EQ(means[0], means[1]);
  EXPECT_EQ(means[0], means[2]);
  const std::vector<double> ones(size_t(n), 1.0);
  const CpuCrossEntropy want = cpu_cross_entropy(x, t, ones, n, c);
  EXPECT_TRUE(all_within(std::vector<float>{means[0]}, {want.mean},
                         {cross_entropy_bounds<float>(x, t, ones, n, c, RowVariant::kAuto, want).mean}));
}

TEST(CudaSoftmax, CrossEntropyBadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> x(40), loss(4), stats(8);
  DeviceArray<int64_t> t(4);
  std::string err;
  try {
    cross_entropy_forward(x.data(), t.data(), loss.data(), stats.data(), 4, 10, -100, LossReduction::kMean, nullptr,
                          0.0, nullptr, nullptr, nullptr, nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("cross_entropy: a mean or sum needs reduced, total_weight and workspace"), std::string::npos)
      << err;
  err.clear();
  try {
    cross_entropy_forward(x.data(), t.data(), loss.data(), stats.data(), 4, 10, -100, LossReduction::kNone, nullptr,
                          0.0, nullptr, nullptr, nullptr, nullptr, RowVariant::kStream);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("variant stream does not exist"), std::string::npos) << err;
}

}  // namespace
}  // namespace ember::kernels::cuda
