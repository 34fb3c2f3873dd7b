// matmul, linear and conv2d on the shapes and layouts where a device GEMM goes wrong
// first: sizes that leave partial tiles (1, 7, 33, 129), transposed and strided
// operands (the ones a GEMM reads as they are and the ones it must pack), batch stride 0,
// and convolutions with stride 2, padding, dilation and groups, forward and backward;
// each against a float64 loop with the error bound of its summation. On cuda each runs
// under every GEMM variant the build has (kernels/cuda/variants.h). Pooling and the
// optimizer updates are compared with the CPU backend, which they must match.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "conv_reference.h"
#include "tests/device.h"
#include "ember.h"
#include "kernels/cuda/variants.h"
#include "reference.h"

namespace ember::test {
namespace {

// The GEMM variants to run under: the one default on the CPU, every named one on cuda.
std::vector<std::string> gemm_variants() {
  if (!on_cuda()) return {"default"};
  std::vector<std::string> v = {"auto", "sgemm-v1", "sgemm-v2", "sgemm-v3", "sgemm-v4", "sgemm-v5", "sgemm-v6"};
#if !defined(EMBER_CUDA_EMULATED)
  v.push_back("cublaslt");
#endif
  return v;
}

// Sets a GEMM (and conv2d) variant on cuda for the scope; "default" changes nothing.
// conv "cudnn-benchmark": cuDNN with its algorithms timed (set_conv_benchmark).
struct VariantScope {
  explicit VariantScope(const std::string& gemm, const std::string& conv = "default") {
    if (gemm != "default") kernels::cuda::set_gemm_variant(gemm);
    if (conv == "cudnn-benchmark") {
      kernels::cuda::set_conv_variant("cudnn");
      kernels::cuda::set_conv_benchmark(true);
    } else if (conv != "default") {
      kernels::cuda::set_conv_variant(conv);
    }
  }
  ~VariantScope() {
    if (!on_cuda()) return;
    kernels::cuda::set_gemm_variant("auto");
    kernels::cuda::set_conv_variant("auto");
    kernels::cuda::set_conv_benchmark(false);
  }
};

// conv2d's (GEMM, conv) variant pairs: im2col under every GEMM, the default (cuDNN where
// the build has it), and on a GPU cuDNN in benchmark mode.
std::vector<std::pair<std::string, std::string>> conv_variants() {
  std::vector<std::pair<std::string, std::string>> v;
  for (const std::string& g : gemm_variants()) v.emplace_back(g, on_cuda() ? "im2col" : "default");
  if (on_cuda()) v.emplace_back("auto", "auto");
#if !EMBER_CUDA_EMULATED
  if (on_cuda()) v.emplace_back("auto", "cudnn-benchmark");
#endif
  return v;
}

// Note [GEMM tolerance]: a length-K dot product summed in any order has |error| <=
// K * u * S with S = sum |a_k b_k| and u the unit roundoff; the inputs are exact, so that
// bound, with u = 2^-24 (float32) or 2^-53 (float64), holds for every variant.

// out[b] = a[b] @ bb[b] for [B, M, K] @ [B, K, N] values (batch already expanded), and S.
void ref_bmm(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M, int64_t N, int64_t K,
             std::vector<double>& out, std::vector<double>& s) {
  out.assign(B * M * N, 0.0);
  s.assign(B * M * N, 0.0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0, abs = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = a[(i * M + m) * K + k] * b[(i * K + k) * N + n];
          acc += p;
          abs += std::fabs(p);
        }
        out[(i * M + m) * N + n] = acc;
        s[(i * M + m) * N + n] = abs;
      }
}

// K terms summed in `d`, beside the float64 loops' sum of the same terms: each within
// about K u S of the exact one, so the two within K (u_d + 2^-53) S. For float64 the
// reference's own rounding is as large as the result's (seen on an H200: cuDNN's float64
// backward-data two ulp from the loops, with three terms).
std::vector<double> tolerance(const std::vector<double>& s, DType d, int64_t K) {
  std::vector<double> tol(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    tol[i] = double(std::max<int64_t>(K, 1)) * (dtype_unit_roundoff(d) + 0x1p-53) * s[i] + 1e-300;
  return tol;
}

struct Mnk {
  int64_t m, n, k;
};
std::string mnk_name(const Mnk& s) {
  return "m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k);
}
const Mnk kAwkward[] = {{1, 1, 1},   {7, 33, 129}, {129, 7, 33}, {33, 129, 7}, {1, 129, 33},
                        {129, 1, 7}, {7, 7, 1},    {33, 33, 33}, {129, 129, 129}};

TEST(GemmShapes, MatmulAwkwardSizesAndLayouts) {
  uint64_t seed = 100;
  for (const std::string& variant : gemm_variants()) {
    const VariantScope scope(variant);
    for (DType dtype : {kFloat32, kFloat64})
      for (const Mnk& s : kAwkward)
        for (Layout la : {Layout::Contiguous, Layout::Transposed, Layout::Strided})
          for (Layout lb : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
            SCOPED_TRACE(variant + " " + std::string(dtype_name(dtype)) + " " + mnk_name(s) + " " + layout_name(la) +
                         " @ " + layout_name(lb));
            const Tensor a = random_tensor({s.m, s.k}, dtype, la, seed++);
            const Tensor b = random_tensor({s.k, s.n}, dtype, lb, seed++);
            std::vector<double> want, abs;
            ref_bmm(values(a), values(b), 1, s.m, s.n, s.k, want, abs);
            EXPECT_TRUE(all_close_tol(matmul(a, b), want, {s.m, s.n}, tolerance(abs, dtype, s.k)));
          }
  }
}

// A batch stride of 0 (one matrix broadcast over the batch) on either side.
TEST(GemmShapes, BatchBroadcastReadsOneMatrix) {
  const int64_t B = 3, M = 7, N = 33, K = 129;
  for (const std::string& variant : gemm_variants()) {
    const VariantScope scope(variant);
    SCOPED_TRACE(variant);
    const Tensor a1 = random_tensor({1, M, K}, kFloat32, Layout::Contiguous, 7);
    const Tensor b3 = random_tensor({B, K, N}, kFloat32, Layout::Transposed, 8);
    const Tensor a3 = a1.expand({B, M, K}), b1 = b3.narrow(0, 1, 1).expand({B, K, N});
    for (const auto& [a, b] : {std::pair{a3, b3}, std::pair{b3.transpose(1, 2), a3.transpose(1, 2)},
                               std::pair{a3, b1}}) {
      std::vector<double> want, abs;
      ref_bmm(values(a), values(b), B, a.size(1), b.size(2), a.size(2), want, abs);
      EXPECT_TRUE(all_close_tol(matmul(a, b), want, {B, a.size(1), b.size(2)}, tolerance(abs, kFloat32, a.size(2))));
    }
  }
}

TEST(GemmShapes, IntegerMatmulIsExact) {
  std::vector<double> va(7 * 33), vb(33 * 5);
  for (size_t i = 0; i < va.size(); ++i) va[i] = double(int64_t(i * 37 % 19) - 9);
  for (size_t i = 0; i < vb.size(); ++i) vb[i] = double(int64_t(i * 11 % 13) - 6);
  for (DType dtype : {kInt32, kInt64}) {
    const Tensor a = tensor(va, {7, 33}, dtype), b = tensor(vb, {5, 33}, dtype).t();
    std::vector<double> want, abs;
    ref_bmm(va, values(b), 1, 7, 5, 33, want, abs);
    EXPECT_CLOSE(matmul(a, b), want, Shape({7, 5}), 0, 0);
  }
}

// float32, float64 and the 16-bit types (which reach the cuda GEMM as they are).
TEST(GemmShapes, LinearBiasAndReluInTheEpilogue) {
  uint64_t seed = 300;
  for (const std::string& variant : gemm_variants()) {
    const VariantScope scope(variant);
    for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16})
      for (const Mnk& s : kAwkward)
        for (bool bias : {false, true})
          for (bool relu : {false, true}) {
            SCOPED_TRACE(variant + " " + std::string(dtype_name(dtype)) + " " + mnk_name(s) + (bias ? " bias" : "") +
                         (relu ? " relu" : ""));
            const Tensor x = random_tensor({s.m, s.k}, dtype, Layout::Contiguous, seed++);
            const Tensor w = random_tensor({s.n, s.k}, dtype, Layout::Contiguous, seed++);
            const Tensor b = bias ? random_tensor({s.n}, dtype, Layout::Contiguous, seed++) : Tensor();
            std::vector<double> want, abs;
            ref_bmm(values(x), values(w.t()), 1, s.m, s.n, s.k, want, abs);
            const std::vector<double> vb = bias ? values(b) : std::vector<double>(s.n, 0.0);
            for (size_t i = 0; i < want.size(); ++i) {
              want[i] += vb[i % s.n];
              abs[i] += std::fabs(vb[i % s.n]);
              if (relu) want[i] = std::max(want[i], 0.0);
            }
            const Tensor y = linear(x, w, b, relu ? Activation::kReLU : Activation::kNone);
            // 16-bit: summed in float32, then rounded once to 8 (bf16) or 11 (f16) bits.
            std::vector<double> tol = tolerance(abs, dtype, s.k + 1);
            const int bits = dtype == kBFloat16 ? 8 : dtype == kFloat16 ? 11 : 0;
            if (bits)
              for (size_t i = 0; i < tol.size(); ++i) tol[i] += std::ldexp(std::fabs(want[i]), -bits);
            EXPECT_TRUE(all_close_tol(y, want, {s.m, s.n}, tol));
          }
  }
}

// TF32 is off by default; allowed, float32 products may carry TF32's 11-bit operands:
// each product within 2^-10 of its exact value, so the error stays below (2^-10 + K u) S.
TEST(GemmShapes, Tf32IsOffByDefaultAndBoundedWhenAllowed) {
  EXPECT_FALSE(allow_tf32());
  const int64_t M = 33, N = 65, K = 257;
  const Tensor a = random_tensor({M, K}, kFloat32, Layout::Contiguous, 71);
  const Tensor b = random_tensor({K, N}, kFloat32, Layout::Transposed, 72);
  std::vector<double> want, abs;
  ref_bmm(values(a), values(b), 1, M, N, K, want, abs);
  set_allow_tf32(true);
  const Tensor c = matmul(a, b);
  set_allow_tf32(false);
  std::vector<double> tol = tolerance(abs, kFloat32, K);
  for (size_t i = 0; i < tol.size(); ++i) tol[i] += std::ldexp(abs[i], -10);
  EXPECT_TRUE(all_close_tol(c, want, {M, N}, tol));
}

// ----- conv2d -----
const ConvCase kConvCases[] = {
    // n, c, h, w, o, kh, kw, stride, padding, dilation, groups, bias
    {2, 3, 9, 7, 5, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, true},   // stride 2, padding
    {1, 4, 11, 10, 6, 3, 2, {1, 2}, {2, 0}, {2, 3}, 2, true},  // dilation, groups, asymmetric
    {3, 6, 5, 5, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 6, false},  // depthwise
    {2, 8, 4, 6, 3, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1: the input is its own columns
    {1, 1, 33, 7, 2, 5, 1, {3, 1}, {2, 0}, {1, 1}, 1, true},  // tall kernel, stride 3
    {0, 3, 5, 5, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},   // an empty batch: zero weight gradients
};

// grad_x and grad_w of sum(y * gy) by direct loops, with their error scales.
void ref_conv_backward(const ConvCase& p, const std::vector<double>& x, const std::vector<double>& w,
                       const std::vector<double>& gy, int64_t oh, int64_t ow, std::vector<double>& gx,
                       std::vector<double>& gx_abs, std::vector<double>& gw, std::vector<double>& gw_abs) {
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  gx.assign(p.n * p.c * p.h * p.w, 0.0);
  gx_abs = gx;
  gw.assign(p.o * cg * p.kh * p.kw, 0.0);
  gw_abs = gw;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < p.kh; ++i)
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t hy = y * p.stride.first - p.padding.first + i * p.dilation.first;
                const int64_t wz = z * p.stride.second - p.padding.second + j * p.dilation.second;
                if (hy < 0 || hy >= p.h || wz < 0 || wz >= p.w) continue;
                const int64_t xi = ((n * p.c + (o / og) * cg + ci) * p.h + hy) * p.w + wz;
                const int64_t wi = ((o * cg + ci) * p.kh + i) * p.kw + j;
                const double g = gy[((n * p.o + o) * oh + y) * ow + z];
                gx[xi] += g * w[wi];
                gx_abs[xi] += std::fabs(g * w[wi]);
                gw[wi] += g * x[xi];
                gw_abs[wi] += std::fabs(g * x[xi]);
              }
}

TEST(ConvShapes, OddShapesForwardAndBackward) {
  uint64_t seed = 500;
  for (const auto& [gemm, conv] : conv_variants()) {
    const VariantScope scope(gemm, conv);
    for (DType dtype : {kFloat32, kFloat64})
      for (const ConvCase& p : kConvCases) {
        SCOPED_TRACE(gemm + " " + conv + " " + std::string(dtype_name(dtype)) + " groups " +
                     std::to_string(p.groups) + " c " + std::to_string(p.c) + " kernel " + std::to_string(p.kh) + "x" +
                     std::to_string(p.kw));
        const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, dtype, Layout::Contiguous, seed++);
        const Tensor w = random_tensor({p.o, p.c / p.groups, p.kh, p.kw}, dtype, Layout::Contiguous, seed++);
        const Tensor b = p.bias ? random_tensor({p.o}, dtype, Layout::Contiguous, seed++) : Tensor();
        x.requires_grad_();
        w.requires_grad_();
        if (b.defined()) b.requires_grad_();
        Shape shape;
        std::vector<double> scale;
        const std::vector<double> want = ref_conv(p, x, w, b, &shape, &scale);
        const Tensor y = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
        const int64_t K = p.c / p.groups * p.kh * p.kw + 1;
        EXPECT_TRUE(all_close_tol(y, want, shape, tolerance(scale, dtype, K)));

        const Tensor gy = random_tensor(shape, dtype, Layout::Contiguous, seed++);
        y.backward(gy);
        std::vector<double> gx, gx_abs, gw, gw_abs;
        ref_conv_backward(p, values(x), values(w), values(gy), shape[2], shape[3], gx, gx_abs, gw, gw_abs);
        const int64_t taps = p.o / p.groups * p.kh * p.kw, terms = p.n * shape[2] * shape[3];
        EXPECT_TRUE(all_close_tol(x.grad(), gx, x.shape(), tolerance(gx_abs, dtype, taps)));
        EXPECT_TRUE(all_close_tol(w.grad(), gw, w.shape(), tolerance(gw_abs, dtype, terms)));
        if (b.defined()) {
          std::vector<double> gb(p.o, 0.0), gb_abs(p.o, 0.0);
          const std::vector<double> vg = values(gy);
          for (size_t i = 0; i < vg.size(); ++i) {
            gb[i / (shape[2] * shape[3]) % p.o] += vg[i];
            gb_abs[i / (shape[2] * shape[3]) % p.o] += std::fabs(vg[i]);
          }
          EXPECT_TRUE(all_close_tol(b.grad(), gb, b.shape(), tolerance(gb_abs, dtype, terms)));
        }
      }
  }
}

TEST(ConvShapes, DeterministicModeRepeatsBitForBit) {
  if (!on_cuda()) GTEST_SKIP() << "a cuda setting";
  kernels::cuda::set_conv_deterministic(true);
  const ConvCase& p = kConvCases[0];
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, kFloat32, Layout::Contiguous, 61);
    const Tensor w = random_tensor({p.o, p.c, p.kh, p.kw}, kFloat32, Layout::Contiguous, 62);
    w.requires_grad_();
    x.requires_grad_();
    const Tensor y = conv2d(x, w, {}, p.stride, p.padding);
    y.backward(random_tensor(y.shape(), kFloat32, Layout::Contiguous, 63));
    runs.push_back(values(w.grad()));
    const std::vector<double> gx = values(x.grad());
    runs.back().insert(runs.back().end(), gx.begin(), gx.end());
  }
  kernels::cuda::set_conv_deterministic(false);
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(GemmShapes, VariantNamesAreChecked) {
  if (!on_cuda()) GTEST_SKIP() << "names of the cuda variants";
  EXPECT_TRUE(contains(error_of([] { kernels::cuda::set_gemm_variant("bogus"); }), "'bogus'"));
  EXPECT_TRUE(contains(error_of([] { kernels::cuda::set_gemm_variant("sgemm-v9"); }), "'v9'"));
  EXPECT_TRUE(contains(error_of([] { kernels::cuda::set_conv_variant("winograd"); }), "'winograd'"));
  kernels::cuda::set_gemm_variant("sgemm-register");
  EXPECT_EQ(kernels::cuda::gemm_variant(), "sgemm-register");
  kernels::cuda::set_gemm_variant("auto");
#if defined(EMBER_CUDA_EMULATED)
  EXPECT_TRUE(contains(error_of([] { kernels::cuda::set_gemm_variant("cublaslt"); }), "cublaslt"));
  EXPECT_TRUE(contains(error_of([] { kernels::cuda::set_conv_variant("cudnn"); }), "cudnn"));
#endif
}

// 16-bit convolutions sum in float32 and round once: within u16 |y| (2^-8 |y| for bf16)
// of the float32 result, which is within gamma_K(2^-24) S of the exact one (K = Cg kh kw
// + 1 terms, Note [GEMM tolerance]); the float64 loops add gamma_K(2^-53) S. On a GPU,
// cuDNN rounds the sum to bf16 before the bias is added and rounded again, as in PyTorch:
// one more u16 |y - b|.
TEST(ConvShapes, BFloat16ComputesInFloat32) {
  const ConvCase& p = kConvCases[1];
  const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, kBFloat16, Layout::Contiguous, 41);
  const Tensor w = random_tensor({p.o, p.c / p.groups, p.kh, p.kw}, kBFloat16, Layout::Contiguous, 42);
  const Tensor b = random_tensor({p.o}, kBFloat16, Layout::Contiguous, 43);
  Shape shape;
  std::vector<double> scale;
  const std::vector<double> want = ref_conv(p, x, w, b, &shape, &scale);
  std::vector<double> tol(want.size());
  const double K = double(p.c / p.groups * p.kh * p.kw + 1), u16 = dtype_unit_roundoff(kBFloat16);
  const std::vector<double> bias = values(b);
#if defined(EMBER_CUDA_EMULATED)
  const bool rounds_before_bias = false;  // no cuDNN: im2col adds the bias to the float32 sum
#else
  const bool rounds_before_bias = on_cuda() && kernels::cuda::conv_variant() != "im2col";
#endif
  for (size_t i = 0; i < tol.size(); ++i) {
    const double before_bias = want[i] - bias[i / (shape[2] * shape[3]) % shape[1]];
    tol[i] = u16 * std::fabs(want[i]) + dtype_underflow(kBFloat16) +
             ((1 + u16) * gamma_n(K, 0x1p-24) + gamma_n(K, 0x1p-53)) * scale[i] +
             (rounds_before_bias ? u16 * std::fabs(before_bias) : 0);
  }
  const Tensor y = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
  EXPECT_DTYPE(y, kBFloat16);
  EXPECT_TRUE(all_close_tol(y, want, shape, tol));
}

// A 16-bit bias gradient sums grad_output over N, H and W in float32 and rounds once:
// within u16 |g| + gamma_M(2^-24) sum |gy| of the float64 sum (M = N H W terms).
TEST(ConvShapes, Bias16BitGradientSumsInFloat32) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor({5, 3, 14, 14}, dtype, Layout::Contiguous, 51);
    const Tensor w = random_tensor({4, 3, 3, 3}, dtype, Layout::Contiguous, 52);
    const Tensor b = random_tensor({4}, dtype, Layout::Contiguous, 53);
    b.requires_grad_();
    const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
    const Tensor gy = random_tensor(y.shape(), dtype, Layout::Contiguous, 54);
    y.backward(gy);
    std::vector<double> want(4, 0.0), abs(4, 0.0);
    const std::vector<double> vg = values(gy);
    for (size_t i = 0; i < vg.size(); ++i) want[i / 196 % 4] += vg[i], abs[i / 196 % 4] += std::fabs(vg[i]);
    std::vector<double> tol(4);
    for (size_t o = 0; o < 4; ++o)
      tol[o] = dtype_unit_roundoff(dtype) * std::fabs(want[o]) + dtype_underflow(dtype) + gamma_n(5 * 196, 0x1p-24) * abs[o];
    EXPECT_DTYPE(b.grad(), dtype);
    EXPECT_TRUE(all_close_tol(b.grad(), want, {4}, tol));
  }
}

// ----- pooling and optimizer steps: the same results as the CPU backend -----
TEST(PoolShapes, MatchTheCpuBackend) {
  if (!on_cuda()) GTEST_SKIP() << "compares a device with the CPU backend";
  const Device cpu = Device::cpu();
  struct Case {
    Shape shape;
    Pool2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 9, 7}, {{3, 3}, std::pair<int64_t, int64_t>{2, 2}, {1, 1}}},
      {{1, 2, 8, 11}, {{2, 3}, std::pair<int64_t, int64_t>{2, 1}, {1, 0}, {1, 1}, true}},
      {{1, 4, 10, 10}, {{3, 2}, std::pair<int64_t, int64_t>{3, 2}, {0, 1}, {2, 1}}},
      {{2, 2, 6, 6}, {{2, 2}}},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.shape));
    const Tensor x = random_tensor(c.shape, kFloat32, Layout::Contiguous, seed++);
    const Tensor xc = x.to(cpu);
    auto [y, idx] = max_pool2d_with_indices(x, c.o);
    auto [yc, idxc] = max_pool2d_with_indices(xc, c.o);
    EXPECT_TRUE(all_close(y, yc, 0, 0));
    EXPECT_TRUE(all_close(idx, idxc, 0, 0));
    Pool2dOptions avg = c.o;
    avg.dilation = {1, 1};
    for (bool include_pad : {true, false}) {
      avg.count_include_pad = include_pad;
      EXPECT_TRUE(all_close(avg_pool2d(x, avg), avg_pool2d(xc, avg), 1e-6, 0));
    }
    // The backwards, through both index forms (max_pool2d's autograd keeps uint8 codes).
    for (bool average : {false, true}) {
      const Tensor xg = x.detach(), xgc = xc.detach();
      xg.requires_grad_();
      xgc.requires_grad_();
      const Tensor out = average ? avg_pool2d(xg, avg) : max_pool2d(xg, c.o);
      const Tensor outc = average ? avg_pool2d(xgc, avg) : max_pool2d(xgc, c.o);
      const Tensor g = random_tensor(out.shape(), kFloat32, Layout::Contiguous, seed++);
      out.backward(g);
      outc.backward(g.to(cpu));
      EXPECT_TRUE(all_close(xg.grad(), xgc.grad(), 1e-6, 1e-7)) << (average ? "avg" : "max");
    }
  }
}

TEST(OptimShapes, StepsMatchTheCpuBackend) {
  if (!on_cuda()) GTEST_SKIP() << "compares a device with the CPU backend";
  const Device cpu = Device::cpu();
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor p = random_tensor({1031}, dtype, Layout::Contiguous, 1), g = random_tensor({1031}, dtype,
                                                                                              Layout::Contiguous, 2);
    const Tensor pc = p.to(cpu), gc = g.to(cpu);
    const Tensor buf = zeros({1031}, dtype), bufc = zeros({1031}, {dtype, cpu});
    SgdStepOptions so;
    so.lr = 0.1, so.momentum = 0.9, so.weight_decay = 0.01, so.nesterov = true;
    for (bool first : {true, false}) {
      sgd_step_(p, g, buf, so, first);
      sgd_step_(pc, gc, bufc, so, first);
    }
    EXPECT_TRUE(all_close(p, pc, 1e-6, 1e-7));
    EXPECT_TRUE(all_close(buf, bufc, 1e-6, 1e-7));
    const Tensor m = zeros({1031}, dtype), v = zeros({1031}, dtype);
    const Tensor mc = zeros({1031}, {dtype, cpu}), vc = zeros({1031}, {dtype, cpu});
    AdamStepOptions ao;
    ao.weight_decay = 0.01, ao.decoupled_weight_decay = true;
    for (int64_t step = 1; step <= 3; ++step) {
      ao.step = step;
      adam_step_(p, g, m, v, ao);
      adam_step_(pc, gc, mc, vc, ao);
    }
    EXPECT_TRUE(all_close(p, pc, 1e-6, 1e-7));
    EXPECT_TRUE(all_close(v, vc, 1e-6, 1e-12));
  }
}

}  // namespace
}  // namespace ember::test
