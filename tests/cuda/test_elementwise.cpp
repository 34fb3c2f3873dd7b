// The elementwise kernels (kernels/cuda/elementwise.cuh) against the CPU backend: unary
// and binary math on awkward sizes, misaligned and strided operands, broadcasts, casts
// between every pair of the dtypes that matter, fill, arange and linspace.
#include <cmath>
#include <limits>

#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace ember::kernels::cuda::test;

// The CPU backend's answer, as doubles.
std::vector<double> cpu(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }
Tensor cpu_tensor(const std::vector<double>& v, const Shape& shape, DType dtype = kFloat32) {
  return ember::tensor(v, shape, dtype);
}

// f32 elementwise math: within 1e-5 relative (a few hundred float32 ulp: the emulator
// uses the same libm as the CPU backend, a GPU's differs by a few ulp), plus 1e-7 absolute for the
// results that cross zero (erf, tanh, gelu of tiny inputs).
constexpr double kF32Rtol = 1e-5, kF32Atol = 1e-7;

template <class Op>
void check_unary(Tensor (*reference)(const Tensor&), double lo, double hi, double atol = kF32Atol) {
  for (int64_t n : kAwkwardSizes) {
    for (size_t in_off : {0, 1}) {
      for (size_t out_off : {0, 1}) {
        const auto values = random_doubles(n, uint32_t(n + 7 * in_off + 3 * out_off), lo, hi);
        const auto x = from_doubles<float>(values);
        DeviceArray<float> in(x, in_off), out(n, out_off);
        unary<Op>(in.data(), contiguous_layout(n), out.data(), contiguous_layout(n));
        const auto want = cpu(reference(cpu_tensor(values, {n})));
        ASSERT_TRUE(all_close(out.host(), want, kF32Rtol, atol))
            << "n " << n << ", input offset " << in_off << ", output offset " << out_off;
      }
    }
  }
}

TEST(CudaElementwise, UnaryMathMatchesTheCpuBackend) {
  EMBER_NEED_DEVICE();
  check_unary<ops::Neg>(ember::neg, -3, 3);
  check_unary<ops::Abs>(ember::abs, -3, 3);
  check_unary<ops::Exp>(ember::exp, -10, 10);
  check_unary<ops::Log>(ember::log, 1e-3, 100);
  check_unary<ops::Sqrt>(ember::sqrt, 0, 100);
  check_unary<ops::Rsqrt>(ember::rsqrt, 1e-3, 100);
  check_unary<ops::Relu>(ember::relu, -3, 3);
  check_unary<ops::Erf>(ember::erf, -3, 3);
  check_unary<ops::Tanh>(ember::tanh, -5, 5);
  check_unary<ops::Sigmoid>(ember::sigmoid, -20, 20);
  // Below x = -3.6, 1 + erf (or 1 + tanh) keeps few digits, so one ulp of the GPU's erff or
  // tanhf (CUDA's differ from glibc's by up to 2) moves gelu by up to 1.5e-7 absolute.
  check_unary<ops::Gelu>([](const Tensor& t) { return ember::gelu(t); }, -5, 5, 4e-7);
  check_unary<ops::GeluTanh>([](const Tensor& t) { return ember::gelu(t, true); }, -5, 5, 4e-7);
}

TEST(CudaElementwise, UnaryKeepsNanAndInfinities) {
  EMBER_NEED_DEVICE();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f};
  DeviceArray<float> in(x), out(x.size());
  unary<ops::Relu>(in.data(), contiguous_layout(5), out.data(), contiguous_layout(5));
  const auto y = out.host();
  EXPECT_TRUE(std::isnan(y[0]));  // relu keeps NaN, as PyTorch
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 0.0f);
  unary<ops::Sigmoid>(in.data(), contiguous_layout(5), out.data(), contiguous_layout(5));
  const auto s = out.host();
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(s[2], 0.0f);
}

TEST(CudaElementwise, UnaryOnBf16AndDoubleAndStridedViews) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 33, cols = 65;
  const auto values = random_doubles(rows * cols, 11, -4, 4);
  // bf16: computed in float and rounded once, as the CPU backend does: equal bits in the
  // emulator; on a GPU, tanhf's last bit may differ from glibc's and move a value that
  // sits at a rounding midpoint by one bf16 ulp (2^-8 relative).
  {
    const auto x = from_doubles<__nv_bfloat16>(values);
    DeviceArray<__nv_bfloat16> in(x, 1), out(x.size());
    unary<ops::Tanh>(in.data(), contiguous_layout(rows * cols), out.data(), contiguous_layout(rows * cols));
    const auto want = cpu(ember::tanh(cpu_tensor(values, {rows * cols}, kBFloat16)));
#if defined(__CUDACC__)
    EXPECT_TRUE(all_close(out.host(), want, 1.0 / 256));
#else
    EXPECT_TRUE(all_close(out.host(), want, 0.0));
#endif
  }
  // double, read through a transposed view: out[c][r] = exp(x[r][c]).
  {
    DeviceArray<double> in(values), out(values.size());
    unary<ops::Exp>(in.data(), make_layout({cols, rows}, {1, cols}), out.data(), make_layout({cols, rows}, {rows, 1}));
    const auto want = cpu(ember::exp(cpu_tensor(values, {rows, cols}, kFloat64).t()));
    EXPECT_TRUE(all_close(out.host(), want, 1e-15));
  }
}

template <class Op, class R = float>
void check_binary(Tensor (*reference)(const Tensor&, const Tensor&), const Shape& a_shape, const Shape& b_shape,
                  double lo, double hi) {
  // Broadcast shapes to the output's, with stride 0 where a size is 1.
  const Shape out_shape = {std::max(a_shape[0], b_shape[0]), std::max(a_shape[1], b_shape[1])};
  auto broadcast = [&](const Shape& s) {
    return make_layout({out_shape[0], out_shape[1]}, {s[0] == 1 ? 0 : s[1], s[1] == 1 ? 0 : 1});
  };
  const auto av = random_doubles(a_shape[0] * a_shape[1], 21, lo, hi);
  auto bv = random_doubles(b_shape[0] * b_shape[1], 22, lo, hi);
  if (!bv.empty()) bv[0] = av.empty() ? bv[0] : av[0];  // one tie for the comparisons
  DeviceArray<float> a(from_doubles<float>(av)), b(from_doubles<float>(bv), 1);
  const int64_t n = out_shape[0] * out_shape[1];
  DeviceArray<R> out(n);
  binary<Op, R>(a.data(), broadcast(a_shape), b.data(), broadcast(b_shape), out.data(),
                make_layout({out_shape[0], out_shape[1]}, {out_shape[1], 1}));
  const auto want = cpu(reference(cpu_tensor(av, a_shape), cpu_tensor(bv, b_shape)));
  ASSERT_TRUE(all_close(out.host(), want, kF32Rtol, kF32Atol))
      << "[" << a_shape[0] << "," << a_shape[1] << "] op [" << b_shape[0] << "," << b_shape[1] << "]";
}

TEST(CudaElementwise, BinaryMathWithBroadcasting) {
  EMBER_NEED_DEVICE();
  for (auto [a, b] : {std::pair<Shape, Shape>{{33, 65}, {33, 65}}, {{33, 1}, {1, 65}}, {{1, 4097}, {1, 1}},
                      {{1, 1}, {31, 32}}, {{0, 5}, {0, 5}}, {{1, 1023}, {1, 1023}}}) {
    check_binary<ops::Add>(ember::add, a, b, -3, 3);
    check_binary<ops::Sub>(ember::sub, a, b, -3, 3);
    check_binary<ops::Mul>(ember::mul, a, b, -3, 3);
    check_binary<ops::Div>(ember::div, a, b, 0.5, 3);
    check_binary<ops::Pow>(ember::pow, a, b, 0.1, 2);
    check_binary<ops::Maximum>(ember::maximum, a, b, -3, 3);
    check_binary<ops::Minimum>(ember::minimum, a, b, -3, 3);
    check_binary<ops::Lt, bool>(ember::lt, a, b, -3, 3);
    check_binary<ops::Ge, bool>(ember::ge, a, b, -3, 3);
    check_binary<ops::Eq, bool>(ember::eq, a, b, -3, 3);
  }
}

// Each cast as Tensor::to converts on the CPU: bit for bit.
template <class From, class To>
void check_cast(DType from, DType to, double lo, double hi) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(33), int64_t(4097)}) {
    auto values = random_doubles(n, uint32_t(n + 5), lo, hi);
    const Tensor src = cpu_tensor(values, {n}).to(kFloat64).to(from);  // values representable in From
    std::vector<From> x(n);
    const auto exact = cpu(src);
    for (int64_t i = 0; i < n; ++i) x[i] = from_double<From>(exact[i]);
    DeviceArray<From> in(x, 1);
    DeviceArray<To> out(n);
    cast<To, From>(in.data(), contiguous_layout(n), out.data(), contiguous_layout(n));
    ASSERT_TRUE(all_close(out.host(), cpu(src.to(to)), 0.0))
        << dtype_name(from) << " -> " << dtype_name(to) << ", n " << n;
  }
}

TEST(CudaElementwise, CastsMatchTheCpuBitForBit) {
  EMBER_NEED_DEVICE();
  check_cast<float, __nv_bfloat16>(kFloat32, kBFloat16, -1e4, 1e4);
  check_cast<float, __half>(kFloat32, kFloat16, -6e4, 6e4);
  check_cast<double, __nv_bfloat16>(kFloat64, kBFloat16, -3, 3);
  check_cast<double, float>(kFloat64, kFloat32, -3, 3);
  check_cast<__nv_bfloat16, float>(kBFloat16, kFloat32, -3, 3);
  check_cast<__half, double>(kFloat16, kFloat64, -3, 3);
  check_cast<__half, __nv_bfloat16>(kFloat16, kBFloat16, -3, 3);
  check_cast<float, int32_t>(kFloat32, kInt32, -1e6, 1e6);
  check_cast<float, int64_t>(kFloat32, kInt64, -1e6, 1e6);
  check_cast<int64_t, float>(kInt64, kFloat32, -1e9, 1e9);
  check_cast<int32_t, double>(kInt32, kFloat64, -1e9, 1e9);
  check_cast<float, bool>(kFloat32, kBool, -1, 1);
  check_cast<bool, float>(kBool, kFloat32, -1, 1);
  check_cast<float, uint8_t>(kFloat32, kUInt8, 0, 255);
}

TEST(CudaElementwise, CopyBetweenLayouts) {
  EMBER_NEED_DEVICE();
  // A [7, 9, 5] tensor permuted to [5, 7, 9] and copied into contiguous memory, as f32 -> f16.
  const int64_t a = 7, b = 9, c = 5;
  const auto values = random_doubles(a * b * c, 31);
  DeviceArray<float> in(from_doubles<float>(values));
  DeviceArray<__half> out(a * b * c);
  cast<__half, float>(in.data(), make_layout({c, a, b}, {1, b * c, c}), out.data(),
                      make_layout({c, a, b}, {a * b, b, 1}));
  const auto want = cpu(cpu_tensor(values, {a, b, c}).permute({2, 0, 1}).to(kFloat16));
  EXPECT_TRUE(all_close(out.host(), want, 0.0));
}

// A same-type copy of a transposed view into a row-major output takes the tiled transpose
// (as the copy op does), bit for bit; into a strided output, or from a view that is not
// transposed, the map kernels.
TEST(CudaElementwise, CopyOfTransposedViewsTakesTheTiles) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 70, cols = 45;
  const auto values = random_doubles(rows * cols, 41, -3, 3);
  const Layout transposed = make_layout({cols, rows}, {1, cols});
  ASSERT_EQ(permute_path(transposed), PermutePath::kTiled);
  DeviceArray<float> in(from_doubles<float>(values), 1), out(rows * cols, 1), wide(2 * rows * cols);
  cast<float, float>(in.data(), transposed, out.data(), make_layout({cols, rows}, {rows, 1}));
  const auto want = cpu(cpu_tensor(values, {rows, cols}).t());
  EXPECT_TRUE(all_close(out.host(), want, 0.0));
  // Every other element of the output: not row-major, so the strided map kernel.
  cast<float, float>(in.data(), transposed, wide.data(), make_layout({cols, rows}, {2 * rows, 2}));
  const auto w = wide.host();
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(double(w[size_t(2 * i)]), want[size_t(i)]) << i;
  EXPECT_TRUE(std::isnan(w[1]));
}

// The contiguous map kernel moves 4 packs a thread a turn: sizes past one turn of the
// whole grid (the emulator's 4 SMs: 32 blocks of 256 threads, 131072 floats), with a
// scalar head and tail, for 0, 1 and 2 inputs.
TEST(CudaElementwise, ContiguousMapOverSeveralGridTurns) {
  EMBER_NEED_DEVICE();
  const int64_t n = 3 * 131072 + 5;
  const auto av = random_doubles(n, 51, -3, 3), bv = random_doubles(n, 52, -3, 3);
  DeviceArray<float> a(from_doubles<float>(av), 1), b(from_doubles<float>(bv), 1), out(n, 1);
  binary<ops::Add, float>(a.data(), contiguous_layout(n), b.data(), contiguous_layout(n), out.data(),
                          contiguous_layout(n));
  EXPECT_TRUE(all_close(out.host(), cpu(ember::add(cpu_tensor(av, {n}), cpu_tensor(bv, {n}))), 0.0));
  DeviceArray<__nv_bfloat16> h(n, 1);
  cast<__nv_bfloat16, float>(a.data(), contiguous_layout(n), h.data(), contiguous_layout(n));
  EXPECT_TRUE(all_close(h.host(), cpu(cpu_tensor(av, {n}).to(kBFloat16)), 0.0));
  fill(out.data(), contiguous_layout(n), 2.5f);
  for (float x : out.host()) ASSERT_EQ(x, 2.5f);
}

TEST(CudaElementwise, FillStridedLeavesTheGapsAlone) {
  EMBER_NEED_DEVICE();
  // Fill every other column of a [31, 66] matrix; the other columns keep their poison.
  const int64_t rows = 31, cols = 66;
  DeviceArray<float> m(rows * cols);
  fill(m.data(), make_layout({rows, cols / 2}, {cols, 2}), 2.5f);
  const auto h = m.host();
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (i % 2 == 0) ASSERT_EQ(h[i], 2.5f) << i;
    else ASSERT_TRUE(std::isnan(h[i])) << i;
  }
  for (int64_t n : kAwkwardSizes) {
    DeviceArray<int64_t> v(n, 1);
    fill<int64_t>(v.data(), contiguous_layout(n), -3);
    for (int64_t x : v.host()) ASSERT_EQ(x, -3);
  }
}

TEST(CudaElementwise, ArangeAndLinspaceMatchTheCpu) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes) {
    DeviceArray<float> f(n);
    arange(f.data(), n, -1.5, 0.25);
    EXPECT_TRUE(all_close(f.host(), cpu(ember::arange(-1.5, n == 0 ? -1.5 : -1.5 + 0.25 * n - 0.125, 0.25, kFloat32)), 0.0)) << n;
    // start + step * i: whether it is one fused multiply-add or two roundings depends on
    // the compiler and the CPU's flags (GCC fuses with -march=native, nvcc always): one
    // ulp of the endpoints' magnitude apart at most.
    DeviceArray<double> d(n);
    linspace(d.data(), n, -2.0, 3.0);
    EXPECT_TRUE(all_close(d.host(), cpu(ember::linspace(-2.0, 3.0, n, kFloat64)), 0.0, 3.0 * 0x1p-52)) << n;
  }
}

// The strided kernels' indexer, in 64 and 32 bits, against offsets computed from each
// element's multi-index; and where 32 bits stop sufficing. Host code: no device needed.
TEST(CudaElementwise, IndexerOffsetsIn64And32BitsAgree) {
  struct Case {
    Layout out, a, b;
  };
  const std::vector<Case> cases = {
      {make_layout({33, 65}, {65, 1}), make_layout({33, 65}, {1, 0}), make_layout({33, 65}, {0, 1})},
      {make_layout({5, 7, 9}, {63, 9, 1}), make_layout({5, 7, 9}, {1, 45, 5}), make_layout({5, 7, 9}, {0, 9, 1})},
      {make_layout({3, 1, 4, 6}, {24, 24, 6, 1}), make_layout({3, 1, 4, 6}, {2, 7, 1, 12}),
       make_layout({3, 1, 4, 6}, {100, 3, 25, 4})},
  };
  for (const Case& c : cases) {
    const Layout* const layouts[3] = {&c.out, &c.a, &c.b};
    const Indexer<3> wide = make_indexer<3>(layouts);
    const int64_t n = numel(c.out);
    ASSERT_TRUE(wide.fits_32_bits(n));
    const Indexer<3, uint32_t> narrow = wide.narrow();
    for (int64_t i = 0; i < n; ++i) {
      int64_t want[3] = {0, 0, 0};
      int64_t below = 1;  // elements per step of dim d
      for (int d = c.out.ndim - 1; d >= 0; --d) {
        const int64_t idx = i / below % c.out.sizes[d];
        for (int k = 0; k < 3; ++k) want[k] += idx * layouts[k]->strides[d];
        below *= c.out.sizes[d];
      }
      int64_t got64[3];
      uint32_t got32[3];
      wide.offsets(i, got64);
      narrow.offsets(static_cast<uint32_t>(i), got32);
      for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(got64[k], want[k]) << "element " << i << " operand " << k;
        ASSERT_EQ(int64_t(got32[k]), want[k]) << "element " << i << " operand " << k;
      }
    }
  }
  // The largest offset decides: 2^31 - 1 fits, 2^31 does not; nor do 2^31 elements.
  const int64_t big = int64_t{1} << 30;
  auto fits = [](const Layout& l, int64_t n) {
    const Layout* const one[1] = {&l};
    return make_indexer<1>(one).fits_32_bits(n);
  };
  EXPECT_TRUE(fits(make_layout({2, 2}, {big, big - 1}), 4));  // last offset 2^30 + 2^30 - 1
  EXPECT_FALSE(fits(make_layout({2, 2}, {big, big}), 4));     // last offset 2^31
  EXPECT_FALSE(fits(make_layout({3, 2}, {big - 1, big + 1}), 6));
  EXPECT_TRUE(fits(contiguous_layout(4), (int64_t{1} << 31) - 1));
  EXPECT_FALSE(fits(contiguous_layout(4), int64_t{1} << 31));
}

TEST(CudaElementwise, MismatchedLayoutsAreAnError) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> a(10), out(12);
  EXPECT_THROW(unary<ops::Neg>(a.data(), contiguous_layout(10), out.data(), contiguous_layout(12)), Error);
  EXPECT_THROW(make_layout({1, 2}, {1}), Error);
}

}  // namespace
}  // namespace ember::kernels::cuda
