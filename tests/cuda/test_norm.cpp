// The normalization kernels (kernels/cuda/norm.cuh, batch_norm.cuh) against the CPU
// backend: nn::functional::layer_norm and its autograd gradients, ember::mean / var over
// N, H, W, all on float64 CPU tensors holding exactly the values the kernel read (inputs
// rounded to the kernel's dtype first); every variant of Note [Row variants], awkward
// shapes, views that are not 16-byte aligned, large offsets, and repeat runs for
// determinism.
//
// Tolerances. Layer norm's forward (y, mean, rstd): per-element bounds derived from the
// kernel's arithmetic (layer_norm_bounds). Still fixed, for layer norm's backward and the
// batch-norm statistics: relative, plus an absolute floor as a fraction of the largest
// reference value, because normalized outputs and gradients cross zero where relative
// error means nothing:
//   float32  rtol 1e-5, floor 1e-6: sums of kN values per thread and log2(lanes) merges,
//            each one rounding (< 50 eps = 6e-6); x - mean loses eps |x| absolutely.
//   float16  rtol 1e-3 (one output rounding, 2^-11), bfloat16 5e-3 (2^-8), floor 10 rtol
//            of their precision for gradients where g - mean(g) cancels before rounding.
//   float64  rtol 1e-12.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

template <class T> constexpr double kRtol = 1e-5;
template <> constexpr double kRtol<__half> = 1e-3;
template <> constexpr double kRtol<__nv_bfloat16> = 5e-3;
template <> constexpr double kRtol<double> = 1e-12;
template <class T> constexpr double kFloor = 1e-6;
template <> constexpr double kFloor<__half> = 1e-3;
template <> constexpr double kFloor<__nv_bfloat16> = 5e-3;
template <> constexpr double kFloor<double> = 1e-12;

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

template <class G>
::testing::AssertionResult close(const std::vector<G>& got, const std::vector<double>& want, double rtol,
                                 double floor) {
  return all_close(got, want, rtol, floor * max_abs(want));
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
  X.set_requires_grad();
  if (affine) {
    W = tensor(c.gamma, {cols}, kFloat64);
    B = tensor(c.beta, {cols}, kFloat64);
    W.set_requires_grad();
    B.set_requires_grad();
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
  double d = 0;
  if (p.variant == RowVariant::kWarp) {
    const int kw = std::min(p.per_thread, 32);
    d = p.per_thread / kw;
    for (int w = kw; w > 1; w /= 2) ++d;
  } else {
    const int64_t threads = p.cfg.block.x, vec = 16 / int64_t(sizeof(T));
    d = (p.variant == RowVariant::kBlock ? p.per_thread : (cols + threads - 1) / threads + 2 * vec) + 10;
  }
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

template <class T>
void check_layer_norm(int64_t rows, int64_t cols, RowVariant v, bool affine, uint32_t seed, size_t offset = 0,
                      double offset_value = 0, double rtol = kRtol<T>, double floor = kFloor<T>) {
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
    // dx = rstd (g - mean(g) - xhat mean(g xhat)) cancels to 0 (one column: exactly), so
    // its rounding is relative to rstd |g|, not to dx itself.
    const double dx_scale = std::max(max_abs(want.dx), max_abs(want.rstd) * max_abs(c.dy) *
                                                           (affine ? std::max(1.0, max_abs(c.gamma)) : 1.0));
    EXPECT_TRUE(all_close(dx.host(), want.dx, rtol, floor * dx_scale)) << at << " dx";
    EXPECT_TRUE(close(dgamma.host(), want.dgamma, rtol, floor)) << at << " dgamma";
    EXPECT_TRUE(close(dbeta.host(), want.dbeta, rtol, floor)) << at << " dbeta";
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
// (layer_norm_bounds), which the normalized values see times rstd. The floor given here
// is the backward's: 16 eps * 1e3 / std (about 1.15) relative to |y| <= 1.7.
TEST(CudaNorm, LayerNormOfLargeOffsets) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 3000;
  const double floor = 16 * std::numeric_limits<float>::epsilon() * 1e3 / 1.15 / 1.7;
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(33), int64_t(1023), int64_t(4097)}) {
      if (!variant_takes<float>(v, cols)) continue;
      check_layer_norm<float>(3, cols, v, true, seed += 4, 0, 1e3, 1e-5, floor);
    }
}

// dgamma and dbeta come out the same bits on every run (Note [Deterministic parameter
// gradients]); many rows, so each block sums many.
TEST(CudaNorm, LayerNormParameterGradientsAreDeterministic) {
  EMBER_NEED_DEVICE();
  for (RowVariant v : kVariants) {
    const int64_t rows = 700, cols = 40;
    const LayerNormCase c = make_case<float>(rows, cols, 4000);
    const DeviceArray<float> x(from_doubles<float>(c.x)), gamma(from_doubles<float>(c.gamma)),
        dy(from_doubles<float>(c.dy));
    DeviceArray<float> y(rows * cols), dx(rows * cols), dgamma(cols), dbeta(cols), mean(rows), rstd(rows);
    DeviceArray<unsigned char> workspace(layer_norm_backward_workspace_bytes<float>(rows, cols, v));
    layer_norm(x.data(), gamma.data(), nullptr, y.data(), mean.data(), rstd.data(), rows, cols, kEps, nullptr, v);
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
    EXPECT_TRUE(close(std::vector<float>(runs[0].begin(), runs[0].begin() + cols),
                      cpu_layer_norm(c, rows, cols, true).dgamma, 1e-5, 1e-6));
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

// ember::mean and var over N, H, W of a float64 CPU tensor; running statistics updated as
// nn::functional::batch_norm does.
template <class T>
void check_batch_norm_stats(Nchw s, uint32_t seed, size_t offset = 0, double offset_value = 0,
                            double rtol = kRtol<compute_t<T>>) {
  using A = compute_t<T>;
  const int64_t hw = s.h * s.w, count = s.n * hw;
  const auto x = rounded<T>(random_doubles(s.n * s.c * hw, seed, offset_value - 2, offset_value + 2));
  const auto rm0 = random_doubles(s.c, seed + 1, -1, 1), rv0 = random_doubles(s.c, seed + 2, 0.5, 2);
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
  EXPECT_TRUE(all_close(mean.host(), want_mean, rtol, rtol * (1 + std::abs(offset_value)))) << at << " mean";
  EXPECT_TRUE(all_close(var.host(), want_var, rtol)) << at << " var";
  EXPECT_TRUE(all_close(unbiased.host(), want_unbiased, rtol)) << at << " unbiased var";
  if (count > 1) {
    std::vector<double> want_rm(s.c), want_rv(s.c);
    for (int64_t c = 0; c < s.c; ++c) {
      want_rm[c] = (1 - momentum) * to_double(from_double<A>(rm0[c])) + momentum * want_mean[c];
      want_rv[c] = (1 - momentum) * to_double(from_double<A>(rv0[c])) + momentum * want_unbiased[c];
    }
    EXPECT_TRUE(all_close(rm.host(), want_rm, rtol, rtol * (1 + std::abs(offset_value)))) << at << " running_mean";
    EXPECT_TRUE(all_close(rv.host(), want_rv, rtol)) << at << " running_var";
  }
}


// Shapes: a single value (unbiased variance NaN), [N, C] (H = W = 1), planes of awkward
// sizes, vector-friendly planes, planes longer than a segment (8192), and no values.
const std::vector<Nchw> kBatchShapes = {{1, 1, 1, 1}, {5, 3, 1, 1},  {3, 5, 7, 9},    {2, 3, 33, 31},
                                        {4, 2, 64, 64}, {1, 2, 97, 101}, {3, 40, 2, 2}, {0, 3, 4, 4},
                                        {2, 0, 4, 4}};

// float32 rtol 1e-5: Welford chunks of 4 and Chan merges, each a few roundings, in a tree
// of log2(count) levels.
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
