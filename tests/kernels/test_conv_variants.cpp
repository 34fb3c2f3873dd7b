// Every CPU conv2d variant (im2col, Winograd F(4x4, 3x3), and Auto) against float64
// references, forward and both gradients, on awkward shapes: 1x1 images, sizes not
// divisible by the 4x4 tile, more tiles than the 16 the transforms run at once, padding
// 0, 1 and 2, groups, odd channel counts.
//
// 16-bit tensors (bf16, fp16) go through the same kernels, converted per image to float32
// and rounded once when written.
//
// Tolerances. im2col sums at most 9 C products per value, so each value is within
// 1e-5 S of the truth in float32, S being the sum of the |products| that make it up.
// Winograd mixes the whole 6x6 input patch into each value through transforms with
// constants up to 8 (output) and 1/24 (filters): its rounding error follows the scale of
// the patch, not of the one value (a padded corner output with a single product gets the
// rounding of its neighbours' larger sums). Its bound is therefore normwise, 1e-5 of the
// largest S in the tensor; the largest error measured on these cases was 2.1e-6 of it
// (im2col: 1.6e-7). In float64 both are within 1e-12 (measured: 3.3e-15).
#include <gtest/gtest.h>

#include "ember.h"
#include "kernels/cpu/conv.h"
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
    Tensor xd = x0.to(kFloat64).detach().set_requires_grad(), wd = w0.to(kFloat64).detach().set_requires_grad();
    Tensor bd = p.bias ? b0.to(kFloat64).detach().set_requires_grad() : Tensor();
    conv2d(xd, wd, bd, p.stride, p.padding, p.dilation, p.groups).backward(g0.to(kFloat64));
    return std::tuple{values(xd.grad()), values(wd.grad()), p.bias ? values(bd.grad()) : std::vector<double>{}};
  };
  GradRef r;
  std::tie(r.gx, r.gw, r.gb) = grads(x, w, b, gy);
  std::tie(r.sx, r.sw, r.sb) = grads(abs(x), abs(w), p.bias ? abs(b) : b, abs(gy));
  return r;
}

// |got - want| <= r * scale, elementwise, or r * max(scale) when normwise.
::testing::AssertionResult close(const Tensor& got, const std::vector<double>& want, const std::vector<double>& scale,
                                 double r, bool normwise) {
  const double top = scale.empty() ? 0 : *std::max_element(scale.begin(), scale.end());
  std::vector<double> tol(scale.size());
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = r * (normwise ? top : scale[i]) + 1e-300;
  return all_close_tol(got, want, got.shape(), tol);
}

TEST(ConvVariants, EveryVariantMatchesFloat64References) {
  uint64_t seed = 4100;
  for (const ConvCase& p : kCases) {
    for (ConvVariant v : {ConvVariant::Im2col, ConvVariant::Winograd, ConvVariant::Auto}) {
      for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
        SCOPED_TRACE(describe(p) + " " + std::string(dtype_name(d)) + " variant " + std::to_string(static_cast<int>(v)));
        Tensor x = random_tensor({p.n, p.c, p.h, p.w}, d, Layout::Contiguous, ++seed);
        Tensor w = random_tensor({p.o, p.c / p.groups, p.kh, p.kw}, d, Layout::Contiguous, ++seed);
        Tensor b = p.bias ? random_tensor({p.o}, d, Layout::Contiguous, ++seed) : Tensor();
        Shape shape;
        std::vector<double> scale, want = ref_conv(p, x, w, b, &shape, &scale);
        Tensor gy = random_tensor(shape, d, Layout::Contiguous, ++seed);
        const GradRef ref = grad_reference(p, x, w, b, gy);

        VariantScope scope(v);
        // 16-bit tensors compute in float32 and round each result once: half an ulp of
        // the result (2^-9 for bf16, 2^-12 for fp16), bounded normwise.
        const double r = d == kFloat64 ? 1e-12 : d == kFloat32 ? 1e-5 : d == kBFloat16 ? 4e-3 : 5e-4;
        const bool normwise = v != ConvVariant::Im2col || d == kBFloat16 || d == kFloat16;
        Tensor xg = x.detach().set_requires_grad(), wg = w.detach().set_requires_grad();
        Tensor bg = p.bias ? b.detach().set_requires_grad() : Tensor();
        Tensor y = conv2d(xg, wg, bg, p.stride, p.padding, p.dilation, p.groups);
        ASSERT_EQ(y.shape(), shape);
        EXPECT_TRUE(close(y, want, scale, r, normwise)) << "forward";
        y.backward(gy);
        EXPECT_TRUE(close(xg.grad(), ref.gx, ref.sx, r, normwise)) << "input gradient";
        EXPECT_TRUE(close(wg.grad(), ref.gw, ref.sw, r, normwise)) << "weight gradient";
        if (p.bias) EXPECT_TRUE(close(bg.grad(), ref.gb, ref.sb, r, normwise)) << "bias gradient";
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

TEST(ConvVariants, NamesParse) {
  EXPECT_EQ(kernels::cpu::parse_conv_variant("winograd"), ConvVariant::Winograd);
  EXPECT_EQ(kernels::cpu::parse_conv_variant("im2col"), ConvVariant::Im2col);
  EXPECT_EQ(kernels::cpu::parse_conv_variant("auto"), ConvVariant::Auto);
  EXPECT_THROW(kernels::cpu::parse_conv_variant("fft"), Error);
}

}  // namespace
}  // namespace ember::test
