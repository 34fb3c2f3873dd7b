// Tests of ember's random numbers: the Philox 4x32-10 block function against the
// Random123 known-answer vectors, the determinism random.h promises (values depend only
// on seed, offset and element index: not on the shape, the draw size or the thread
// count), and the statistics of rand, randn and randint.
//
// Note [Statistical bounds]: every bound below is several standard errors wide, so an
// honest generator fails with probability < 1e-5 per check; the seeds are fixed, so a
// pass is reproducible. Moments are computed here in double, not with ember's reductions,
// so these tests do not depend on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/runtime.h"
#include "kernels/common/philox.h"

namespace ember {
namespace {

using kernels::Philox4;

struct Moments {
  double mean, var, m4;  // mean, variance (divide by n), fourth central moment
  double min, max;
};

Moments moments(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  const double mean = s / double(v.size());
  double s2 = 0, s4 = 0;
  for (double x : v) {
    double d = (x - mean) * (x - mean);
    s2 += d;
    s4 += d * d;
  }
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  return {mean, s2 / double(v.size()), s4 / double(v.size()), *mn, *mx};
}

// Pearson's chi-square statistic of the counts against equal expected counts.
double chi_square_uniform(const std::vector<int64_t>& counts, int64_t n) {
  const double expected = double(n) / double(counts.size());
  double chi2 = 0;
  for (int64_t c : counts) chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  return chi2;
}

// Restores the thread count a test changes.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(get_num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

// ----- Philox known answers -----

void expect_philox(Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 expected) {
  Philox4 got = kernels::philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got.v[i], expected.v[i]) << std::hex << "word " << i << ": got 0x" << got.v[i] << ", expected 0x"
                                       << expected.v[i];
}

TEST(Philox, Random123KnownAnswers) {
  // kat_vectors of Random123 (philox4x32 with 10 rounds).
  expect_philox({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect_philox({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
                {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect_philox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
                {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, IsAPureFunctionOfCounterAndKey) {
  Philox4 c{{1, 2, 3, 4}};
  Philox4 a = kernels::philox4x32_10(c, 5, 6);
  Philox4 b = kernels::philox4x32_10(c, 5, 6);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.v[i], b.v[i]);
  // Changing one bit of the counter or of the key changes every output word (avalanche:
  // a word stays equal with probability 2^-32).
  Philox4 c2 = c;
  c2.v[3] ^= 1u;
  Philox4 d = kernels::philox4x32_10(c2, 5, 6);
  Philox4 e = kernels::philox4x32_10(c, 5, 7);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(a.v[i], d.v[i]) << "word " << i;
    EXPECT_NE(a.v[i], e.v[i]) << "word " << i;
  }
}

// ----- determinism -----

TEST(RandomDeterminism, SameSeedSameValues) {
  Generator g1(42), g2(42);
  EXPECT_EQ(rand({1000}, kFloat32, &g1).to_vector<float>(), rand({1000}, kFloat32, &g2).to_vector<float>());
  EXPECT_EQ(randn({1000}, kFloat32, &g1).to_vector<float>(), randn({1000}, kFloat32, &g2).to_vector<float>());
  EXPECT_EQ(randint(-5, 100, {1000}, kInt64, &g1).to_vector<int64_t>(),
            randint(-5, 100, {1000}, kInt64, &g2).to_vector<int64_t>());
  EXPECT_EQ(rand({333}, kFloat64, &g1).to_vector<double>(), rand({333}, kFloat64, &g2).to_vector<double>());
  EXPECT_EQ(randn({333}, kFloat64, &g1).to_vector<double>(), randn({333}, kFloat64, &g2).to_vector<double>());
  EXPECT_EQ(g1.offset(), g2.offset());
}

TEST(RandomDeterminism, DifferentSeedsDiffer) {
  Generator g1(1), g2(2);
  std::vector<float> a = rand({1000}, kFloat32, &g1).to_vector<float>();
  std::vector<float> b = rand({1000}, kFloat32, &g2).to_vector<float>();
  int equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
  EXPECT_LT(equal, 5) << "independent 24-bit uniforms coincide with probability 2^-24";
  std::vector<int64_t> ia = randint(0, 1 << 30, {100}, kInt64, &g1).to_vector<int64_t>();
  std::vector<int64_t> ib = randint(0, 1 << 30, {100}, kInt64, &g2).to_vector<int64_t>();
  EXPECT_NE(ia, ib);
}

TEST(RandomDeterminism, ConsecutiveDrawsDifferAndAdvanceTheOffset) {
  Generator g(7);
  EXPECT_EQ(g.offset(), 0u);
  std::vector<float> a = rand({10}, kFloat32, &g).to_vector<float>();
  const uint64_t after_first = g.offset();
  // philox.h: a float32 draw takes 4 values per 128-bit block, so 10 values use 3 blocks.
  EXPECT_EQ(after_first, 3u);
  std::vector<float> b = rand({10}, kFloat32, &g).to_vector<float>();
  EXPECT_EQ(g.offset(), 6u);
  EXPECT_NE(a, b);
  for (float x : a) EXPECT_EQ(std::count(b.begin(), b.end(), x), 0) << "value " << x << " repeated";

  // Each kind of draw moves the offset forward.
  for (int kind = 0; kind < 4; ++kind) {
    uint64_t before = g.offset();
    if (kind == 0) randn({5}, kFloat32, &g);
    if (kind == 1) rand({5}, kFloat64, &g);
    if (kind == 2) randn({5}, kFloat64, &g);
    if (kind == 3) randint(0, 10, {5}, kInt32, &g);
    EXPECT_GT(g.offset(), before) << "draw kind " << kind;
  }
  // An empty draw is allowed.
  EXPECT_EQ(rand({0}, kFloat32, &g).numel(), 0);
}

TEST(RandomDeterminism, RewindingTheOffsetRepeatsTheDraw) {
  Generator g(99);
  rand({17}, kFloat32, &g);  // move away from offset 0
  const uint64_t mark = g.offset();
  std::vector<float> a = rand({10}, kFloat32, &g).to_vector<float>();
  std::vector<double> an = randn({10}, kFloat64, &g).to_vector<double>();
  std::vector<int64_t> ai = randint(3, 9, {10}, kInt64, &g).to_vector<int64_t>();
  g.set_offset(mark);
  EXPECT_EQ(rand({10}, kFloat32, &g).to_vector<float>(), a);
  EXPECT_EQ(randn({10}, kFloat64, &g).to_vector<double>(), an);
  EXPECT_EQ(randint(3, 9, {10}, kInt64, &g).to_vector<int64_t>(), ai);
}

TEST(RandomDeterminism, ValuesDependOnlyOnSeedOffsetAndIndex) {
  // random.h: element i of a draw depends only on (seed, offset, i). So a longer draw from
  // the same offset starts with the shorter one, and the shape does not matter.
  for (DType dt : {kFloat32, kFloat64}) {
    Generator g(2024);
    std::vector<double> short_u = rand({10}, dt, &g).to_vector<double>();
    g.set_offset(0);
    std::vector<double> long_u = rand({4, 25}, dt, &g).to_vector<double>();
    EXPECT_TRUE(std::equal(short_u.begin(), short_u.end(), long_u.begin())) << dtype_name(dt);
    g.set_offset(0);
    std::vector<double> short_n = randn({7}, dt, &g).to_vector<double>();
    g.set_offset(0);
    std::vector<double> long_n = randn({5, 5}, dt, &g).to_vector<double>();
    EXPECT_TRUE(std::equal(short_n.begin(), short_n.end(), long_n.begin())) << dtype_name(dt);
  }
}

TEST(RandomDeterminism, FloatDrawMatchesThePhiloxStream) {
  // philox.h: float32 element i of a draw at block offset `off` is lane i % 4 of block
  // off + i / 4, so the CUDA backend (which uses the same functions) draws the same values.
  Generator g(0x0123456789abcdefULL);
  g.set_offset(5);
  std::vector<float> got = rand({50}, kFloat32, &g).to_vector<float>();
  for (int64_t i = 0; i < 50; ++i) {
    Philox4 r = kernels::philox_block(0x0123456789abcdefULL, 5 + uint64_t(i) / 4);
    ASSERT_EQ(got[size_t(i)], kernels::uniform_float(r.v[i % 4])) << "element " << i;
  }
  EXPECT_EQ(kernels::uniform_float(0), 0.0f);
  EXPECT_LT(kernels::uniform_float(0xffffffffu), 1.0f);
  EXPECT_LT(kernels::uniform_double(0xffffffffu, 0xffffffffu), 1.0);
}

TEST(RandomDeterminism, IndependentOfThreadCount) {
  ThreadCountGuard guard;
  const Shape shape = {1000000};
  set_num_threads(1);
  Generator g1(5);
  std::vector<float> u1 = rand(shape, kFloat32, &g1).to_vector<float>();
  std::vector<float> n1 = randn(shape, kFloat32, &g1).to_vector<float>();
  std::vector<int64_t> i1 = randint(0, 1000, shape, kInt64, &g1).to_vector<int64_t>();
  set_num_threads(2);
  Generator g2(5);
  std::vector<float> u2 = rand(shape, kFloat32, &g2).to_vector<float>();
  std::vector<float> n2 = randn(shape, kFloat32, &g2).to_vector<float>();
  std::vector<int64_t> i2 = randint(0, 1000, shape, kInt64, &g2).to_vector<int64_t>();
  EXPECT_TRUE(u1 == u2) << "rand differs between 1 and 2 threads";
  EXPECT_TRUE(n1 == n2) << "randn differs between 1 and 2 threads";
  EXPECT_TRUE(i1 == i2) << "randint differs between 1 and 2 threads";
}

TEST(RandomDeterminism, ManualSeedResetsTheDefaultGenerator) {
  manual_seed(123);
  EXPECT_EQ(default_generator().seed(), 123u);
  EXPECT_EQ(default_generator().offset(), 0u);
  std::vector<float> a = rand({100}).to_vector<float>();
  std::vector<float> an = randn({100}).to_vector<float>();
  EXPECT_GT(default_generator().offset(), 0u);
  manual_seed(123);
  EXPECT_EQ(default_generator().offset(), 0u);
  EXPECT_EQ(rand({100}).to_vector<float>(), a);
  EXPECT_EQ(randn({100}).to_vector<float>(), an);
  // The default generator is the one rand uses when none is given.
  Generator g(123);
  EXPECT_EQ(rand({100}, kFloat32, &g).to_vector<float>(), a);
  // A draw from an explicit generator leaves the default one alone.
  manual_seed(124);
  rand({100}, kFloat32, &g);
  EXPECT_EQ(default_generator().offset(), 0u);
  EXPECT_NE(rand({100}).to_vector<float>(), a);
}

TEST(RandomErrors, BadArguments) {
  EXPECT_THROW(randint(5, 5, {3}), Error);
  EXPECT_THROW(randint(6, 5, {3}), Error);
  EXPECT_THROW(rand({3}, kInt64), Error);
  EXPECT_THROW(randn({3}, kInt32), Error);
}

// ----- statistics -----

TEST(RandomStatistics, NormalFloat32) {
  constexpr int64_t n = 1000000;
  Generator g(31337);
  Tensor x = randn({n}, kFloat32, &g);
  ASSERT_EQ(x.dtype(), kFloat32);
  ASSERT_EQ(x.shape(), (Shape{n}));
  std::vector<double> v = x.to_vector<double>();
  for (double s : v) ASSERT_TRUE(std::isfinite(s)) << "randn gave " << s;
  Moments m = moments(v);
  // Standard errors for n = 1e6 standard normals (Note [Statistical bounds]):
  //   mean: 1/sqrt(n) = 1e-3                -> bound 5e-3 is 5 SE;
  //   variance: sqrt(2/n) = 1.4e-3          -> bound 1e-2 is 7 SE;
  //   4th moment (3 for a normal): sqrt((105 - 9)/n) = 9.8e-3 -> bound 0.06 is 6 SE
  //   (catches e.g. a sum-of-uniforms approximation, whose 4th moment is lower).
  EXPECT_NEAR(m.mean, 0.0, 5e-3);
  EXPECT_NEAR(m.var, 1.0, 1e-2);
  EXPECT_NEAR(m.m4, 3.0, 0.06);
  // P(|x| > 3) = 0.0027; its count is ~Binomial(n, 0.0027): SE 52 of 2700 -> bound 300.
  int64_t tails = std::count_if(v.begin(), v.end(), [](double s) { return std::abs(s) > 3; });
  EXPECT_NEAR(double(tails), 2699.8, 300.0);
  // Symmetric: P(x > 0) = 1/2, SE 500 of 5e5.
  int64_t positive = std::count_if(v.begin(), v.end(), [](double s) { return s > 0; });
  EXPECT_NEAR(double(positive), 500000.0, 3000.0);
}

TEST(RandomStatistics, NormalFloat64) {
  constexpr int64_t n = 1000000;
  Generator g(271828);
  Tensor x = randn({n}, kFloat64, &g);
  ASSERT_EQ(x.dtype(), kFloat64);
  std::vector<double> v = x.to_vector<double>();
  for (double s : v) ASSERT_TRUE(std::isfinite(s)) << "randn gave " << s;
  Moments m = moments(v);
  EXPECT_NEAR(m.mean, 0.0, 5e-3);  // same bounds as float32
  EXPECT_NEAR(m.var, 1.0, 1e-2);
  EXPECT_NEAR(m.m4, 3.0, 0.06);
}

void check_uniform(DType dt, uint64_t seed) {
  constexpr int64_t n = 1000000;
  Generator g(seed);
  Tensor x = rand({n}, dt, &g);
  ASSERT_EQ(x.dtype(), dt);
  std::vector<double> v = x.to_vector<double>();
  Moments m = moments(v);
  EXPECT_GE(m.min, 0.0) << dtype_name(dt);
  EXPECT_LT(m.max, 1.0) << dtype_name(dt);
  // U[0, 1): mean 1/2 with SE sqrt(1/12/n) = 2.9e-4 -> bound 3e-3 is 10 SE.
  EXPECT_NEAR(m.mean, 0.5, 3e-3) << dtype_name(dt);
  // Variance 1/12; SE sqrt((1/80 - 1/144)/n) = 7.5e-5 -> bound 1e-3 is 13 SE.
  EXPECT_NEAR(m.var, 1.0 / 12.0, 1e-3) << dtype_name(dt);
  // 100 equal bins: chi-square with 99 degrees of freedom; P(chi2 > 181) ~ 1e-6.
  std::vector<int64_t> bins(100);
  for (double s : v) bins[std::min<size_t>(99, size_t(s * 100))]++;
  EXPECT_LT(chi_square_uniform(bins, n), 181.0) << dtype_name(dt);
  // Values near both ends occur (no folding of the range): each end bin expects 1e4.
  EXPECT_GT(bins[0], 9000) << dtype_name(dt);
  EXPECT_GT(bins[99], 9000) << dtype_name(dt);
}

TEST(RandomStatistics, UniformFloat32) { check_uniform(kFloat32, 8675309); }
TEST(RandomStatistics, UniformFloat64) { check_uniform(kFloat64, 1234567); }

TEST(RandomStatistics, UniformFloat64HasMoreThan32Bits) {
  // rand(float64) uses 53 random bits (philox.h's uniform_double): with only 32, every value
  // would be a multiple of 2^-32.
  Generator g(11);
  std::vector<double> v = rand({1000}, kFloat64, &g).to_vector<double>();
  int off_grid = 0;
  for (double s : v) off_grid += std::ldexp(s, 32) != std::floor(std::ldexp(s, 32));
  EXPECT_GT(off_grid, 900);
}

TEST(RandomStatistics, RandintRangeCoverageAndUniformity) {
  constexpr int64_t n = 100000, low = -3, high = 7, k = high - low;
  Generator g(4242);
  Tensor x = randint(low, high, {n}, kInt64, &g);
  ASSERT_EQ(x.dtype(), kInt64);
  std::vector<int64_t> v = x.to_vector<int64_t>();
  std::vector<int64_t> counts(k);
  for (int64_t s : v) {
    ASSERT_GE(s, low);
    ASSERT_LT(s, high);
    counts[size_t(s - low)]++;
  }
  for (int64_t c = 0; c < k; ++c) EXPECT_GT(counts[size_t(c)], 0) << "value " << (c + low) << " never drawn";
  // 10 values, 1e4 expected each: chi-square with 9 degrees of freedom; P(chi2 > 46) ~ 1e-6.
  EXPECT_LT(chi_square_uniform(counts, n), 46.0);
}

TEST(RandomStatistics, RandintInt32AndSmallRanges) {
  Generator g(77);
  Tensor x = randint(0, 2, {10000}, kInt32, &g);
  EXPECT_EQ(x.dtype(), kInt32);
  std::vector<int32_t> v = x.to_vector<int32_t>();
  int64_t ones_count = std::count(v.begin(), v.end(), 1);
  EXPECT_EQ(std::count(v.begin(), v.end(), 0) + ones_count, 10000);
  EXPECT_NEAR(double(ones_count), 5000.0, 300.0);  // SE 50
  // A one-value range always gives that value.
  std::vector<int64_t> one = randint(9, 10, {100}, kInt64, &g).to_vector<int64_t>();
  EXPECT_EQ(std::count(one.begin(), one.end(), 9), 100);
  // uint8 output.
  std::vector<int64_t> u8 = randint(0, 256, {5000}, kUInt8, &g).to_vector<int64_t>();
  EXPECT_EQ(*std::max_element(u8.begin(), u8.end()), 255);
  EXPECT_EQ(*std::min_element(u8.begin(), u8.end()), 0);
}

TEST(RandomStatistics, RandintWideRangeUsesAllBits) {
  // [0, 2^40): half the values are >= 2^39, which needs more than 32 random bits.
  constexpr int64_t high = int64_t(1) << 40;
  Generator g(5150);
  std::vector<int64_t> v = randint(0, high, {10000}, kInt64, &g).to_vector<int64_t>();
  int64_t upper = 0;
  for (int64_t s : v) {
    ASSERT_GE(s, 0);
    ASSERT_LT(s, high);
    upper += s >= (high / 2);
  }
  EXPECT_NEAR(double(upper), 5000.0, 300.0);
  // Negative ranges far from zero.
  std::vector<int64_t> w = randint(-(int64_t(1) << 50), -(int64_t(1) << 49), {1000}, kInt64, &g).to_vector<int64_t>();
  for (int64_t s : w) {
    ASSERT_GE(s, -(int64_t(1) << 50));
    ASSERT_LT(s, -(int64_t(1) << 49));
  }
}

}  // namespace
}  // namespace ember
