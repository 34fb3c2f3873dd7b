// The softmax kernels (kernels/cuda/softmax.cuh) against
// the CPU backend: ember::softmax / log_softmax on float64 CPU tensors holding exactly
// the values the kernel read (inputs rounded to the kernel's dtype first), every variant
// of Note [Row variants], awkward shapes, rows that are not 16-byte aligned, logits of
// magnitude 1e4 and non-finite rows. Cross entropy: test_cross_entropy.cpp.
//
// Tolerances: softmax, log_softmax and their backward passes are checked element by
// element against bounds derived from the kernel's arithmetic (forward_bound,
// backward_bound), with absolute floors where values fall below the smallest normal
// number (harness.h's kAtol).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/softmax.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace test;


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


// How the kernel splits a row: per-thread terms of its partial sums, and the merge levels
// of the shuffle tree that joins them (kWarp: log2 of its kW lanes; a block: two trees of
// 32 lanes, within and across warps). kStream rescales its running pair once per chunk
// (a multiply and an exp): `rescaled` says the per-thread terms pay for that too.
struct RowSplit {
  int64_t per_thread = 0;
  int levels = 0;
  bool rescaled = false;
};
RowSplit row_split(int64_t rows, int64_t cols, int elem_bytes, RowVariant v, bool forward) {
  // vectors: the most a thread; kSplit's 512 threads give more terms a thread than kStream's 1024
  const RowPlan p = softmax_config(rows, cols, elem_bytes, true, true, v, forward);
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
  const RowSplit sp = row_split(rows, cols, int(sizeof(T)), v, true);
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

// kStream's blocks stride over the rows: for rows of 600 the grid (32 blocks of two warps
// per SM) is smaller than 300 rows, so blocks take several rows, reusing block_merge's
// shared memory from one row to the next.
TEST(CudaSoftmax, StreamBlocksThatTakeSeveralRows) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 300, cols = 600;
  ASSERT_LT(int64_t(softmax_config(rows, cols, 4, true, true, RowVariant::kStream).cfg.grid.x), rows);
  const auto x = random_doubles(rows * cols, 77, -4, 4);
  for (bool log : {false, true}) check_forward<float>(x, rows, cols, RowVariant::kStream, log, 77);
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
  const RowSplit sp = row_split(rows, cols, int(sizeof(T)), v, false);
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

// kStream keeps a row in shared memory between its passes where the row fits (every kStream
// case above) and reads it again from global memory where it does not: 60000 float32
// (240 KB) is past the 227 KiB a block may have.
TEST(CudaSoftmax, StreamRowsPastSharedMemoryAreReadTwice) {
  EMBER_NEED_DEVICE();
  const int64_t cols = 60000;
  ASSERT_EQ(softmax_config(2, cols, 4, true, true).cfg.shared_bytes, 0u);
  ASSERT_GT(softmax_config(2, 16385, 4, true, true).cfg.shared_bytes, 0u);
  uint32_t seed = 370;
  const auto x = random_doubles(2 * cols, seed, -4, 4);
  for (bool log : {false, true}) {
    check_forward<float>(x, 2, cols, RowVariant::kAuto, log, seed, 1, 1);
    check_backward<float>(2, cols, RowVariant::kAuto, log, seed += 2);
  }
}

// kSplit: rows whose kept copy would leave one block an SM (float32 past ~28000 columns,
// float64 past ~14000) keep 24 (float64: 12) values a thread in registers and the rest in
// shared memory; rows that are not 16-byte aligned or whose length no vector divides
// stay kStream. The backward's kSplit keeps 16 (float64: 6) values a thread of y and as
// many of dy in registers, 1024 threads, and the rest of both in shared memory.
TEST(CudaSoftmax, LongAlignedRowsSplitBetweenRegistersAndSharedMemory) {
  EMBER_NEED_DEVICE();
  const RowPlan p = softmax_config(2, 32768, 4, true, true, RowVariant::kAuto, /*forward=*/true);
  EXPECT_EQ(p.per_thread, 24);
  EXPECT_EQ(p.cfg.block.x, 512u);
  EXPECT_EQ(p.cfg.shared_bytes, size_t(32768 - 24 * 512) * 4);
  const RowPlan b = softmax_config(2, 32768, 4, true, true, RowVariant::kAuto, /*forward=*/false);
  EXPECT_EQ(b.per_thread, 16);
  EXPECT_EQ(b.cfg.block.x, 1024u);
  EXPECT_EQ(b.cfg.shared_bytes, 2 * size_t(32768 - 16 * 1024) * 4);
  EXPECT_EQ(softmax_config(2, 32769, 4, true, true, RowVariant::kAuto, false).per_thread, 0);  // backward, cols % 4
  EXPECT_EQ(softmax_config(2, 20000, 4, true, true, RowVariant::kAuto, false).per_thread, 0);  // two kept y fit
  EXPECT_EQ(softmax_config(2, 60000, 4, true, true, RowVariant::kAuto, false).per_thread, 0);  // y and dy do not fit
  EXPECT_EQ(softmax_config(2, 20000, 8, true, true, RowVariant::kAuto, false).per_thread, 6);  // float64
  EXPECT_EQ(softmax_config(2, 60000, 2, true, true, RowVariant::kAuto, false).per_thread, 16);  // bfloat16
  EXPECT_EQ(softmax_config(2, 32769, 4, true, true, RowVariant::kAuto, true).per_thread, 0);   // cols % 4
  EXPECT_EQ(softmax_config(2, 32768, 4, false, true, RowVariant::kAuto, true).per_thread, 0);  // unaligned
  EXPECT_EQ(softmax_config(2, 20000, 4, true, true, RowVariant::kAuto, true).per_thread, 0);   // two kept fit
  EXPECT_EQ(softmax_config(2, 20000, 8, true, true, RowVariant::kAuto, true).per_thread, 12);  // float64
  uint32_t seed = 380;
  for (int64_t cols : {int64_t(32768), int64_t(30004), int64_t(32769)}) {
    const auto x = random_doubles(3 * cols, seed++, -4, 4);
    for (bool log : {false, true}) {
      check_forward<float>(x, 3, cols, RowVariant::kAuto, log, seed);
      if (cols == 32768) check_forward<float>(x, 3, cols, RowVariant::kAuto, log, seed, 1, 1);  // kStream, kept
    }
  }
  const auto x = random_doubles(2 * 20000, seed++, -4, 4);
  for (bool log : {false, true}) check_forward<double>(x, 2, 20000, RowVariant::kAuto, log, seed);
  for (bool log : {false, true}) {
    check_backward<float>(3, 32768, RowVariant::kAuto, log, seed += 2);     // kSplit, a grid of 1-3 blocks
    check_backward<float>(2, 30004, RowVariant::kAuto, log, seed += 2);     // a partial last vector turn
    check_backward<float>(2, 16388, RowVariant::kAuto, log, seed += 2);     // kStream: two kept fit
    check_backward<float>(2, 32768, RowVariant::kAuto, log, seed += 2, 1);  // misaligned: kStream
    check_backward<double>(2, 20000, RowVariant::kAuto, log, seed += 2);
    check_backward<__nv_bfloat16>(2, 60000, RowVariant::kAuto, log, seed += 2);
  }
}

// The backward formulas are the gradients autograd gives for ember::softmax on the CPU.
TEST(CudaSoftmax, BackwardIsTheAutogradGradient) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 3, cols = 37;
  for (bool log : {false, true}) {
    const auto x = random_doubles(rows * cols, 600, -3, 3), g = random_doubles(rows * cols, 601, -1, 1);
    const Tensor X = tensor(x, {rows, cols}, kFloat64);
    X.requires_grad_();
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

}  // namespace
}  // namespace ember::kernels::cuda
