// Vision ops against float64 loop references at awkward sizes: conv_transpose2d (direct
// scatter loops; odd H / W, groups, stride 2 and 3, dilation, output_padding),
// interpolate (PyTorch's source-coordinate rules, nearest and bilinear, align_corners,
// size or scale_factor), pixel_shuffle / unshuffle, dropout2d's per-channel masks,
// group_norm and instance_norm (incl. the running statistics). Gradients by gradcheck in
// float64; bad arguments are ember::Errors naming the op. Runs on every test device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

using Pair = std::pair<int64_t, int64_t>;

// ----- conv_transpose2d -----
struct TCase {
  int64_t n, c, h, w, o, kh, kw;  // input [n, c, h, w], output channels o
  Pair stride, padding, output_padding, dilation;
  int64_t groups;
  bool bias;
};

Shape tconv_shape(const TCase& p) {
  return {p.n, p.o, (p.h - 1) * p.stride.first - 2 * p.padding.first + p.dilation.first * (p.kh - 1) +
                        p.output_padding.first + 1,
          (p.w - 1) * p.stride.second - 2 * p.padding.second + p.dilation.second * (p.kw - 1) +
              p.output_padding.second + 1};
}

// Each input scattered through the kernel; scale gets sum |x w| + |b| per output.
std::vector<double> ref_tconv(const TCase& p, const Tensor& x, const Tensor& wt, const Tensor& b,
                              std::vector<double>* scale) {
  const Shape s = tconv_shape(p);
  const int64_t OH = s[2], OW = s[3], cg = p.c / p.groups, og = p.o / p.groups;
  const std::vector<double> xv = values(x), wv = values(wt), bv = p.bias ? values(b) : std::vector<double>();
  std::vector<double> out(shape_numel(s), 0.0);
  scale->assign(out.size(), 0.0);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t ci = 0; ci < p.c; ++ci)
      for (int64_t ih = 0; ih < p.h; ++ih)
        for (int64_t iw = 0; iw < p.w; ++iw)
          for (int64_t oj = 0; oj < og; ++oj)
            for (int64_t ki = 0; ki < p.kh; ++ki)
              for (int64_t kj = 0; kj < p.kw; ++kj) {
                const int64_t oh = ih * p.stride.first - p.padding.first + ki * p.dilation.first;
                const int64_t ow = iw * p.stride.second - p.padding.second + kj * p.dilation.second;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                const int64_t oc = (ci / cg) * og + oj;
                const double t = xv[((n * p.c + ci) * p.h + ih) * p.w + iw] * wv[((ci * og + oj) * p.kh + ki) * p.kw + kj];
                const int64_t at = ((n * p.o + oc) * OH + oh) * OW + ow;
                out[at] += t;
                (*scale)[at] += std::fabs(t);
              }
  if (p.bias)
    for (size_t i = 0; i < out.size(); ++i) {
      const double bb = bv[(i / (OH * OW)) % p.o];
      out[i] += bb;
      (*scale)[i] += std::fabs(bb);
    }
  return out;
}

const TCase kTCases[] = {
    {2, 3, 5, 4, 4, 3, 3, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, true},   // plain
    {2, 4, 3, 5, 6, 4, 4, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // DCGAN's k4 s2 p1
    {1, 3, 5, 3, 2, 3, 2, {3, 2}, {1, 0}, {2, 1}, {1, 1}, 1, false},  // stride 3, output_padding
    {2, 4, 4, 3, 6, 3, 3, {2, 1}, {1, 1}, {1, 0}, {1, 2}, 2, true},   // groups 2, dilation
    {1, 2, 3, 3, 2, 3, 3, {1, 1}, {1, 1}, {1, 1}, {2, 2}, 1, true},   // output_padding < dilation only
    {3, 5, 1, 1, 4, 4, 4, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, false},  // DCGAN's 1x1 -> 4x4
    {2, 4, 3, 2, 4, 1, 1, {2, 3}, {0, 0}, {1, 2}, {1, 1}, 4, true},   // depthwise 1x1
};

TEST(VisionOps, ConvTranspose2dMatchesLoops) {
  uint64_t seed = 900;
  for (const TCase& p : kTCases)
    for (DType d : {kFloat64, kFloat32}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " input " + shape_str({p.n, p.c, p.h, p.w}) + " out " +
                   std::to_string(p.o) + " groups " + std::to_string(p.groups));
      const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, d, Layout::Contiguous, ++seed);
      const Tensor wt = random_tensor({p.c, p.o / p.groups, p.kh, p.kw}, d, Layout::Transposed, ++seed);
      const Tensor b = p.bias ? random_tensor({p.o}, d, Layout::Contiguous, ++seed) : Tensor();
      std::vector<double> scale;
      const std::vector<double> want = ref_tconv(p, x, wt, b, &scale);
      const Tensor y = conv_transpose2d(x, wt, b, p.stride, p.padding, p.output_padding, p.groups, p.dilation);
      // K = (c / groups) kh kw + 1 terms in any order, in the kernel's dtype and in float64.
      const double K = double(p.c / p.groups * p.kh * p.kw + 1);
      const double r = gamma_n(K, dtype_unit_roundoff(d)) + gamma_n(K, 0x1p-53);
      std::vector<double> tol(scale.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = r * scale[i] + 1e-300;
      EXPECT_TRUE(all_close_tol(y, want, tconv_shape(p), tol));
    }
}

TEST(VisionOps, ConvTranspose2dUnbatchedInput) {
  const Tensor x = random_tensor({3, 4, 5}, kFloat64, Layout::Contiguous, 5);
  const Tensor w = random_tensor({3, 2, 3, 3}, kFloat64, Layout::Contiguous, 6);
  const Tensor y = conv_transpose2d(x, w, {}, {2, 2}, {1, 1}, {1, 1});
  const Tensor yb = conv_transpose2d(x.unsqueeze(0), w, {}, {2, 2}, {1, 1}, {1, 1});
  EXPECT_EQ(y.shape(), (Shape{2, 8, 10}));
  EXPECT_TRUE(all_close(y, yb.squeeze(0), 0, 0));
}

TEST(VisionOps, ConvTranspose2dGradcheck) {
  for (const TCase& p : {kTCases[1], kTCases[2], kTCases[3], kTCases[4]}) {
    SCOPED_TRACE("input " + shape_str({p.n, p.c, p.h, p.w}) + " groups " + std::to_string(p.groups));
    const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, kFloat64, Layout::Contiguous, 11).requires_grad_(true);
    const Tensor w = random_tensor({p.c, p.o / p.groups, p.kh, p.kw}, kFloat64, Layout::Contiguous, 12)
                         .requires_grad_(true);
    const Tensor b = random_tensor({p.o}, kFloat64, Layout::Contiguous, 13).requires_grad_(true);
    EXPECT_TRUE(grad_ok(
        [&](const std::vector<Tensor>& in) {
          return conv_transpose2d(in[0], in[1], in[2], p.stride, p.padding, p.output_padding, p.groups, p.dilation);
        },
        {x, w, b}));
  }
}

TEST(VisionOps, ConvTranspose2dErrors) {
  const Tensor x = zeros({2, 4, 5, 5});
  EXPECT_EMBER_ERROR(conv_transpose2d(x, zeros({3, 2, 3, 3})), "conv_transpose2d", "4 channels");
  EXPECT_EMBER_ERROR(conv_transpose2d(x, zeros({4, 2, 3, 3}), {}, {2, 2}, {0, 0}, {2, 0}), "conv_transpose2d",
                     "output_padding");
  EXPECT_EMBER_ERROR(conv_transpose2d(x, zeros({4, 2, 3, 3}), {}, {1, 1}, {0, 0}, {0, 0}, 3), "conv_transpose2d",
                     "groups 3");
  EXPECT_EMBER_ERROR(conv_transpose2d(x, zeros({4, 2, 3, 3}), zeros({3})), "conv_transpose2d", "bias");
  EXPECT_EMBER_ERROR(conv_transpose2d(zeros({5, 5}), zeros({4, 2, 3, 3})), "conv_transpose2d", "3-D");
  EXPECT_EMBER_ERROR(conv_transpose2d(x, zeros({4, 2, 1, 1}), {}, {1, 1}, {3, 3}), "conv_transpose2d", "empty output");
}

// ----- interpolate -----
// PyTorch's per-dim scale and source index (aten/src/ATen/native/UpSample.h); nearest in float.
// Bilinear keeps an unchanged dim as it is, nearest applies the factor (torch 1.13's
// contiguous kernels; its channels-last nearest kernel differs).
double ref_scale(int64_t in, int64_t out, std::optional<double> factor, bool bilinear, bool align) {
  if (bilinear && align) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  if (bilinear && in == out) return 1.0;
  return factor ? 1.0 / *factor : double(in) / double(out);
}

struct Tap {
  int64_t i0, i1;
  double w0, w1;
};
Tap ref_tap(int64_t d, int64_t in, double scale, bool bilinear, bool align) {
  if (!bilinear) {
    const int64_t i = static_cast<int64_t>(std::floor(float(d) * float(scale)));
    return {std::min(i, in - 1), 0, 1, 0};
  }
  const double real = std::max(align ? scale * d : scale * (d + 0.5) - 0.5, 0.0);
  const int64_t i0 = static_cast<int64_t>(real);
  const double l1 = real - i0;
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), 1 - l1, l1};
}

struct UCase {
  Shape in;
  std::optional<Pair> size;
  std::optional<std::pair<double, double>> factor;
  bool bilinear, align;
};

TEST(VisionOps, InterpolateMatchesLoops) {
  const UCase cases[] = {
      {{2, 3, 5, 4}, Pair{7, 9}, {}, false, false},     {{2, 3, 5, 4}, {}, std::pair{2.0, 3.0}, false, false},
      {{1, 2, 7, 5}, {}, std::pair{1.5, 0.7}, false, false}, {{1, 2, 5, 6}, Pair{5, 12}, {}, false, false},
      {{1, 2, 10, 3}, {}, std::pair{1.05, 2.5}, false, false},
      {{2, 3, 5, 4}, Pair{7, 9}, {}, true, false},      {{2, 3, 5, 4}, Pair{7, 9}, {}, true, true},
      {{1, 2, 4, 7}, {}, std::pair{2.5, 1.3}, true, false}, {{1, 2, 6, 5}, Pair{3, 2}, {}, true, false},
      {{1, 2, 6, 5}, Pair{1, 3}, {}, true, true},       {{1, 2, 10, 3}, {}, std::pair{1.05, 2.0}, true, false},
  };
  uint64_t seed = 40;
  for (const UCase& c : cases)
    for (DType d : {kFloat64, kFloat32}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " " + shape_str(c.in) + (c.bilinear ? " bilinear" : " nearest") +
                   (c.align ? " align_corners" : ""));
      const Tensor x = random_tensor(c.in, d, Layout::Contiguous, ++seed);
      InterpolateOptions o{c.size, c.factor, c.bilinear ? InterpolateMode::kBilinear : InterpolateMode::kNearest,
                           c.align};
      const Tensor y = interpolate(x, o);
      const int64_t H = c.in[2], W = c.in[3];
      const int64_t OH = c.size ? c.size->first : int64_t(std::floor(H * c.factor->first));
      const int64_t OW = c.size ? c.size->second : int64_t(std::floor(W * c.factor->second));
      const double sh = ref_scale(H, OH, c.factor ? std::optional(c.factor->first) : std::nullopt, c.bilinear, c.align);
      const double sw = ref_scale(W, OW, c.factor ? std::optional(c.factor->second) : std::nullopt, c.bilinear, c.align);
      const std::vector<double> xv = values(x);
      std::vector<double> want, tol;
      const double u = dtype_unit_roundoff(d);
      for (int64_t pl = 0; pl < c.in[0] * c.in[1]; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const Tap r = ref_tap(oh, H, sh, c.bilinear, c.align), q = ref_tap(ow, W, sw, c.bilinear, c.align);
            const auto at = [&](int64_t h, int64_t w) { return xv[(pl * H + h) * W + w]; };
            want.push_back(r.w0 * (q.w0 * at(r.i0, q.i0) + q.w1 * at(r.i0, q.i1)) +
                           r.w1 * (q.w0 * at(r.i1, q.i0) + q.w1 * at(r.i1, q.i1)));
            // The weights carry the source coordinate's rounding (u times it plus one) and
            // the sum three more roundings: bound by the taps' absolute values.
            const double mag = std::fabs(at(r.i0, q.i0)) + std::fabs(at(r.i0, q.i1)) + std::fabs(at(r.i1, q.i0)) +
                               std::fabs(at(r.i1, q.i1));
            tol.push_back(8 * u * double(std::max(H, W) + 1) * mag + 1e-300);
          }
      EXPECT_TRUE(all_close_tol(y, want, {c.in[0], c.in[1], OH, OW}, tol));
    }
}

TEST(VisionOps, InterpolateGradcheckAndDeterministicBackward) {
  for (bool bilinear : {false, true})
    for (bool align : {false, true}) {
      if (align && !bilinear) continue;
      SCOPED_TRACE(std::string(bilinear ? "bilinear" : "nearest") + (align ? " align_corners" : ""));
      const InterpolateOptions o{Pair{7, 5}, {}, bilinear ? InterpolateMode::kBilinear : InterpolateMode::kNearest,
                                 align};
      const Tensor x = random_tensor({2, 2, 4, 3}, kFloat64, Layout::Contiguous, 3).requires_grad_(true);
      EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return interpolate(in[0], o); }, {x}));
      // A downsampling size too: several outputs per input and inputs no output reads.
      const InterpolateOptions down{Pair{3, 2}, {}, o.mode, align};
      const Tensor big = random_tensor({1, 2, 7, 6}, kFloat64, Layout::Contiguous, 4).requires_grad_(true);
      EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return interpolate(in[0], down); }, {big}));
      const Tensor xf = random_tensor({2, 3, 9, 7}, kFloat32, Layout::Contiguous, 5).requires_grad_(true);
      const Tensor g = random_tensor({2, 3, 7, 5}, kFloat32, Layout::Contiguous, 6);
      const InterpolateOptions sized{Pair{7, 5}, {}, o.mode, align};
      const Tensor g1 = autograd::grad({interpolate(xf, sized)}, {xf}, {g})[0];
      const Tensor g2 = autograd::grad({interpolate(xf, sized)}, {xf}, {g})[0];
      EXPECT_TRUE(all_close(g1, g2, 0, 0));
    }
}

TEST(VisionOps, InterpolateErrors) {
  const Tensor x = zeros({1, 2, 4, 4});
  EXPECT_EMBER_ERROR(interpolate(x, {}), "interpolate", "exactly one");
  EXPECT_EMBER_ERROR(interpolate(x, {.size = Pair{2, 2}, .scale_factor = std::pair{2.0, 2.0}}), "interpolate");
  EXPECT_EMBER_ERROR(interpolate(x, {.size = Pair{2, 2}, .align_corners = true}), "interpolate", "bilinear");
  EXPECT_EMBER_ERROR(interpolate(x, {.scale_factor = std::pair{-1.0, 2.0}}), "interpolate", "positive");
  EXPECT_EMBER_ERROR(interpolate(x, {.size = Pair{0, 2}}), "interpolate", "positive");
  EXPECT_EMBER_ERROR(interpolate(zeros({2, 4, 4}), {.size = Pair{2, 2}}), "interpolate", "4-D");
}

// ----- pixel_shuffle -----
TEST(VisionOps, PixelShuffleAndUnshuffle) {
  const int64_t N = 2, C = 3, r = 2, H = 3, W = 5;
  const Tensor x = iota({N, C * r * r, H, W}, kFloat64);
  const Tensor y = pixel_shuffle(x, r);
  ASSERT_EQ(y.shape(), (Shape{N, C, H * r, W * r}));
  std::vector<double> want;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H * r; ++h)
        for (int64_t w = 0; w < W * r; ++w)
          want.push_back(double(((n * C * r * r + c * r * r + (h % r) * r + (w % r)) * H + h / r) * W + w / r));
  EXPECT_TRUE(all_close(y, want, y.shape(), 0, 0));
  EXPECT_TRUE(all_close(pixel_unshuffle(y, r), x, 0, 0));
  const Tensor z = iota({2, 2, 9, 3, 3}, kFloat64);  // extra batch dims, r = 3
  EXPECT_EQ(pixel_shuffle(z, 3).shape(), (Shape{2, 2, 1, 9, 9}));
  EXPECT_TRUE(all_close(pixel_unshuffle(pixel_shuffle(z, 3), 3), z, 0, 0));
  const Tensor g = random_tensor({1, 8, 2, 3}, kFloat64, Layout::Contiguous, 2).requires_grad_(true);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return pixel_shuffle(in[0], 2); }, {g}));
  EXPECT_EMBER_ERROR(pixel_shuffle(zeros({1, 6, 2, 2}), 2), "pixel_shuffle", "6 channels");
  EXPECT_EMBER_ERROR(pixel_unshuffle(zeros({1, 2, 5, 4}), 2), "pixel_unshuffle", "divisible");
  EXPECT_EMBER_ERROR(pixel_shuffle(zeros({4, 2}), 2), "pixel_shuffle");
  EXPECT_EMBER_ERROR(pixel_shuffle(zeros({1, 4, 2, 2}), 0), "pixel_shuffle", "positive");
}

// ----- dropout2d -----
TEST(VisionOps, Dropout2dDropsWholeChannels) {
  for (const Shape& s : {Shape{4, 6, 3, 5}, Shape{5, 7, 9}}) {
    SCOPED_TRACE(shape_str(s));
    Generator gen(17);
    const Tensor x = (random_tensor(s, kFloat64, Layout::Contiguous, 1)).requires_grad_(true);
    const double p = 0.4;
    const Tensor y = dropout2d(x, p, true, &gen);
    const Tensor g = autograd::grad({y}, {x}, {ones_like(y)})[0];
    const std::vector<double> xv = values(x), yv = values(y), gv = values(g);
    const int64_t planes = s[0] * s[1], S = shape_numel(s) / planes;
    int64_t dropped = 0;
    for (int64_t pl = 0; pl < planes; ++pl) {
      const bool kept = gv[pl * S] != 0;
      dropped += kept ? 0 : 1;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t i = pl * S + j;
        EXPECT_EQ(gv[i], kept ? 1 / (1 - p) : 0.0);
        EXPECT_NEAR(yv[i], kept ? xv[i] / (1 - p) : 0.0, 1e-15 * (1 + std::fabs(xv[i])));
      }
    }
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, planes);
    EXPECT_TRUE(all_close(dropout2d(x, p, false), x, 0, 0));
  }
  EXPECT_EMBER_ERROR(dropout2d(zeros({2, 3, 4, 4}), 1.5, true), "dropout2d", "1.5");
  EXPECT_EMBER_ERROR(dropout2d(zeros({4}), 0.5, true), "dropout2d");
}

// ----- group_norm / instance_norm -----
// y and, per element, a bound of its rounding error: the mean and variance of M values
// (gamma_2M of the group's magnitude) carried through the normalization, then w and b.
std::vector<double> ref_group_norm(const Tensor& x, int64_t G, const Tensor& w, const Tensor& b, double eps,
                                   double u, std::vector<double>* tol) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C), Cg = C / G, M = Cg * S;
  const std::vector<double> xv = values(x);
  const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>(C, 1.0);
  const std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(C, 0.0);
  std::vector<double> out(xv.size());
  tol->resize(xv.size());
  for (int64_t ng = 0; ng < N * G; ++ng) {
    const double* p = xv.data() + ng * M;
    double m = 0, v = 0, amax = 0;
    for (int64_t i = 0; i < M; ++i) m += p[i];
    m /= double(M);
    for (int64_t i = 0; i < M; ++i) {
      v += (p[i] - m) * (p[i] - m);
      amax = std::max(amax, std::fabs(p[i]));
    }
    const double rs = 1 / std::sqrt(v / double(M) + eps);
    for (int64_t i = 0; i < M; ++i) {
      const int64_t c = (ng % G) * Cg + i / S;
      const double xhat = (p[i] - m) * rs;
      out[ng * M + i] = xhat * wv[c] + bv[c];
      (*tol)[ng * M + i] =
          gamma_n(2.0 * double(M) + 8, u) * (std::fabs(wv[c]) * (std::fabs(xhat) + amax * rs) + std::fabs(bv[c])) +
          1e-300;
    }
  }
  return out;
}

TEST(VisionOps, GroupNormMatchesLoops) {
  struct GCase {
    Shape shape;
    int64_t groups;
    bool affine;
  };
  const GCase cases[] = {{{2, 6, 5, 3}, 3, true},   {{3, 4, 7}, 1, true},   {{2, 5, 3, 3}, 5, false},
                         {{1, 8, 1, 1, 3}, 2, true}, {{4, 6, 33}, 6, true}, {{2, 32, 9, 9}, 8, true},
                         {{1, 4, 20, 17}, 2, true}};  // planes longer than a CUDA block
  uint64_t seed = 70;
  for (const GCase& c : cases)
    for (DType d : {kFloat64, kFloat32}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " " + shape_str(c.shape) + " groups " + std::to_string(c.groups));
      const Tensor x = random_tensor(c.shape, d, Layout::Transposed, ++seed, [](double v) { return 3 * v + 1; });
      const Tensor w = c.affine ? random_tensor({c.shape[1]}, d, Layout::Contiguous, ++seed) : Tensor();
      const Tensor b = c.affine ? random_tensor({c.shape[1]}, d, Layout::Contiguous, ++seed) : Tensor();
      std::vector<double> tol;
      const std::vector<double> want = ref_group_norm(x, c.groups, w, b, 1e-5, dtype_unit_roundoff(d), &tol);
      EXPECT_TRUE(all_close_tol(group_norm(x, c.groups, w, b, 1e-5), want, c.shape, tol));
    }
}

TEST(VisionOps, GroupNormGradcheck) {
  for (const auto& [shape, groups] : {std::pair{Shape{2, 6, 3, 2}, int64_t(3)}, std::pair{Shape{3, 4, 5}, int64_t(4)},
                                      std::pair{Shape{2, 4, 3}, int64_t(1)}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_tensor(shape, kFloat64, Layout::Contiguous, 1).requires_grad_(true);
    const Tensor w = random_tensor({shape[1]}, kFloat64, Layout::Contiguous, 2).requires_grad_(true);
    const Tensor b = random_tensor({shape[1]}, kFloat64, Layout::Contiguous, 3).requires_grad_(true);
    EXPECT_TRUE(grad_ok([g = groups](const std::vector<Tensor>& in) { return group_norm(in[0], g, in[1], in[2]); },
                        {x, w, b}));
    EXPECT_TRUE(grad_ok([g = groups](const std::vector<Tensor>& in) { return group_norm(in[0], g); }, {x}));
  }
}

TEST(VisionOps, GroupNormBFloat16ComputesInFloat) {
  const Tensor x = random_tensor({2, 8, 6, 5}, kBFloat16, Layout::Contiguous, 9);
  const Tensor w = random_tensor({8}, kBFloat16, Layout::Contiguous, 10);
  const Tensor y = group_norm(x, 4, w, {});
  EXPECT_DTYPE(y, kBFloat16);
  // The same bf16 values normalized in float64, then rounded once to bf16 (u = 2^-8).
  std::vector<double> tol;
  const std::vector<double> want = ref_group_norm(x.to(kFloat64), 4, w.to(kFloat64), {}, 1e-5, 0x1p-24, &tol);
  for (size_t i = 0; i < want.size(); ++i) tol[i] += 0x1p-8 * std::fabs(want[i]);
  EXPECT_TRUE(all_close_tol(y, want, x.shape(), tol));
}

TEST(VisionOps, GroupNormErrors) {
  EXPECT_EMBER_ERROR(group_norm(zeros({2, 6, 4}), 4), "group_norm", "num_groups 4");
  EXPECT_EMBER_ERROR(group_norm(zeros({2, 6, 4}), 3, zeros({5})), "group_norm", "[6]");
  EXPECT_EMBER_ERROR(group_norm(zeros({6}), 3), "group_norm");
  EXPECT_EMBER_ERROR(group_norm(zeros({2, 6, 4}, kInt64), 3), "group_norm", "floating");
}

TEST(VisionOps, InstanceNormAndRunningStats) {
  const Shape s{3, 4, 5, 3};
  const Tensor x = random_tensor(s, kFloat64, Layout::Contiguous, 31, [](double v) { return 2 * v - 1; });
  const Tensor w = random_tensor({4}, kFloat64, Layout::Contiguous, 32);
  const Tensor b = random_tensor({4}, kFloat64, Layout::Contiguous, 33);
  const Tensor rm = random_tensor({4}, kFloat64, Layout::Contiguous, 34);
  const Tensor rv = random_tensor({4}, kFloat64, Layout::Contiguous, 35, [](double v) { return 1 + v * v; });
  const std::vector<double> rm0 = values(rm), rv0 = values(rv), xv = values(x);
  std::vector<double> tol;
  const std::vector<double> want = ref_group_norm(x, 4, w, b, 1e-5, 0x1p-53, &tol);
  EXPECT_TRUE(all_close_tol(instance_norm(x, rm, rv, w, b, true, 0.3), want, s, tol));
  // PyTorch's update: each plane's mean and unbiased variance, averaged over the batch.
  const int64_t S = 15;
  std::vector<double> em(4), ev(4);
  for (int64_t c = 0; c < 4; ++c) {
    double mm = 0, vv = 0;
    for (int64_t n = 0; n < 3; ++n) {
      const double* p = xv.data() + (n * 4 + c) * S;
      double m = 0, v = 0;
      for (int64_t j = 0; j < S; ++j) m += p[j] / S;
      for (int64_t j = 0; j < S; ++j) v += (p[j] - m) * (p[j] - m) / (S - 1);
      mm += m / 3;
      vv += v / 3;
    }
    em[c] = 0.7 * rm0[c] + 0.3 * mm;
    ev[c] = 0.7 * rv0[c] + 0.3 * vv;
  }
  EXPECT_TRUE(all_close(rm, em, {4}, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(rv, ev, {4}, 1e-12, 1e-12));
  // Evaluation: the running statistics, per channel.
  std::vector<double> eval(xv.size());
  const std::vector<double> wv = values(w), bv = values(b);
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t c = (int64_t(i) / S) % 4;
    eval[i] = (xv[i] - em[c]) / std::sqrt(ev[c] + 1e-5) * wv[c] + bv[c];
  }
  EXPECT_TRUE(all_close(instance_norm(x, rm, rv, w, b, false), eval, s, 1e-12, 1e-12));
  const Tensor xg = x.detach().requires_grad_(true);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return instance_norm(in[0]); }, {xg}));
  EXPECT_EMBER_ERROR(instance_norm(zeros({2, 3, 1})), "instance_norm", "more than 1");
  EXPECT_EMBER_ERROR(instance_norm(x, {}, {}, {}, {}, false), "instance_norm", "running_mean");
  EXPECT_EMBER_ERROR(instance_norm(x, zeros({3}), zeros({3})), "instance_norm", "[4]");
}

}  // namespace
}  // namespace ember::test
