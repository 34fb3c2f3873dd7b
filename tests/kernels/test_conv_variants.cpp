// Every CPU conv2d variant (im2col, Winograd F(4x4, 3x3), and Auto) against float64
// references, forward and both gradients, on awkward shapes: 1x1 images, sizes not
// divisible by the 4x4 tile, more tiles than the 16 the transforms run at once, padding
// 0, 1 and 2, groups, odd channel counts.
//
// 16-bit tensors (bf16, fp16) go through the same kernels, converted per image to float32
// and rounded once when written.
//
// Tolerances, elementwise, from the rounding each variant does (gamma_k = k u / (1 - k u),
// u the compute type's unit roundoff, tests/core/reference.h), whatever the vector width,
// blocking or FMA use (AVX2 and AVX-512 alike):
//   im2col: a GEMM sum of K terms, then (input gradient) col2im's adds: gamma_K S, S the
//     sum of the terms' |values|. K = Cg kh kw + 1 (forward, the bias first),
//     Og + kh kw (input gradient), N OH OW + N (weight and bias gradients: per-image
//     GEMMs accumulate, then the threads' partial sums).
//   Winograd: y = A^T [sum_c (G g G^T) . (B^T d B)] A. Counting roundings along a path:
//     G twice (3 each: two adds and a division by 6/12/24), B^T twice (3 each), the
//     product (1), the channel sum (Cg), A^T twice (3 each), the bias (1): k = Cg + 20,
//     and the bound is gamma_k times the same transforms with |A|, |B|, |G| on |d|, |g|
//     (winograd_abs below). That scale, not S, carries the transforms' growth (entries
//     up to 8 in A^T, 5 in B^T): it is 10-100 times S here. The weight gradient
//     G^T [sum_tiles (A dY A^T) . (B^T d B)] G has k = N tiles + N + 6 + 6 + 1 + 10
//     (G^T's rows take up to 5 roundings each pass).
//   16-bit: float32 from exact inputs, rounded once: u16 |y| + (1 + u16) E32, plus half
//     a subnormal (2^-25 for float16) where y underflows.
//   The float64 reference itself adds gamma_K(2^-53) S (im2col's K).
// None of this depends on the vector width. Largest error measured against these bounds
// (AMD EPYC, AVX-512 build): float32 0.21 (im2col) and 0.13 (Winograd) of the bound, float64 0.08, 16-bit
// 0.99 (the final rounding to nearest is what u16 |y| bounds, and it nearly reaches it).
// Checked to fail: a Winograd filter constant 1/24.01 for 1/24, and an im2col GEMM that
// drops one of the K terms, in every dtype.
#include <gtest/gtest.h>

#include "ember.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "tests/core/conv_reference.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

using kernels::cpu::ConvVariant;

struct VariantScope {
  explicit VariantScope(ConvVariant v) : saved(kernels::cpu::conv_variant()) { kernels::cpu::set_conv_variant(v); }
  ~VariantScope() { kernels::cpu::set_conv_variant(saved); }
  ConvVariant saved;
};

const ConvCase kCases[] = {
    // n, c, h, w, o, kh, kw, stride, padding, dilation, groups, bias
    {2, 16, 14, 14, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},  // the CNN's second layer, fewer channels
    {1, 17, 5, 7, 19, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},    // odd channels, sizes not divisible by 4
    {3, 3, 1, 1, 5, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},      // a 1x1 image, padded to one output
    {2, 4, 9, 13, 6, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, false},    // no padding
    {2, 4, 6, 6, 4, 3, 3, {1, 1}, {2, 2}, {1, 1}, 1, true},      // padding 2 (the input gradient pads 0)
    {2, 8, 7, 7, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, true},      // groups
    {1, 2, 33, 18, 3, 3, 3, {1, 1}, {1, 0}, {1, 1}, 1, true},    // 45 tiles: three groups of 16 lanes
    {2, 3, 8, 8, 4, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, true},      // stride 2: not Winograd's, im2col's
    {1, 12, 11, 21, 10, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},  // 12 channels (AVX2 packs 8 + 4), width 21
    // Winograd's products take their columns (channels padded to 16) 2 registers at a time on
    // AVX2, 4 on AVX-512, and the rest in a narrower tile: on AVX-512, 33 and 70 channels
    // (3 and 5 registers) end on tiles of 3 and 1, 64 on none (24, below, ends on 2)
    {1, 33, 6, 9, 40, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {1, 70, 6, 10, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false},
    // 11 and 25 tiles: Winograd's products end on 5 rows and on 1 (their tiles are 6 rows)
    {1, 16, 4, 44, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false},
    {1, 16, 20, 20, 24, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
};

std::string describe(const ConvCase& p) {
  return "input " + shape_str({p.n, p.c, p.h, p.w}) + " weight " + shape_str({p.o, p.c / p.groups, p.kh, p.kw}) +
         " pad " + std::to_string(p.padding.first) + "," + std::to_string(p.padding.second) + " groups " +
         std::to_string(p.groups);
}

// The input and weight gradients in float64 by im2col, and the scales of their terms
// (the same gradients of |x|, |w| and |gy|).
struct GradRef {
  std::vector<double> gx, gw, gb, sx, sw, sb;
};

GradRef grad_reference(const ConvCase& p, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy) {
  VariantScope im2col(ConvVariant::Im2col);
  auto grads = [&](const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g0) {
    Tensor xd = x0.to(kFloat64).detach().requires_grad_(), wd = w0.to(kFloat64).detach().requires_grad_();
    Tensor bd = p.bias ? b0.to(kFloat64).detach().requires_grad_() : Tensor();
    conv2d(xd, wd, bd, p.stride, p.padding, p.dilation, p.groups).backward(g0.to(kFloat64));
    return std::tuple{values(xd.grad()), values(wd.grad()), p.bias ? values(bd.grad()) : std::vector<double>{}};
  };
  GradRef r;
  std::tie(r.gx, r.gw, r.gb) = grads(x, w, b, gy);
  std::tie(r.sx, r.sw, r.sb) = grads(abs(x), abs(w), p.bias ? abs(b) : b, abs(gy));
  return r;
}

// |B^T|, |G| and |A^T| of F(4x4, 3x3), as kernels/cpu/winograd.cpp applies them (bt, g6, at).
constexpr double kBt[6][6] = {{4, 0, 5, 0, 1, 0}, {0, 4, 4, 1, 1, 0}, {0, 4, 4, 1, 1, 0},
                              {0, 2, 1, 2, 1, 0}, {0, 2, 1, 2, 1, 0}, {0, 4, 0, 5, 0, 1}};
constexpr double kG[6][3] = {{1. / 4, 0, 0},
                             {1. / 6, 1. / 6, 1. / 6},
                             {1. / 6, 1. / 6, 1. / 6},
                             {1. / 24, 1. / 12, 1. / 6},
                             {1. / 24, 1. / 12, 1. / 6},
                             {0, 0, 1}};
constexpr double kAt[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, 1, 8, 8, 1}};

// P X P^T (X K x K) and P^T X P (X R x R) for one of those R x K matrices.
template <int R, int K>
void sandwich(const double (&P)[R][K], const double* X, double* out) {  // out = P X P^T, X is K x K
  double t[R][K] = {};
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < K; ++j)
      for (int k = 0; k < K; ++k) t[i][j] += P[i][k] * X[k * K + j];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j) {
      double a = 0;
      for (int k = 0; k < K; ++k) a += t[i][k] * P[j][k];
      out[i * R + j] = a;
    }
}
template <int R, int K>
void sandwich_t(const double (&P)[R][K], const double* X, double* out) {  // out = P^T X P, X is R x R
  double t[K][R] = {};
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < R; ++j)
      for (int k = 0; k < R; ++k) t[i][j] += P[k][i] * X[k * R + j];
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < K; ++j) {
      double a = 0;
      for (int k = 0; k < R; ++k) a += t[i][k] * P[k][j];
      out[i * K + j] = a;
    }
}

// The 6x6 input patch of tile (ty, tx) from plane `x` (h x w), zero outside.
void patch(const double* x, int64_t h, int64_t w, int64_t ty, int64_t tx, int64_t ph, int64_t pw, double* d) {
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      const int64_t r = 4 * ty + i - ph, c = 4 * tx + j - pw;
      d[i * 6 + j] = r >= 0 && r < h && c >= 0 && c < w ? std::fabs(x[r * w + c]) : 0.0;
    }
}

// The Winograd forward's rounding scale: A^T [sum_c (G g G^T) . (B^T d B)] A with every
// matrix and value replaced by its absolute value, plus |b|. x is [N][G*ci][H][W], w
// [G*co][ci][3][3], applied as y[o](i, j) = sum x[c](i - ph + r, j - pw + s) w[o][c][r][s].
std::vector<double> winograd_abs(const std::vector<double>& x, int64_t N, int64_t G, int64_t ci, int64_t H, int64_t W,
                                 const std::vector<double>& w, int64_t co, const std::vector<double>& b, int64_t ph,
                                 int64_t pw, int64_t OH, int64_t OW) {
  const int64_t th = (OH + 3) / 4, tw = (OW + 3) / 4, O = G * co;
  std::vector<double> U(O * ci * 36), V(N * G * ci * th * tw * 36), y(N * O * OH * OW);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < ci; ++c) {
      double g[9];
      for (int k = 0; k < 9; ++k) g[k] = std::fabs(w[(o * ci + c) * 9 + k]);
      sandwich(kG, g, &U[(o * ci + c) * 36]);
    }
  for (int64_t n = 0; n < N * G * ci; ++n)
    for (int64_t t = 0; t < th * tw; ++t) {
      double d[36];
      patch(&x[n * H * W], H, W, t / tw, t % tw, ph, pw, d);
      sandwich(kBt, d, &V[(n * th * tw + t) * 36]);
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < th * tw; ++t) {
        double m[36] = {}, out[16];
        for (int64_t c = 0; c < ci; ++c) {
          const double* u = &U[(o * ci + c) * 36];
          const double* v = &V[(((n * G + o / co) * ci + c) * th * tw + t) * 36];
          for (int k = 0; k < 36; ++k) m[k] += u[k] * v[k];
        }
        sandwich(kAt, m, out);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const int64_t r = 4 * (t / tw) + i, c = 4 * (t % tw) + j;
            if (r < OH && c < OW)
              y[((n * O + o) * OH + r) * OW + c] = out[i * 4 + j] + (b.empty() ? 0 : std::fabs(b[o]));
          }
      }
  return y;
}

// The Winograd weight gradient's scale: G^T [sum_tiles (A dY A^T) . (B^T d B)] G in
// absolute values, per [o][c][3][3].
std::vector<double> winograd_abs_weight(const ConvCase& p, const std::vector<double>& x, const std::vector<double>& gy,
                                        int64_t OH, int64_t OW) {
  const int64_t th = (OH + 3) / 4, tw = (OW + 3) / 4, cg = p.c / p.groups, og = p.o / p.groups;
  std::vector<double> gw(p.o * cg * 9);
  for (int64_t o = 0; o < p.o; ++o)
    for (int64_t c = 0; c < cg; ++c) {
      double m[36] = {};
      for (int64_t n = 0; n < p.n; ++n)
        for (int64_t t = 0; t < th * tw; ++t) {
          double d[36], v[36], dy[16], a[36];
          patch(&x[(n * p.c + (o / og) * cg + c) * p.h * p.w], p.h, p.w, t / tw, t % tw, p.padding.first,
                p.padding.second, d);
          sandwich(kBt, d, v);
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
              const int64_t r = 4 * (t / tw) + i, q = 4 * (t % tw) + j;
              dy[i * 4 + j] = r < OH && q < OW ? std::fabs(gy[((n * p.o + o) * OH + r) * OW + q]) : 0.0;
            }
          sandwich_t(kAt, dy, a);
          for (int k = 0; k < 36; ++k) m[k] += a[k] * v[k];
        }
      sandwich_t(kG, m, &gw[(o * cg + c) * 9]);
    }
  return gw;
}

// Elementwise tolerances for one conv2d case in dtype d run by variant v: forward,
// input, weight and bias gradients (see the top of the file).
struct Tolerances {
  std::vector<double> y, gx, gw, gb;
};

Tolerances tolerances(const ConvCase& p, ConvVariant v, DType d, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& gy, const std::vector<double>& want, const std::vector<double>& scale,
                      const GradRef& ref) {
  const int64_t cg = p.c / p.groups, og = p.o / p.groups, OH = gy.size(2), OW = gy.size(3), kk = p.kh * p.kw;
  const double u = d == kFloat64 ? 0x1p-53 : 0x1p-24,
               u16 = d == kBFloat16 || d == kFloat16 ? dtype_unit_roundoff(d) : 0;
  const double eta16 = u16 > 0 ? dtype_underflow(d) : 0;  // an underflowing 16-bit result
  const double k_fwd = double(cg * kk + 1), k_gx = double(og + kk), k_gw = double(p.n * OH * OW + p.n);
  const bool winograd = v != ConvVariant::Im2col && p.kh == 3 && p.kw == 3 && p.stride == Pair{1, 1} &&
                        p.dilation == Pair{1, 1} && (v == ConvVariant::Winograd || (cg >= 16 && og >= 16));
  Tolerances t;
  // e: the variant's compute-type bound; then the 16-bit rounding and the reference's own error.
  auto finish = [&](const std::vector<double>& e, const std::vector<double>& wanted, const std::vector<double>& s,
                    double k_ref) {
    std::vector<double> tol(e.size());
    for (size_t i = 0; i < e.size(); ++i)
      tol[i] = u16 * std::fabs(wanted[i]) + eta16 + (1 + u16) * e[i] + gamma_n(k_ref, 0x1p-53) * s[i] + 1e-300;
    return tol;
  };
  auto scaled = [](const std::vector<double>& s, double g) {
    std::vector<double> e(s.size());
    for (size_t i = 0; i < s.size(); ++i) e[i] = g * s[i];
    return e;
  };
  if (!winograd) {
    t.y = finish(scaled(scale, gamma_n(k_fwd, u)), want, scale, k_fwd);
    t.gx = finish(scaled(ref.sx, gamma_n(k_gx, u)), ref.gx, ref.sx, k_gx);
    t.gw = finish(scaled(ref.sw, gamma_n(k_gw, u)), ref.gw, ref.sw, k_gw);
  } else {
    const std::vector<double> vx = values(x), vw = values(w), vg = values(gy);
    const std::vector<double> vb = p.bias ? values(b) : std::vector<double>{};
    const double th = double((OH + 3) / 4), tw = double((OW + 3) / 4);
    t.y = finish(
        scaled(winograd_abs(vx, p.n, p.groups, cg, p.h, p.w, vw, og, vb, p.padding.first, p.padding.second, OH, OW),
               gamma_n(double(cg + 20), u)),
        want, scale, k_fwd);
    // The input gradient is the forward on dY with the weights turned 180 degrees and
    // their in/out channels swapped, padded 2 - p.
    std::vector<double> wr(vw.size());
    for (int64_t g = 0; g < p.groups; ++g)
      for (int64_t o = 0; o < og; ++o)
        for (int64_t c = 0; c < cg; ++c)
          for (int k = 0; k < 9; ++k) wr[((g * cg + c) * og + o) * 9 + 8 - k] = vw[((g * og + o) * cg + c) * 9 + k];
    t.gx = finish(scaled(winograd_abs(vg, p.n, p.groups, og, OH, OW, wr, cg, {}, 2 - p.padding.first,
                                      2 - p.padding.second, p.h, p.w),
                         gamma_n(double(og + 20), u)),
                  ref.gx, ref.sx, k_gx);
    t.gw = finish(scaled(winograd_abs_weight(p, vx, vg, OH, OW), gamma_n(double(p.n) * th * tw + double(p.n) + 23, u)),
                  ref.gw, ref.sw, k_gw);
  }
  if (p.bias) t.gb = finish(scaled(ref.sb, gamma_n(k_gw, u)), ref.gb, ref.sb, k_gw);
  return t;
}

TEST(ConvVariants, EveryVariantMatchesFloat64References) {
  uint64_t seed = 4100;
  for (const ConvCase& p : kCases) {
    for (ConvVariant v : {ConvVariant::Im2col, ConvVariant::Winograd, ConvVariant::Auto}) {
      for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
        SCOPED_TRACE(describe(p) + " " + std::string(dtype_name(d)) + " variant " +
                     std::to_string(static_cast<int>(v)));
        Tensor x = random_tensor({p.n, p.c, p.h, p.w}, d, Layout::Contiguous, ++seed);
        Tensor w = random_tensor({p.o, p.c / p.groups, p.kh, p.kw}, d, Layout::Contiguous, ++seed);
        Tensor b = p.bias ? random_tensor({p.o}, d, Layout::Contiguous, ++seed) : Tensor();
        Shape shape;
        std::vector<double> scale, want = ref_conv(p, x, w, b, &shape, &scale);
        Tensor gy = random_tensor(shape, d, Layout::Contiguous, ++seed);
        const GradRef ref = grad_reference(p, x, w, b, gy);

        const Tolerances tol = tolerances(p, v, d, x, w, b, gy, want, scale, ref);
        VariantScope scope(v);
        Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
        Tensor bg = p.bias ? b.detach().requires_grad_() : Tensor();
        Tensor y = conv2d(xg, wg, bg, p.stride, p.padding, p.dilation, p.groups);
        ASSERT_EQ(y.shape(), shape);
        EXPECT_TRUE(all_close_tol(y, want, shape, tol.y)) << "forward";
        y.backward(gy);
        EXPECT_TRUE(all_close_tol(xg.grad(), ref.gx, xg.shape(), tol.gx)) << "input gradient";
        EXPECT_TRUE(all_close_tol(wg.grad(), ref.gw, wg.shape(), tol.gw)) << "weight gradient";
        if (p.bias) EXPECT_TRUE(all_close_tol(bg.grad(), ref.gb, bg.shape(), tol.gb)) << "bias gradient";
      }
    }
  }
}

// The Winograd path really runs where it applies: its float32 rounding differs from
// im2col's, and a forced Winograd leaves stride-2 convolutions to im2col, bit for bit.
TEST(ConvVariants, WinogradTakesTheShapesItSupportsOnly) {
  auto run = [](ConvVariant v, const ConvCase& p) {
    VariantScope scope(v);
    Tensor x = random_tensor({p.n, p.c, p.h, p.w}, kFloat32, Layout::Contiguous, 5);
    Tensor w = random_tensor({p.o, p.c, p.kh, p.kw}, kFloat32, Layout::Contiguous, 6);
    return values(conv2d(x, w, {}, p.stride, p.padding));
  };
  const ConvCase& same = kCases[0];
  const ConvCase& strided = kCases[7];
  EXPECT_NE(run(ConvVariant::Winograd, same), run(ConvVariant::Im2col, same));
  EXPECT_EQ(run(ConvVariant::Auto, same), run(ConvVariant::Winograd, same));  // 16 channels: Auto picks it
  EXPECT_EQ(run(ConvVariant::Winograd, strided), run(ConvVariant::Im2col, strided));
}

// Winograd's forward gives an image the same bits whatever else is in the batch and however
// many threads run it (Note [Winograd products]): the CNN's second layer at batch 9, whose
// chunks hold 2 or 3 images at 2 threads and 3 at 1, against its first 2 images alone (one
// chunk). (gemm()'s OpenBLAS fails this: its rows change with the rows around them.)
TEST(ConvVariants, WinogradForwardDependsOnNeitherTheBatchNorTheThreads) {
  VariantScope scope(ConvVariant::Winograd);
  struct Restore {  // the GEMM variant and the thread count, however the test ends
    kernels::cpu::GemmVariant gemm = kernels::cpu::gemm_variant();
    int threads = get_num_threads();
    ~Restore() {
      kernels::cpu::set_gemm_variant(gemm);
      set_num_threads(threads);
    }
  } restore;
  kernels::cpu::set_gemm_variant(kernels::cpu::GemmVariant::Auto);
  Tensor x = random_tensor({9, 32, 14, 14}, kFloat32, Layout::Contiguous, 11);
  Tensor w = random_tensor({64, 32, 3, 3}, kFloat32, Layout::Contiguous, 12);
  Tensor b = random_tensor({64}, kFloat32, Layout::Contiguous, 13);
  auto forward = [&](const Tensor& input, int threads) {
    set_num_threads(threads);
    return conv2d(input, w, b, {1, 1}, {1, 1});
  };
  const std::vector<double> two = values(forward(x.narrow(0, 0, 2).contiguous(), 1));
  const Tensor at2 = forward(x, 2), at1 = forward(x, 1);
  EXPECT_EQ(values(at2.narrow(0, 0, 2).contiguous()), two);
  EXPECT_EQ(values(at2), values(at1));
}

TEST(ConvVariants, NamesParse) {
  EXPECT_EQ(kernels::cpu::parse_conv_variant("winograd"), ConvVariant::Winograd);
  EXPECT_EQ(kernels::cpu::parse_conv_variant("im2col"), ConvVariant::Im2col);
  EXPECT_EQ(kernels::cpu::parse_conv_variant("auto"), ConvVariant::Auto);
  EXPECT_THROW(kernels::cpu::parse_conv_variant("fft"), Error);
}

}  // namespace
}  // namespace ember::test
