// The normalization kernels (kernels/cuda/norm.cuh, batch_norm.cuh) against the CPU
// backend: nn::functional::layer_norm and its autograd gradients, ember::mean / var over
// N, H, W, all on float64 CPU tensors holding exactly the values the kernel read (inputs
// rounded to the kernel's dtype first); every variant of Note [Row variants], awkward
// shapes, views that are not 16-byte aligned, large offsets, and repeat runs for
// determinism.
//
// Tolerances: bounds on |kernel - exact| derived from each kernel's arithmetic, per
// element (layer_norm_bounds, layer_norm_backward_bounds, batch_norm_stats_bounds): the
// roundings of each step in the compute type, the longest chain of additions the launch
// plan makes, the store to the output type, and the float64 reference's own error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/norm.cuh"
#include "layers/functional.h"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace test;
namespace nnf = ember::nn::functional;

const std::vector<RowVariant> kVariants = {RowVariant::kWarp, RowVariant::kBlock, RowVariant::kStream};

struct RowsCols {
  int64_t rows, cols;
};
std::vector<RowsCols> shapes() {
  std::vector<RowsCols> s;
  for (int64_t rows : {0, 1, 3})
    for (int64_t cols : kAwkwardSizes)
      if (cols > 0) s.push_back({rows, cols});
  s.push_back({3, 256});
  s.push_back({2, 4096});
  s.push_back({300, 33});
  s.push_back({300, 4});
  return s;
}
// Whether the forced variant takes rows of cols elements of T (the backward's kBlock
// holds at most 16 values a thread; float64 half that).
template <class T>
bool variant_takes(RowVariant v, int64_t cols) {
  return (v != RowVariant::kWarp || cols <= rowwise::kMaxWarpRow) &&
         (v != RowVariant::kBlock || cols <= rowwise::block_variant_max_cols(sizeof(T), 16));
}

std::string where(const char* op, RowVariant v, int64_t rows, int64_t cols, bool affine) {
  return std::string(op) + " variant " + rowwise::row_variant_name(v) + " [" + std::to_string(rows) + ", " +
         std::to_string(cols) + "]" + (affine ? " affine" : "");
}

// --- Layer norm ------------------------------------------------------------------------------

constexpr double kEps = 1e-5;

struct LayerNormCase {
  std::vector<double> x, gamma, beta, dy;  // rounded to the kernel's dtype
};

template <class T>
LayerNormCase make_case(int64_t rows, int64_t cols, uint32_t seed, double offset = 0, double spread = 2) {
  LayerNormCase c;
  c.x = random_doubles(rows * cols, seed, offset - spread, offset + spread);
  c.x = rounded<T>(c.x);
  c.gamma = rounded<T>(random_doubles(cols, seed + 1, 0.5, 1.5));
  c.beta = rounded<T>(random_doubles(cols, seed + 2, -0.5, 0.5));
  c.dy = rounded<T>(random_doubles(rows * cols, seed + 3, -1, 1));
  return c;
}

struct CpuLayerNorm {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

// nn::functional::layer_norm in float64 on the CPU, and its autograd gradients for dy.
CpuLayerNorm cpu_layer_norm(const LayerNormCase& c, int64_t rows, int64_t cols, bool affine) {
  CpuLayerNorm r;
  if (rows == 0) return r;
  const Tensor X = tensor(c.x, {rows, cols}, kFloat64);
  Tensor W, B;
  X.requires_grad_();
  if (affine) {
    W = tensor(c.gamma, {cols}, kFloat64);
    B = tensor(c.beta, {cols}, kFloat64);
    W.requires_grad_();
    B.requires_grad_();
  }
  const Tensor Y = nnf::layer_norm(X, {cols}, W, B, kEps);
  r.y = Y.to_vector<double>();
  r.mean = mean(X.detach(), {-1}).to_vector<double>();
  r.rstd = rsqrt(add(var(X.detach(), {-1}, 0), Scalar(kEps))).to_vector<double>();
  Y.backward(tensor(c.dy, {rows, cols}, kFloat64));
  r.dx = X.grad().to_vector<double>();
  if (affine) {
    r.dgamma = W.grad().to_vector<double>();
    r.dbeta = B.grad().to_vector<double>();
  } else {  // what the kernel still reports as dgamma / dbeta: sums of dy * xhat and dy
    const Tensor xhat = mul(sub(X.detach(), mean(X.detach(), {-1}, true)),
                            rsqrt(add(var(X.detach(), {-1}, 0, true), Scalar(kEps))));
    const Tensor dY = tensor(c.dy, {rows, cols}, kFloat64);
    r.dgamma = sum(mul(dY, xhat), {0}).to_vector<double>();
    r.dbeta = sum(dY, {0}).to_vector<double>();
  }
  return r;
}


// The longest chain of additions in a row's sum under plan p: the terms a thread adds,
// then the merges across its lanes (a kWarp group's butterfly, or a block's 10 levels).
template <class T>
double row_sum_depth(const RowPlan& p, int64_t cols) {
  if (p.variant == RowVariant::kWarp) {
    const int kw = std::min(p.per_thread, 32);
    double d = p.per_thread / kw;
    for (int w = kw; w > 1; w /= 2) ++d;
    return d;
  }
  const int64_t threads = p.cfg.block.x, vec = 16 / int64_t(sizeof(T));
  return double(p.variant == RowVariant::kBlock ? p.per_thread : (cols + threads - 1) / threads + 2 * vec) + 10;
}

// Bounds on |kernel - exact| of layer norm's forward outputs, per row (mean, rstd) and
// per element (y). With n = cols, mu the mean, s2 the biased variance, r = 1/sqrt(s2 + eps),
// and d = per-thread terms + merge levels (10 for a block, log2 kW for kWarp) from the
// plan the kernel launches with:
//  * register variants (two passes): the sum of n values then the division,
//    e_mu = gamma_{d+1} mean|x|; x - mu^ rounds once and carries e_mu, but sum (x - mu)
//    = 0, so e_mu enters the squares only as n e_mu^2: e_s2 = gamma_{d+3} s2 + e_mu^2;
//  * kStream (Welford over x - x[0], Chan merges, then + x[0]): each update or merge is
//    at most 6 roundings of the shifted values' magnitudes (at most R = max|x - x[0]|):
//    e_mu = gamma_{6d} R + u |mu|, e_s2 = gamma_{6d} (s2 + R^2);
//  * r: eps rounded to the compute type (u eps), the addition of eps, sqrt (correctly rounded) and 1 / (exact division), three
//    roundings, plus half of s2's relative error: e_r = r (gamma_3 + e_s2 / (2 (s2 + eps)));
//  * y = (x - mu^) r^ g + b: |g| (r e_mu + |x - mu| (e_r + gamma_2 r)), the addition's
//    rounding u |y|, the store to T u_T |y|;
// plus the float64 reference's own gamma_{n+10} (2^-53) of the same magnitudes.
struct LayerNormBounds {
  std::vector<double> y, mean, rstd;
};
template <class T>
LayerNormBounds layer_norm_bounds(const LayerNormCase& c, int64_t rows, int64_t cols, RowVariant v, bool affine,
                                  const CpuLayerNorm& want) {
  const double u = compute_roundoff<T>(), uT = store_roundoff<T>(), ref = gamma_n(double(cols) + 10, std::ldexp(1.0, -53));
  const RowPlan p = layer_norm_config(rows, cols, int(sizeof(T)), true, true, v);  // vectors: the most a thread
  const double d = row_sum_depth<T>(p, cols);
  LayerNormBounds b{std::vector<double>(size_t(rows * cols)), std::vector<double>(size_t(rows)),
                    std::vector<double>(size_t(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = c.x.data() + r * cols;
    const double mu = want.mean[size_t(r)], rs = want.rstd[size_t(r)], s2 = 1 / (rs * rs) - kEps;
    double abs_mean = 0, spread = 0;
    for (int64_t k = 0; k < cols; ++k) {
      abs_mean += std::abs(x[k]) / double(cols);
      spread = std::max(spread, std::abs(x[k] - x[0]));
    }
    double e_mu, e_s2;
    if (p.variant == RowVariant::kStream) {
      e_mu = gamma_n(6 * d, u) * spread + u * std::abs(mu);
      e_s2 = gamma_n(6 * d, u) * (s2 + spread * spread);
    } else {
      e_mu = gamma_n(d + 1, u) * abs_mean;
      e_s2 = gamma_n(d + 3, u) * s2 + e_mu * e_mu;
    }
    e_s2 += u * kEps;  // eps rounded to the compute type
    const double e_r = rs * (gamma_n(3, u) + e_s2 / (2 * (s2 + kEps)));
    b.mean[size_t(r)] = e_mu + ref * abs_mean;
    b.rstd[size_t(r)] = e_r + ref * rs;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = size_t(r * cols + k);
      const double g = affine ? std::abs(c.gamma[size_t(k)]) : 1, y = std::abs(want.y[i]);
      const double dev = std::abs(x[k] - mu);
      const double computed = g * (rs * e_mu + dev * (e_r + gamma_n(2, u) * rs)) + gamma_n(1, u) * y;
      b.y[i] = computed + uT * (y + computed) +
               ref * (g * rs * (abs_mean + dev) + (affine ? std::abs(c.beta[size_t(k)]) : 0));
    }
  }
  return b;
}

// Bounds on |kernel - exact| of layer norm's backward, given the reference's mean and
// rstd rounded to the compute type (relative error u each). With g = dy * gamma (one
// rounding), xhat = (x - mu) r, n = cols and d = row_sum_depth of the backward's plan:
//  * xhat^ = (x - mu^) r^: e_xhat = r u |mu| + gamma_3 |xhat|;
//  * m1 = sum(g) * (1 / n), m2 = sum(g xhat^) * (1 / n): the sums of d-long chains plus
//    the terms' own errors, and two roundings more;
//  * dx = r^ (g - m1 - xhat^ m2): each input's error, three roundings of the inner terms'
//    magnitudes, two more for the product with r^, then the store to T;
//  * dgamma = sum over rows of dy xhat^, dbeta = sum of dy: chains of at most rows terms
//    (each block's rows, then the partial rows in order), then the store to T;
// plus the float64 reference's gamma_{n+rows+10} (2^-53) of the same magnitudes.
struct LayerNormBackwardBounds {
  std::vector<double> dx, dgamma, dbeta;
};
template <class T>
LayerNormBackwardBounds layer_norm_backward_bounds(const LayerNormCase& c, int64_t rows, int64_t cols, RowVariant v,
                                                   bool affine, const CpuLayerNorm& want) {
  using A = compute_t<T>;
  const double u = compute_roundoff<T>(), uT = store_roundoff<T>(), n = double(cols);
  const double ref = gamma_n(n + double(rows) + 10, std::ldexp(1.0, -53));
  const RowPlan p = layer_norm_backward_config(rows, cols, int(sizeof(T)), int(sizeof(A)), true, true, v);
  const double d = row_sum_depth<T>(p, cols);
  LayerNormBackwardBounds b{std::vector<double>(size_t(rows * cols)), std::vector<double>(size_t(cols), 0.0),
                            std::vector<double>(size_t(cols), 0.0)};
  std::vector<double> dg_abs(size_t(cols), 0.0), dg_err(size_t(cols), 0.0), db_abs(size_t(cols), 0.0);
  std::vector<double> g(static_cast<size_t>(cols)), xh(g.size()), e_xh(g.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = want.mean[size_t(r)], rs = want.rstd[size_t(r)];
    double s1 = 0, s2 = 0, abs1 = 0, abs2 = 0, e_terms2 = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = size_t(r * cols + k);
      xh[size_t(k)] = (c.x[i] - mu) * rs;
      e_xh[size_t(k)] = rs * u * std::abs(mu) + gamma_n(3, u) * std::abs(xh[size_t(k)]);
      g[size_t(k)] = c.dy[i] * (affine ? c.gamma[size_t(k)] : 1);
      s1 += g[size_t(k)];
      s2 += g[size_t(k)] * xh[size_t(k)];
      abs1 += std::abs(g[size_t(k)]);
      abs2 += std::abs(g[size_t(k)] * xh[size_t(k)]);
      e_terms2 += std::abs(g[size_t(k)]) * e_xh[size_t(k)];
      dg_abs[size_t(k)] += std::abs(c.dy[i] * xh[size_t(k)]);
      dg_err[size_t(k)] += std::abs(c.dy[i]) * e_xh[size_t(k)];
      db_abs[size_t(k)] += std::abs(c.dy[i]);
    }
    const double ug = affine ? u : 0;  // g's rounding
    const double m1 = s1 / n, m2 = s2 / n;
    const double e_m1 = (gamma_n(d + 1, u) * abs1 + ug * abs1) / n + gamma_n(2, u) * std::abs(m1);
    const double e_m2 = (gamma_n(d + 2, u) * abs2 + ug * abs2 + e_terms2) / n + gamma_n(2, u) * std::abs(m2);
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = size_t(r * cols + k);
      const double gk = std::abs(g[size_t(k)]), xk = std::abs(xh[size_t(k)]);
      const double inner = gk + std::abs(m1) + xk * std::abs(m2);
      const double e_inner = ug * gk + e_m1 + xk * e_m2 + e_xh[size_t(k)] * std::abs(m2) + gamma_n(3, u) * inner;
      const double computed = rs * e_inner + gamma_n(2, u) * rs * inner;
      b.dx[i] = computed + uT * (std::abs(want.dx[i]) + computed) + ref * rs * inner;
    }
  }
  for (int64_t k = 0; k < cols; ++k) {
    const size_t i = size_t(k);
    const double e_dg = gamma_n(double(rows) + 1, u) * dg_abs[i] + dg_err[i];
    const double e_db = gamma_n(double(rows), u) * db_abs[i];
    b.dgamma[i] = e_dg + uT * (std::abs(want.dgamma[i]) + e_dg) + ref * dg_abs[i];
    b.dbeta[i] = e_db + uT * (std::abs(want.dbeta[i]) + e_db) + ref * db_abs[i];
  }
  return b;
}

template <class T>
void check_layer_norm(int64_t rows, int64_t cols, RowVariant v, bool affine, uint32_t seed, size_t offset = 0,
                      double offset_value = 0) {
  using A = compute_t<T>;
  const LayerNormCase c = make_case<T>(rows, cols, seed, offset_value);
  const CpuLayerNorm want = cpu_layer_norm(c, rows, cols, affine);
  const DeviceArray<T> x(from_doubles<T>(c.x), offset), gamma(from_doubles<T>(c.gamma), offset),
      beta(from_doubles<T>(c.beta), offset), dy(from_doubles<T>(c.dy), offset);
  DeviceArray<T> y(rows * cols, offset), dx(rows * cols, offset), dgamma(cols), dbeta(cols);
  DeviceArray<A> mean(rows), rstd(rows);
  const T* g = affine ? gamma.data() : nullptr;
  layer_norm(x.data(), g, affine ? beta.data() : nullptr, y.data(), mean.data(), rstd.data(), rows, cols, kEps,
             nullptr, v);
  const std::string at = where("layer_norm", v, rows, cols, affine);
  if (rows > 0) {
    const LayerNormBounds bound = layer_norm_bounds<T>(c, rows, cols, v, affine, want);
    EXPECT_TRUE(all_within(y.host(), want.y, bound.y)) << at << " y";
    EXPECT_TRUE(all_within(mean.host(), want.mean, bound.mean)) << at << " mean";
    EXPECT_TRUE(all_within(rstd.host(), want.rstd, bound.rstd)) << at << " rstd";
  }
  // Backward from the reference's statistics, rounded as the forward would store them.
  const DeviceArray<A> ref_mean(from_doubles<A>(want.mean)), ref_rstd(from_doubles<A>(want.rstd));
  DeviceArray<unsigned char> workspace(layer_norm_backward_workspace_bytes<T>(rows, cols, v));
  layer_norm_backward(dy.data(), x.data(), ref_mean.data(), ref_rstd.data(), g, dx.data(), dgamma.data(), dbeta.data(),
                      rows, cols, workspace.data(), nullptr, v);
  if (rows > 0) {
    const LayerNormBackwardBounds bound = layer_norm_backward_bounds<T>(c, rows, cols, v, affine, want);
    EXPECT_TRUE(all_within(dx.host(), want.dx, bound.dx)) << at << " dx";
    EXPECT_TRUE(all_within(dgamma.host(), want.dgamma, bound.dgamma)) << at << " dgamma";
    EXPECT_TRUE(all_within(dbeta.host(), want.dbeta, bound.dbeta)) << at << " dbeta";
  } else {
    for (T d : dgamma.host()) EXPECT_EQ(to_double(d), 0.0) << at << ": dgamma over no rows";
    for (T d : dbeta.host()) EXPECT_EQ(to_double(d), 0.0) << at << ": dbeta over no rows";
  }
}

TEST(CudaNorm, LayerNormMatchesCpuInEveryVariant) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 1;
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : shapes()) {
      if (!variant_takes<float>(v, cols)) continue;
      for (bool affine : {true, false}) check_layer_norm<float>(rows, cols, v, affine, seed += 4);
    }
}

TEST(CudaNorm, LayerNormInHalfBFloat16AndDouble) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 1000;
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : shapes()) {
      if (!variant_takes<__half>(v, cols) || rows == 300) continue;
      check_layer_norm<__half>(rows, cols, v, true, seed += 4);
      check_layer_norm<__nv_bfloat16>(rows, cols, v, true, seed += 4);
      if (variant_takes<double>(v, cols)) check_layer_norm<double>(rows, cols, v, rows != 1, seed += 4);
    }
}

// The automatic choice on long rows: kBlock at its largest (16 values a thread) and
// kStream past it.
TEST(CudaNorm, LayerNormLongRowsTakeTheAutomaticVariant) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 1500;
  for (int64_t cols : {int64_t(8192), int64_t(8193), int64_t(12000)}) {
    check_layer_norm<float>(2, cols, RowVariant::kAuto, true, seed += 4);
    check_layer_norm<__nv_bfloat16>(2, cols, RowVariant::kAuto, true, seed += 4, /*offset=*/1);
  }
}

// Views one element past a 16-byte boundary: register variants read scalars, kStream
// peels each row.
TEST(CudaNorm, LayerNormRowsNotAligned) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 2000;
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(4), int64_t(33), int64_t(256), int64_t(4096)}) {
      if (!variant_takes<float>(v, cols)) continue;
      check_layer_norm<float>(5, cols, v, true, seed += 4, /*offset=*/1);
      check_layer_norm<__nv_bfloat16>(5, cols, v, true, seed += 4, /*offset=*/3);
    }
}

// Rows around 1e3 with a spread of 2: the mean carries gamma_d * 1e3 absolute error
// (layer_norm_bounds), which the normalized values see times rstd.
TEST(CudaNorm, LayerNormOfLargeOffsets) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 3000;
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(33), int64_t(1023), int64_t(4097)}) {
      if (!variant_takes<float>(v, cols)) continue;
      check_layer_norm<float>(3, cols, v, true, seed += 4, 0, 1e3);
    }
}

// dgamma and dbeta come out the same bits on every run (Note [Deterministic parameter
// gradients]); many rows, so each block sums many.
TEST(CudaNorm, LayerNormParameterGradientsAreDeterministic) {
  EMBER_NEED_DEVICE();
  for (RowVariant v : kVariants) {
    const int64_t rows = 700, cols = 40;
    const LayerNormCase c = make_case<float>(rows, cols, 4000);
    const CpuLayerNorm want = cpu_layer_norm(c, rows, cols, true);
    const DeviceArray<float> x(from_doubles<float>(c.x)), gamma(from_doubles<float>(c.gamma)),
        dy(from_doubles<float>(c.dy)), mean(from_doubles<float>(want.mean)), rstd(from_doubles<float>(want.rstd));
    DeviceArray<float> dx(rows * cols), dgamma(cols), dbeta(cols);
    DeviceArray<unsigned char> workspace(layer_norm_backward_workspace_bytes<float>(rows, cols, v));
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 3; ++run) {
      layer_norm_backward(dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), dx.data(), dgamma.data(),
                          dbeta.data(), rows, cols, workspace.data(), nullptr, v);
      runs.push_back(dgamma.host());
      const auto b = dbeta.host();
      runs.back().insert(runs.back().end(), b.begin(), b.end());
    }
    EXPECT_EQ(runs[0], runs[1]) << rowwise::row_variant_name(v);
    EXPECT_EQ(runs[0], runs[2]) << rowwise::row_variant_name(v);
    EXPECT_TRUE(all_within(std::vector<float>(runs[0].begin(), runs[0].begin() + cols), want.dgamma,
                           layer_norm_backward_bounds<float>(c, rows, cols, v, true, want).dgamma));
  }
}

// gamma without beta (PyTorch's LayerNorm(bias=False)) and beta without gamma: the same
// values as beta = 0 and gamma = 1 (x * g + 0 and x * 1 + b are exact), in every variant
// and over many rows a block (kBlock's parameter slots, Note [Parameter slots]).
TEST(CudaNorm, LayerNormWithGammaOrBetaAlone) {
  EMBER_NEED_DEVICE();
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : {RowsCols{700, 40}, RowsCols{300, 1000}, RowsCols{5, 4096}, RowsCols{3, 2051}}) {
      if (!variant_takes<float>(v, cols)) continue;
      const LayerNormCase c = make_case<float>(rows, cols, uint32_t(rows + cols));
      const DeviceArray<float> x(from_doubles<float>(c.x)), gamma(from_doubles<float>(c.gamma)),
          beta(from_doubles<float>(c.beta)), zeros(std::vector<float>(size_t(cols), 0.0f)),
          ones(std::vector<float>(size_t(cols), 1.0f));
      DeviceArray<float> y(rows * cols), want(rows * cols), mean(rows), rstd(rows);
      const std::string at = where("layer_norm", v, rows, cols, true);
      layer_norm(x.data(), gamma.data(), nullptr, y.data(), mean.data(), rstd.data(), rows, cols, kEps, nullptr, v);
      layer_norm(x.data(), gamma.data(), zeros.data(), want.data(), mean.data(), rstd.data(), rows, cols, kEps, nullptr,
                 v);
      EXPECT_EQ(y.host(), want.host()) << at << ", gamma alone";
      layer_norm(x.data(), nullptr, beta.data(), y.data(), mean.data(), rstd.data(), rows, cols, kEps, nullptr, v);
      layer_norm(x.data(), ones.data(), beta.data(), want.data(), mean.data(), rstd.data(), rows, cols, kEps, nullptr,
                 v);
      EXPECT_EQ(y.host(), want.host()) << at << ", beta alone";
    }
}

TEST(CudaNorm, LayerNormPlanAndBadArguments) {
  EMBER_NEED_DEVICE();
  const RowPlan p = layer_norm_backward_config(100000, 1024, 4, 4, true, true);
  EXPECT_EQ(p.variant, RowVariant::kWarp);
  EXPECT_LE(int64_t(p.cfg.grid.x), std::max<int64_t>(sm_count(), 100000 / 32));
  EXPECT_EQ(layer_norm_backward_config(10, 8192, 4, 4, true, true).variant, RowVariant::kBlock);
  EXPECT_EQ(layer_norm_backward_config(10, 8193, 4, 4, true, true).variant, RowVariant::kStream);
  EXPECT_EQ(layer_norm_config(10, 8192, 4, true, true).variant, RowVariant::kBlock);
  EXPECT_EQ(layer_norm_config(10, 8193, 4, true, true).variant, RowVariant::kStream);
  EXPECT_EQ(layer_norm_config(10, 4097, 8, true, true).variant, RowVariant::kStream);  // float64: 8 a thread
  // The workspace does not depend on alignment (the grid does not).
  for (int64_t cols : {int64_t(1), int64_t(100), int64_t(3000), int64_t(20000)})
    for (RowVariant v : {RowVariant::kAuto, RowVariant::kStream})
      EXPECT_EQ(layer_norm_backward_config(777, cols, 2, 4, true, true, v).cfg.grid.x,
                layer_norm_backward_config(777, cols, 2, 4, false, false, v).cfg.grid.x);

  DeviceArray<float> x(40), y(40), m(4), r(4);
  std::string err;
  try {
    layer_norm<float>(x.data(), nullptr, nullptr, y.data(), m.data(), r.data(), 4, 0, kEps, nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("layer_norm: 4 rows of 0 elements have no mean"), std::string::npos) << err;
  err.clear();
  try {
    layer_norm_backward<float>(x.data(), x.data(), m.data(), r.data(), nullptr, y.data(), y.data(), nullptr, 4, 10,
                               nullptr, nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("layer_norm_backward: dgamma / dbeta need a workspace"), std::string::npos) << err;
}

// --- Batch-norm statistics -----------------------------------------------------------------

struct Nchw {
  int64_t n, c, h, w;
};

std::vector<double> mean_of(const Tensor& x) { return mean(x, {0, 2, 3}).to_vector<double>(); }
std::vector<double> var_of(const Tensor& x, int64_t correction) {
  return var(x, {0, 2, 3}, correction).to_vector<double>();
}

// Bounds on |kernel - exact| of the batch-norm statistics, per channel. The kernel folds
// x - K (K the channel's first value, Note [Shifted statistics]) into Welford states: a
// thread merges its chunks in sequence (each chunk a two-pass Welford of at most 8 values),
// the block merges its threads' states in 10 butterfly levels, and the finishing kernel
// merges the work items in sequence. A chain of d such steps, each at most 6 roundings of
// magnitudes up to R = max |x - K|, gives (as layer_norm_bounds' kStream):
//   e_mu = gamma_{6d} R + u |mu| (adding K back), e_s2 = gamma_{6d} (s2 + R^2),
// the variances one division more, the running statistics (1 - m) r + m stat three
// roundings and one of (1 - m), plus the float64 reference's gamma_{count+10} (2^-53).
struct BatchNormStatsBounds {
  std::vector<double> mean, var, unbiased, running_mean, running_var;
};
template <class T>
BatchNormStatsBounds batch_norm_stats_bounds(const std::vector<double>& x, int64_t n, int64_t c, int64_t hw,
                                             const std::vector<double>& want_mean, const std::vector<double>& want_var,
                                             const std::vector<double>& rm0, const std::vector<double>& rv0,
                                             double momentum) {
  const double u = compute_roundoff<T>(), count = double(n * hw);
  const double ref = gamma_n(count + 10, std::ldexp(1.0, -53));
  const BatchNormStatsPlan p = batch_norm_stats_config(n, c, hw);
  const int64_t lanes = p.warp_segments ? 32 : 256, groups = 256 / lanes, segment = std::min(hw, kBatchNormSegment);
  const double chunks = double((p.per + groups - 1) / groups) * double((segment + lanes - 1) / lanes + 2);
  const double d = chunks + 8 + 10 + double(p.splits) + 1;
  BatchNormStatsBounds b;
  for (int64_t ch = 0; ch < c; ++ch) {
    const double k = x[size_t(ch * hw)], mu = want_mean[size_t(ch)], s2 = want_var[size_t(ch)];
    double spread = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) spread = std::max(spread, std::abs(x[size_t((i * c + ch) * hw + j)] - k));
    const double e_mu = gamma_n(6 * d, u) * spread + u * std::abs(mu) + ref * (std::abs(mu) + spread);
    const double e_var = gamma_n(6 * d + 1, u) * (s2 + spread * spread) + ref * (s2 + spread * spread);
    const double e_unbiased = count > 1 ? e_var * count / (count - 1) : 0;
    b.mean.push_back(e_mu);
    b.var.push_back(e_var);
    b.unbiased.push_back(e_unbiased);
    const double keep = 1 - momentum, unbiased = count > 1 ? s2 * count / (count - 1) : 0;
    b.running_mean.push_back(gamma_n(4, u) * (keep * std::abs(rm0[size_t(ch)]) + momentum * std::abs(mu)) +
                             momentum * e_mu);
    b.running_var.push_back(gamma_n(4, u) * (keep * std::abs(rv0[size_t(ch)]) + momentum * unbiased) +
                            momentum * e_unbiased);
  }
  return b;
}

// ember::mean and var over N, H, W of a float64 CPU tensor; running statistics updated as
// nn::functional::batch_norm does.
template <class T>
void check_batch_norm_stats(Nchw s, uint32_t seed, size_t offset = 0, double offset_value = 0) {
  using A = compute_t<T>;
  const int64_t hw = s.h * s.w, count = s.n * hw;
  const auto x = rounded<T>(random_doubles(s.n * s.c * hw, seed, offset_value - 2, offset_value + 2));
  const auto rm0 = rounded<A>(random_doubles(s.c, seed + 1, -1, 1)), rv0 = rounded<A>(random_doubles(s.c, seed + 2, 0.5, 2));
  const double momentum = 0.1;
  const DeviceArray<T> dx(from_doubles<T>(x), offset);
  DeviceArray<A> mean(s.c), var(s.c), unbiased(s.c), rm(from_doubles<A>(rm0)), rv(from_doubles<A>(rv0));
  DeviceArray<unsigned char> workspace(batch_norm_stats_workspace_bytes<T>(s.n, s.c, hw));
  batch_norm_stats(dx.data(), s.n, s.c, hw, mean.data(), var.data(), unbiased.data(), count > 1 ? rm.data() : nullptr,
                   count > 1 ? rv.data() : nullptr, momentum, workspace.data(), nullptr);
  const std::string at = "batch_norm_stats [" + std::to_string(s.n) + ", " + std::to_string(s.c) + ", " +
                         std::to_string(s.h) + ", " + std::to_string(s.w) + "]";
  if (count == 0) {
    for (A m : mean.host()) EXPECT_TRUE(std::isnan(to_double(m))) << at << ": mean of nothing";
    return;
  }
  const Tensor X = tensor(x, {s.n, s.c, s.h, s.w}, kFloat64);
  const auto want_mean = mean_of(X), want_var = var_of(X, 0);
  const auto want_unbiased = count > 1 ? var_of(X, 1) : std::vector<double>(s.c, std::nan(""));
  const BatchNormStatsBounds bound =
      batch_norm_stats_bounds<T>(x, s.n, s.c, hw, want_mean, want_var, rm0, rv0, momentum);
  EXPECT_TRUE(all_within(mean.host(), want_mean, bound.mean)) << at << " mean";
  EXPECT_TRUE(all_within(var.host(), want_var, bound.var)) << at << " var";
  EXPECT_TRUE(all_within(unbiased.host(), want_unbiased, bound.unbiased)) << at << " unbiased var";
  if (count > 1) {
    std::vector<double> want_rm(s.c), want_rv(s.c);
    for (int64_t c = 0; c < s.c; ++c) {
      want_rm[c] = (1 - momentum) * rm0[c] + momentum * want_mean[c];
      want_rv[c] = (1 - momentum) * rv0[c] + momentum * want_unbiased[c];
    }
    EXPECT_TRUE(all_within(rm.host(), want_rm, bound.running_mean)) << at << " running_mean";
    EXPECT_TRUE(all_within(rv.host(), want_rv, bound.running_var)) << at << " running_var";
  }
}

// Shapes: a single value (unbiased variance NaN), [N, C] (H = W = 1), planes of awkward
// sizes, vector-friendly planes, planes longer than a segment (8192), and no values.
const std::vector<Nchw> kBatchShapes = {{1, 1, 1, 1}, {5, 3, 1, 1},  {3, 5, 7, 9},    {2, 3, 33, 31},
                                        {4, 2, 64, 64}, {1, 2, 97, 101}, {3, 40, 2, 2}, {0, 3, 4, 4},
                                        {2, 0, 4, 4}};

TEST(CudaNorm, BatchNormStatsMatchCpu) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 5000;
  for (const Nchw& s : kBatchShapes) check_batch_norm_stats<float>(s, seed += 3);
}

TEST(CudaNorm, BatchNormStatsInHalfBFloat16AndDouble) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 6000;
  for (const Nchw& s : kBatchShapes) {
    check_batch_norm_stats<__half>(s, seed += 3);
    check_batch_norm_stats<__nv_bfloat16>(s, seed += 3);
    check_batch_norm_stats<double>(s, seed += 3);
  }
}

// Misaligned planes (odd offsets, odd H * W) and values around 1e3 with a spread of 2:
// Welford's merges keep the variance (about 1.3) to float precision where a sum of
// squares would lose it to 1e6-sized cancellation.
TEST(CudaNorm, BatchNormStatsMisalignedAndLargeOffsets) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 7000;
  for (const Nchw& s : {Nchw{3, 5, 7, 9}, Nchw{4, 2, 64, 64}, Nchw{1, 2, 97, 101}}) {
    check_batch_norm_stats<float>(s, seed += 3, /*offset=*/1);
    check_batch_norm_stats<__nv_bfloat16>(s, seed += 3, /*offset=*/3);
    check_batch_norm_stats<float>(s, seed += 3, 0, /*offset_value=*/1e3);
  }
}

TEST(CudaNorm, BatchNormStatsAreDeterministicAndChecked) {
  EMBER_NEED_DEVICE();
  const int64_t n = 7, c = 3, hw = 300;
  const auto x = random_doubles(n * c * hw, 8000, -3, 3);
  const DeviceArray<float> dx(from_doubles<float>(x));
  DeviceArray<float> mean(c), var(c);
  DeviceArray<unsigned char> workspace(batch_norm_stats_workspace_bytes<float>(n, c, hw));
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    batch_norm_stats(dx.data(), n, c, hw, mean.data(), var.data(), nullptr, nullptr, nullptr, 0.1, workspace.data(),
                     nullptr);
    auto got = mean.host();
    const auto v = var.host();
    got.insert(got.end(), v.begin(), v.end());
    if (run == 0) first = got;
    EXPECT_EQ(got, first);
  }
  std::string err;
  DeviceArray<float> rv(1);
  try {
    batch_norm_stats(dx.data(), 1, 1, 1, mean.data(), var.data(), nullptr, nullptr, rv.data(), 0.1, workspace.data(),
                     nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("batch_norm_stats: updating running_var needs more than one value per channel"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace ember::kernels::cuda
