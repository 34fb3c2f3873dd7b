// The softmax family's CUDA kernels (kernels/cuda/softmax.cuh, cross_entropy.cuh) against
// the CPU backend: ember::softmax / log_softmax and nn::functional::cross_entropy on
// float64 CPU tensors holding exactly the values the kernel read (inputs rounded to the
// kernel's dtype first), every variant of Note [Row variants], awkward shapes, rows that
// are not 16-byte aligned, logits of magnitude 1e4, non-finite rows and ignore_index.
//
// Tolerances (relative, plus an absolute floor where stated):
//   float32  1e-5: a row's normalizer is a sum of kN values per thread and a tree of
//            log2(lanes) merges, each step one rounding (< 50 eps = 6e-6), then exp.
//   float16  1e-3: one rounding of the output (2^-11 relative) dominates float compute.
//   bfloat16 5e-3: one rounding of the output (up to 2^-8 relative).
//   float64  1e-12.
// Absolute floors where values fall below the smallest normal number (kAtol).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/softmax.cuh"
#include "layers/functional.h"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace test;

template <class T> constexpr double kRtol = 1e-5;
template <> constexpr double kRtol<__half> = 1e-3;
template <> constexpr double kRtol<__nv_bfloat16> = 5e-3;
template <> constexpr double kRtol<double> = 1e-12;
// Absolute floor: below the smallest normal number relative precision fades (float16's
// subnormal step is 2^-24 = 6e-8, float's and bfloat16's smallest normal 1.2e-38).
template <class T> constexpr double kAtol = 1.2e-38;
template <> constexpr double kAtol<__half> = 6e-8;
template <> constexpr double kAtol<double> = 0;

const std::vector<RowVariant> kVariants = {RowVariant::kWarp, RowVariant::kBlock, RowVariant::kStream};

// The shapes every variant runs: awkward column counts, vector-friendly ones (256, 4096),
// and 300 rows, which takes the grid-stride loops round more than once.
struct RowsCols {
  int64_t rows, cols;
};
std::vector<RowsCols> shapes() {
  std::vector<RowsCols> s;
  for (int64_t rows : {0, 1, 3})
    for (int64_t cols : kAwkwardSizes) s.push_back({rows, cols});
  s.push_back({3, 256});
  s.push_back({2, 4096});
  s.push_back({300, 33});
  s.push_back({300, 4});
  return s;
}
bool variant_takes(RowVariant v, int64_t cols) { return v != RowVariant::kWarp || cols <= rowwise::kMaxWarpRow; }

template <class T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_double(from_double<T>(v[i]));
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

std::vector<double> cpu_softmax(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
  if (rows * cols == 0) return {};
  const Tensor t = tensor(x, {rows, cols}, kFloat64);
  return (log ? ember::log_softmax(t, -1) : ember::softmax(t, -1)).to_vector<double>();
}

// dx from y and dy with the CPU backend's ops, in float64.
std::vector<double> cpu_softmax_backward(const std::vector<double>& y, const std::vector<double>& dy, int64_t rows,
                                         int64_t cols, bool log) {
  if (rows * cols == 0) return {};
  const Tensor Y = tensor(y, {rows, cols}, kFloat64), G = tensor(dy, {rows, cols}, kFloat64);
  const Tensor dx = log ? sub(G, mul(exp(Y), sum(G, {-1}, true))) : mul(Y, sub(G, sum(mul(G, Y), {-1}, true)));
  return dx.to_vector<double>();
}

std::string where(RowVariant v, int64_t rows, int64_t cols, bool log) {
  return std::string(log ? "log_softmax" : "softmax") + " variant " + rowwise::row_variant_name(v) + " [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// Runs the forward kernel on x (values rounded to T) and checks it against the CPU.
// offset_x / offset_y: elements of padding before each array (1: rows not 16-byte aligned).
template <class T>
void check_forward(const std::vector<double>& x, int64_t rows, int64_t cols, RowVariant v, bool log, uint32_t seed,
                   size_t offset_x = 0, size_t offset_y = 0, double atol = -1) {
  (void)seed;
  const DeviceArray<T> dx_in(from_doubles<T>(x), offset_x);
  DeviceArray<T> dy_out(x.size(), offset_y);
  if (log) log_softmax(dx_in.data(), dy_out.data(), rows, cols, nullptr, v);
  else softmax(dx_in.data(), dy_out.data(), rows, cols, nullptr, v);
  const auto want = cpu_softmax(rounded<T>(x), rows, cols, log);
  // log_softmax: (x - max) - log(sum) has an absolute error of a few ulp of log(sum).
  if (atol < 0) atol = log ? kRtol<T> * std::log(double(cols) + 1) : kAtol<T>;
  EXPECT_TRUE(all_close(dy_out.host(), want, kRtol<T>, atol)) << where(v, rows, cols, log);
}

TEST(CudaSoftmax, ForwardMatchesCpuInEveryVariant) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 1;
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : shapes()) {
      if (!variant_takes(v, cols)) continue;
      const auto x = random_doubles(rows * cols, seed++, -4, 4);
      for (bool log : {false, true}) check_forward<float>(x, rows, cols, v, log, seed);
    }
}

TEST(CudaSoftmax, ForwardInHalfBFloat16AndDouble) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 100;
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : shapes()) {
      if (!variant_takes(v, cols) || rows == 300) continue;
      const auto x = random_doubles(rows * cols, seed++, -4, 4);
      for (bool log : {false, true}) {
        check_forward<__half>(x, rows, cols, v, log, seed);
        check_forward<__nv_bfloat16>(x, rows, cols, v, log, seed);
        check_forward<double>(x, rows, cols, v, log, seed);
      }
    }
}

// Views that start one element past a 16-byte boundary: every register variant falls back
// to scalar loads, and kStream peels each row (both arrays shifted alike) or reads scalars
// (shifted differently).
TEST(CudaSoftmax, RowsThatAreNotAligned) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 200;
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(4), int64_t(33), int64_t(256), int64_t(1023), int64_t(4096)}) {
      if (!variant_takes(v, cols)) continue;
      const int64_t rows = 3;
      const auto x = random_doubles(rows * cols, seed++, -4, 4);
      for (auto [ox, oy] : {std::pair<size_t, size_t>{1, 1}, {1, 0}, {0, 3}}) {
        check_forward<float>(x, rows, cols, v, false, seed, ox, oy);
        check_forward<float>(x, rows, cols, v, true, seed, ox, oy);
        check_forward<__nv_bfloat16>(x, rows, cols, v, false, seed, ox, oy);
      }
    }
}

// Logits around +1e4 and -1e4 (a spread of 8 within each row, so the outputs are not all
// 0 and 1): exp never overflows, and log_softmax keeps x - max exact.
TEST(CudaSoftmax, LogitsOfMagnitude1e4) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 300;
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(1), int64_t(33), int64_t(1023), int64_t(4097)}) {
      if (!variant_takes(v, cols)) continue;
      const int64_t rows = 4;
      auto x = random_doubles(rows * cols, seed++, -8, 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += (r % 2 ? -1e4 : 1e4);
      for (bool log : {false, true}) check_forward<float>(x, rows, cols, v, log, seed);
      // Spread over the whole range: a single winner per row, the rest underflow to 0.
      const auto wide = random_doubles(rows * cols, seed++, -1e4, 1e4);
      check_forward<float>(wide, rows, cols, v, false, seed);
      // log_softmax of values 1e4 apart: outputs near -2e4, each within a few ulp of 2e4.
      check_forward<float>(wide, rows, cols, v, true, seed, 0, 0, 4 * 2e4 * std::numeric_limits<float>::epsilon());
    }
}

// PyTorch's answers for non-finite rows: -inf entries get probability 0, a row of only
// -inf is NaN throughout, and a NaN anywhere makes its row NaN.
TEST(CudaSoftmax, NonFiniteRows) {
  EMBER_NEED_DEVICE();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (RowVariant v : kVariants)
    for (int64_t cols : {int64_t(3), int64_t(40), int64_t(1030)}) {
      if (!variant_takes(v, cols)) continue;
      std::vector<double> x = random_doubles(4 * cols, 400, -2, 2);
      for (int64_t c = 0; c < cols; ++c) {
        if (c % 2 == 0) x[c] = -inf;  // row 0: every other value -inf
        x[cols + c] = -inf;           // row 1: all -inf
      }
      x[2 * cols + cols / 2] = nan;  // row 2: one NaN; row 3: finite
      for (bool log : {false, true}) {
        DeviceArray<float> in(from_doubles<float>(x)), out(x.size());
        if (log) log_softmax(in.data(), out.data(), 4, cols, nullptr, v);
        else softmax(in.data(), out.data(), 4, cols, nullptr, v);
        const auto got = out.host();
        const std::string at = where(v, 4, cols, log);
        for (int64_t c = 0; c < cols; ++c) {
          if (c % 2 == 0) {
            EXPECT_EQ(got[c], log ? -INFINITY : 0.0f) << at << " col " << c;
          }
          EXPECT_TRUE(std::isnan(got[cols + c])) << at << " col " << c;
          EXPECT_TRUE(std::isnan(got[2 * cols + c])) << at << " col " << c;
          EXPECT_TRUE(std::isfinite(got[3 * cols + c])) << at << " col " << c;
        }
        // Row 0's finite entries agree with the CPU (all_close cannot compare infinities).
        const auto want = cpu_softmax(std::vector<double>(x.begin(), x.begin() + cols), 1, cols, log);
        std::vector<float> got_finite;
        std::vector<double> want_finite;
        for (int64_t c = 1; c < cols; c += 2) {
          got_finite.push_back(got[c]);
          want_finite.push_back(want[c]);
        }
        EXPECT_TRUE(all_close(got_finite, want_finite, 1e-5, log ? 1e-5 : 0)) << at;
      }
    }
}

template <class T>
void check_backward(int64_t rows, int64_t cols, RowVariant v, bool log, uint32_t seed, size_t offset = 0) {
  const auto x = random_doubles(rows * cols, seed, -4, 4);
  // y: the forward's exact output, rounded to T as a kernel would have stored it.
  const auto y = rounded<T>(cpu_softmax(x, rows, cols, log));
  const auto dy = rounded<T>(random_doubles(rows * cols, seed + 1, -1, 1));
  const DeviceArray<T> dy_y(from_doubles<T>(y), offset), dy_g(from_doubles<T>(dy), offset);
  DeviceArray<T> dx(y.size(), offset);
  if (log) log_softmax_backward(dy_y.data(), dy_g.data(), dx.data(), rows, cols, nullptr, v);
  else softmax_backward(dy_y.data(), dy_g.data(), dx.data(), rows, cols, nullptr, v);
  const auto want = cpu_softmax_backward(y, dy, rows, cols, log);
  // dy - sum(...) cancels: its absolute error is a few eps of the row's gradients, so
  // the floor scales with the largest |dx|.
  const double atol = kAtol<T> + 8 * kRtol<T> * 0.1 * max_abs(want);
  EXPECT_TRUE(all_close(dx.host(), want, kRtol<T>, atol)) << where(v, rows, cols, log) << " backward";
}

TEST(CudaSoftmax, BackwardMatchesCpuInEveryVariant) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 500;
  for (RowVariant v : kVariants)
    for (auto [rows, cols] : shapes()) {
      if (!variant_takes(v, cols)) continue;
      for (bool log : {false, true}) {
        check_backward<float>(rows, cols, v, log, seed += 2);
        if (rows != 300) {
          check_backward<__nv_bfloat16>(rows, cols, v, log, seed += 2);
          check_backward<__half>(rows, cols, v, log, seed += 2);
          check_backward<double>(rows, cols, v, log, seed += 2);
        }
        if (cols > 1) check_backward<float>(rows, cols, v, log, seed += 2, /*offset=*/1);
      }
    }
}

// The backward formulas are the gradients autograd gives for ember::softmax on the CPU.
TEST(CudaSoftmax, BackwardIsTheAutogradGradient) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 3, cols = 37;
  for (bool log : {false, true}) {
    const auto x = random_doubles(rows * cols, 600, -3, 3), g = random_doubles(rows * cols, 601, -1, 1);
    const Tensor X = tensor(x, {rows, cols}, kFloat64);
    X.set_requires_grad();
    const Tensor Y = log ? ember::log_softmax(X, -1) : ember::softmax(X, -1);
    Y.backward(tensor(g, {rows, cols}, kFloat64));
    const auto want = X.grad().to_vector<double>();

    const DeviceArray<double> y(Y.detach().to_vector<double>()), dy(g);
    DeviceArray<double> dx(x.size());
    if (log) log_softmax_backward(y.data(), dy.data(), dx.data(), rows, cols, nullptr);
    else softmax_backward(y.data(), dy.data(), dx.data(), rows, cols, nullptr);
    EXPECT_TRUE(all_close(dx.host(), want, 1e-10, 1e-12)) << (log ? "log_softmax" : "softmax");
  }
}

// The host plan: which variant, registers and vector loads a shape gets.
TEST(CudaSoftmax, PlanPicksVariantsAndVectors) {
  EMBER_NEED_DEVICE();
  const auto plan = [](int64_t cols, bool aligned) { return softmax_config(8, cols, 4, aligned, true); };
  EXPECT_EQ(plan(1, true).variant, RowVariant::kWarp);
  EXPECT_EQ(plan(1, true).per_thread, 1);
  EXPECT_EQ(plan(1024, true).variant, RowVariant::kWarp);
  EXPECT_EQ(plan(1024, true).per_thread, 1024);
  EXPECT_TRUE(plan(1024, true).vec);
  EXPECT_TRUE(plan(200, true).vec);    // 256 padded, 8 a lane, 200 % 4 == 0
  EXPECT_FALSE(plan(201, true).vec);   // rows start unaligned
  EXPECT_FALSE(plan(64, true).vec);    // 2 a lane: no whole vector
  EXPECT_FALSE(plan(1024, false).vec);
  EXPECT_EQ(plan(1025, true).variant, RowVariant::kBlock);
  EXPECT_EQ(plan(16384, true).variant, RowVariant::kBlock);
  EXPECT_EQ(plan(16384, true).per_thread, 32);
  EXPECT_EQ(plan(16384, true).cfg.block.x, 512u);
  EXPECT_EQ(plan(16385, true).variant, RowVariant::kStream);
  EXPECT_EQ(softmax_config(8, 4096, 2, true, true).per_thread, 8);  // bf16: 8 a vector
  EXPECT_TRUE(softmax_config(8, 4096, 2, true, true).vec);
}

TEST(CudaSoftmax, BadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> x(4 * 2000), y(4 * 2000);
  const auto message = [](const auto& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] { softmax(x.data(), y.data(), 4, 2000, nullptr, RowVariant::kWarp); })
                .find("softmax: the warp variant takes rows of at most 1024 elements, got 2000"),
            std::string::npos);
  EXPECT_NE(message([&] { softmax(x.data(), y.data(), 1, 20000, nullptr, RowVariant::kBlock); })
                .find("the block variant takes rows of at most 16384"),
            std::string::npos);
  EXPECT_NE(message([&] { log_softmax<float>(nullptr, y.data(), 4, 10, nullptr); }).find("log_softmax: null pointer"),
            std::string::npos);
  EXPECT_NE(message([&] { softmax(x.data(), y.data(), -1, 10, nullptr); }).find("negative shape"), std::string::npos);
}

}  // namespace
}  // namespace ember::kernels::cuda
