// The softmax family's CUDA kernels (kernels/cuda/softmax.cuh, cross_entropy.cuh) against
// the CPU backend: ember::softmax / log_softmax and nn::functional::cross_entropy on
// float64 CPU tensors holding exactly the values the kernel read (inputs rounded to the
// kernel's dtype first), every variant of Note [Row variants], awkward shapes, rows that
// are not 16-byte aligned, logits of magnitude 1e4, non-finite rows and ignore_index.
//
// Tolerances: softmax, log_softmax and their backward passes are checked element by
// element against bounds derived from the kernel's arithmetic (forward_bound,
// backward_bound); cross entropy still uses the relative tolerances below.
//   float32  1e-5, float16 1e-3, bfloat16 5e-3, float64 1e-12.
// Absolute floors where values fall below the smallest normal number (kAtol).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
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
template <class T = float>
bool variant_takes(RowVariant v, int64_t cols) {
  return (v != RowVariant::kWarp || cols <= rowwise::kMaxWarpRow) &&
         (v != RowVariant::kBlock || cols <= rowwise::block_variant_max_cols(sizeof(T)));
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


// exp and log in the compute type: CUDA's expf / exp are within 2 ulp, logf / log within
// 1 ulp (CUDA Programming Guide, mathematical functions), glibc's (the emulator's) within
// 1; an ulp is at most 2u relative, so exp costs up to 4u, log 2u.
constexpr double kExpRoundings = 4, kLogRoundings = 2;

// How the kernel splits a row: per-thread terms of its partial sums, and the merge levels
// of the shuffle tree that joins them (kWarp: log2 of its kW lanes; a block: two trees of
// 32 lanes, within and across warps). kStream rescales its running pair once per chunk
// (a multiply and an exp): `rescaled` says the per-thread terms pay for that too.
struct RowSplit {
  int64_t per_thread = 0;
  int levels = 0;
  bool rescaled = false;
};
RowSplit row_split(int64_t rows, int64_t cols, int elem_bytes, RowVariant v) {
  const RowPlan p = softmax_config(rows, cols, elem_bytes, true, true, v);  // vectors: the most a thread
  RowSplit s;
  if (p.variant == RowVariant::kWarp) {
    const int kw = std::min(p.per_thread, 32);
    s.per_thread = p.per_thread / kw;
    for (int w = kw; w > 1; w /= 2) ++s.levels;
  } else {
    // kStream deals out chunks of up to 16 bytes, after a peeled head of up to one vector.
    const int64_t vec = 16 / elem_bytes, threads = p.cfg.block.x;
    s.per_thread = p.variant == RowVariant::kBlock ? p.per_thread : (cols + threads - 1) / threads + 2 * vec;
    s.levels = 10;
    s.rescaled = p.variant == RowVariant::kStream;
  }
  return s;
}

// The bound on |kernel - exact| of each softmax / log_softmax output of x (rounded to T).
// With M a row's max, t_k = exp(x_k - M) and S = sum t_k:
//  * every exp argument is a difference of two inputs rounded once: the arguments a term
//    passes through (its own exp, then the rescales of its thread's and each merge's
//    smaller max) telescope to M - x_k, so they cost t_k u (M - x_k) in all;
//  * the normalizer S: per term its own exp, its thread's sum (per_thread additions, in
//    kStream also a multiply and an exp per chunk) and at each merge level a multiply, an
//    exp and an addition: d_S = kExp + per_thread (1 + (1 + kExp) if rescaled) +
//    levels (2 + kExp) roundings, so |S^ - S| <= gamma_{d_S} S + u sum t_k (M - x_k);
//  * softmax y_i = t_i / S: its own exp and its thread's rescale (kExp each, arguments
//    u (M - x_i)), the division and the multiply, S's error, then the store to T;
//  * log_softmax y_i = (x_i - M) - log S: the subtraction (u |x_i - M|), log's kLog ulps of
//    log S plus S's relative error, the final subtraction and the store (u, u_T of |y_i|).
// The float64 reference adds its own rounding: at most gamma_{cols + 10} (2^-53) relative.
template <class T>
std::vector<double> forward_bound(const std::vector<double>& x, int64_t rows, int64_t cols, RowVariant v, bool log,
                                  const std::vector<double>& want) {
  const double u = compute_roundoff<T>(), uT = store_roundoff<T>(), ref = gamma_n(double(cols) + 10, std::ldexp(1.0, -53));
  const RowSplit sp = row_split(rows, cols, int(sizeof(T)), v);
  const double d_s = kExpRoundings + double(sp.per_thread) * (sp.rescaled ? 2 + kExpRoundings : 1) +
                     sp.levels * (2 + kExpRoundings);
  std::vector<double> tol(x.size());
  for (int64_t r = 0; r < rows && cols > 0; ++r) {
    const double* xr = x.data() + r * cols;
    const double m = *std::max_element(xr, xr + cols);
    double s = 0, spread = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const double t = std::exp(xr[k] - m);  // 0 for -inf, which adds nothing
      s += t;
      if (t > 0) spread += t * (m - xr[k]);
    }
    const double s_rel = gamma_n(d_s, u) + u * spread / s;  // |S^ - S| / S
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = size_t(r * cols + k);
      const double y = std::abs(want[i]);
      if (log) {
        const double computed = u * (m - xr[k]) + s_rel + gamma_n(kLogRoundings, u) * std::log(s) + u * y;
        tol[i] = computed + uT * (y + computed) + ref * (y + std::log(s));
      } else {
        const double rel = gamma_n(2 * kExpRoundings + 2, u) + u * (m - xr[k]) + s_rel;
        tol[i] = (rel + uT * (1 + rel) + ref) * y * (1 + rel) + kAtol<T>;
      }
    }
  }
  return tol;
}

// Runs the forward kernel on x (values rounded to T) and checks it against the CPU.
// offset_x / offset_y: elements of padding before each array (1: rows not 16-byte aligned).
template <class T>
void check_forward(const std::vector<double>& x, int64_t rows, int64_t cols, RowVariant v, bool log, uint32_t seed,
                   size_t offset_x = 0, size_t offset_y = 0) {
  (void)seed;
  const DeviceArray<T> dx_in(from_doubles<T>(x), offset_x);
  DeviceArray<T> dy_out(x.size(), offset_y);
  if (log) log_softmax(dx_in.data(), dy_out.data(), rows, cols, nullptr, v);
  else softmax(dx_in.data(), dy_out.data(), rows, cols, nullptr, v);
  const auto xr = rounded<T>(x);
  const auto want = cpu_softmax(xr, rows, cols, log);
  EXPECT_TRUE(all_within(dy_out.host(), want, forward_bound<T>(xr, rows, cols, v, log, want)))
      << where(v, rows, cols, log);
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
      // log_softmax of values 1e4 apart: outputs near -2e4, x - M rounded once.
      check_forward<float>(wide, rows, cols, v, true, seed);
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
        const std::vector<double> row0(x.begin(), x.begin() + cols);
        const auto want = cpu_softmax(row0, 1, cols, log);
        const auto tol = forward_bound<float>(rounded<float>(row0), 1, cols, v, log, want);
        std::vector<float> got_finite;
        std::vector<double> want_finite, tol_finite;
        for (int64_t c = 1; c < cols; c += 2) {
          got_finite.push_back(got[c]);
          want_finite.push_back(want[c]);
          tol_finite.push_back(tol[c]);
        }
        EXPECT_TRUE(all_within(got_finite, want_finite, tol_finite)) << at;
      }
    }
}

// The bound on |kernel - exact| of each backward output. The row's sum s (softmax:
// sum dy_k y_k, a product and then per_thread + levels additions on each term's path;
// log_softmax: sum dy_k, per_thread + levels additions) is within gamma_d of the sum of
// its terms' magnitudes, e_s. Then
//  * softmax dx_i = y_i (dy_i - s): the subtraction and the multiply, two roundings of
//    |y_i| (|dy_i - s| + e_s), plus |y_i| e_s;
//  * log_softmax dx_i = dy_i - exp(y_i) s: exp's kExp ulps and the multiply on exp(y_i) |s|,
//    exp(y_i) e_s, and the subtraction's rounding of |dx_i|;
// then the store to T, and the float64 reference's own gamma_{cols + 3} (2^-53) of the same
// magnitudes.
template <class T>
std::vector<double> backward_bound(const std::vector<double>& y, const std::vector<double>& dy, int64_t rows,
                                   int64_t cols, RowVariant v, bool log, const std::vector<double>& want) {
  const double u = compute_roundoff<T>(), uT = store_roundoff<T>(), uD = std::ldexp(1.0, -53);
  const RowSplit sp = row_split(rows, cols, int(sizeof(T)), v);
  const double d_s = double(sp.per_thread) + sp.levels + (log ? 0 : 1);
  std::vector<double> tol(y.size());
  for (int64_t r = 0; r < rows && cols > 0; ++r) {
    double s = 0, terms = 0;
    for (int64_t k = r * cols; k < (r + 1) * cols; ++k) {
      s += log ? dy[k] : dy[k] * y[k];
      terms += log ? std::abs(dy[k]) : std::abs(dy[k] * y[k]);
    }
    const double e_s = gamma_n(d_s, u) * terms, ref_s = gamma_n(double(cols) + 3, uD) * terms;
    for (int64_t k = r * cols; k < (r + 1) * cols; ++k) {
      const double dx = std::abs(want[k]);
      double computed, mags;
      if (log) {
        const double e = std::exp(y[k]);
        computed = e * (e_s + gamma_n(kExpRoundings + 1, u) * (std::abs(s) + e_s));
        computed += gamma_n(1, u) * (dx + computed);
        mags = e * (terms + std::abs(s)) + std::abs(dy[k]) + dx;
      } else {
        const double a = std::abs(y[k]), diff = std::abs(dy[k] - s);
        computed = a * e_s + gamma_n(2, u) * a * (diff + e_s);
        mags = a * (terms + std::abs(dy[k]) + std::abs(s)) + dx;
      }
      tol[k] = computed + uT * (dx + computed) + ref_s * (log ? std::exp(y[k]) : std::abs(y[k])) +
               gamma_n(3, uD) * mags + kAtol<T>;
    }
  }
  return tol;
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
  EXPECT_TRUE(all_within(dx.host(), want, backward_bound<T>(y, dy, rows, cols, v, log, want)))
      << where(v, rows, cols, log) << " backward";
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

// The automatic choice on long rows: kBlock at its largest (32 values a thread, 512
// threads) and kStream past it.
TEST(CudaSoftmax, LongRowsTakeTheAutomaticVariant) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 350;
  for (int64_t cols : {int64_t(16384), int64_t(16385), int64_t(20000)}) {
    const auto x = random_doubles(2 * cols, seed++, -4, 4);
    for (bool log : {false, true}) {
      check_forward<float>(x, 2, cols, RowVariant::kAuto, log, seed);
      check_forward<__nv_bfloat16>(x, 2, cols, RowVariant::kAuto, log, seed, 1, 1);
      check_backward<float>(2, cols, RowVariant::kAuto, log, seed += 2);
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
    // The kernel's rounding and the CPU autograd's, both float64, on the same magnitudes.
    EXPECT_TRUE(all_within(dx.host(), want,
                           backward_bound<double>(Y.detach().to_vector<double>(), g, rows, cols, RowVariant::kAuto,
                                                  log, want)))
        << (log ? "log_softmax" : "softmax");
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


// --- Cross entropy ------------------------------------------------------------------------------

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
    X.set_requires_grad();
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

// Forward (none, mean, sum) and backward (none, mean) of one shape against the CPU.
// Tolerances: loss = log(sum) - (x_t - max) in float: a few eps of log(c) + |x_t - max|;
// the mean adds n roundings. Gradients: p - onehot cancels at the target, so an absolute
// floor of a few eps of the largest gradient.
template <class T>
void check_cross_entropy(const std::vector<double>& x_in, int64_t n, int64_t c, RowVariant v, uint32_t seed,
                         size_t offset_x = 0, size_t offset_dx = 0) {
  using A = compute_t<T>;
  const auto x = rounded<T>(x_in);
  const auto t = random_targets(n, c, seed);
  const auto g = random_doubles(n, seed + 1, -1, 1);
  const double rtol = std::max(kRtol<T>, kRtol<A>), loss_atol = 1e-6;
  const DeviceArray<T> logits(from_doubles<T>(x), offset_x);
  const DeviceArray<int64_t> target(t);
  DeviceArray<A> loss(n), stats(2 * n), reduced(1), total(1), grad_rows(from_doubles<A>(g)), one(std::vector<A>{1});
  DeviceArray<unsigned char> workspace(cross_entropy_workspace_bytes<T>(n, c, v));
  DeviceArray<T> dx_none(n * c, offset_dx), dx_mean(n * c, offset_dx);

  cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kSum,
                        reduced.data(), total.data(), workspace.data(), nullptr, v);
  const double got_sum = to_double(reduced.host()[0]);
  cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kMean,
                        reduced.data(), total.data(), workspace.data(), nullptr, v);
  cross_entropy_backward(logits.data(), target.data(), stats.data(), grad_rows.data(), nullptr, dx_none.data(), n, c,
                         -100, LossReduction::kNone, nullptr, v);
  cross_entropy_backward(logits.data(), target.data(), stats.data(), one.data(), total.data(), dx_mean.data(), n, c,
                         -100, LossReduction::kMean, nullptr, v);
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
  EXPECT_TRUE(all_close(loss.host(), want.loss, rtol, loss_atol)) << at << " loss";
  EXPECT_TRUE(all_close(reduced.host(), {want.mean}, rtol, loss_atol)) << at << " mean";
  EXPECT_TRUE(all_close(std::vector<double>{got_sum}, {want.sum}, rtol, loss_atol)) << at << " sum";
  const double floor = kAtol<T> + 4 * rtol;
  EXPECT_TRUE(all_close(dx_none.host(), want.dnone, rtol, floor * max_abs(want.dnone))) << at << " dlogits (none)";
  EXPECT_TRUE(all_close(dx_mean.host(), want.dmean, rtol, floor * max_abs(want.dmean))) << at << " dlogits (mean)";
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
                            LossReduction::kMean, reduced.data(), total.data(), workspace.data(), nullptr, v);
      cross_entropy_backward(logits.data(), target.data(), stats.data(), one.data(), total.data(), dx.data(), n, c,
                             ignore_index, LossReduction::kMean, nullptr, v);
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
  const auto x = random_doubles(n * c, 1000, -3, 3);
  const auto t = random_targets(n, c, 1001);
  const DeviceArray<float> logits(from_doubles<float>(x));
  const DeviceArray<int64_t> target(t);
  DeviceArray<float> loss(n), stats(2 * n), reduced(1), total(1);
  DeviceArray<unsigned char> workspace(cross_entropy_workspace_bytes<float>(n, c));
  std::vector<float> means;
  for (int run = 0; run < 3; ++run) {
    cross_entropy_forward(logits.data(), target.data(), loss.data(), stats.data(), n, c, -100, LossReduction::kMean,
                          reduced.data(), total.data(), workspace.data(), nullptr);
    means.push_back(reduced.host()[0]);
  }
  EXPECT_EQ(means[0], means[1]);
  EXPECT_EQ(means[0], means[2]);
  EXPECT_TRUE(all_close(std::vector<float>{means[0]}, {cpu_cross_entropy(x, t, std::vector<double>(n, 1.0), n, c).mean},
                        1e-5));
}

TEST(CudaSoftmax, CrossEntropyBadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> x(40), loss(4), stats(8);
  DeviceArray<int64_t> t(4);
  std::string err;
  try {
    cross_entropy_forward(x.data(), t.data(), loss.data(), stats.data(), 4, 10, -100, LossReduction::kMean, nullptr,
                          nullptr, nullptr, nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("cross_entropy: a mean or sum needs reduced, total_weight and workspace"), std::string::npos)
      << err;
  err.clear();
  try {
    cross_entropy_forward(x.data(), t.data(), loss.data(), stats.data(), 4, 10, -100, LossReduction::kNone, nullptr,
                          nullptr, nullptr, nullptr, RowVariant::kStream);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("variant stream does not exist"), std::string::npos) << err;
}

}  // namespace
}  // namespace ember::kernels::cuda
