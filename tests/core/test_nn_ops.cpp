// Ops along a dim and NCHW ops against float64 loop references: softmax / log_softmax
// (incl. size-1 dims and logits large enough to overflow a naive exp), cat, stack,
// index_select, gather, scatter_add, one_hot, conv2d (a direct 7-loop reference),
// max_pool2d with indices and avg_pool2d (PyTorch's window and divisor rules).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ember.h"
#include "conv_reference.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

// ----- softmax -----
std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.shape();
  if (dim < 0) dim += x.dim();
  int64_t outer = 1, inner = 1, len = s[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= s[d];
  std::vector<double> v = values(x), out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + i; };
      double m = -kInf, z = 0;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, v[at(k)]);
      for (int64_t k = 0; k < len; ++k) z += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < len; ++k) out[at(k)] = log ? v[at(k)] - m - std::log(z) : std::exp(v[at(k)] - m) / z;
    }
  }
  return out;
}

TEST(NnOps, SoftmaxAndLogSoftmax) {
  struct Case {
    Shape shape;
    int64_t dim;
    double scale;  // logits ~ N(0, scale^2)
  };
  const Case cases[] = {{{4, 5, 6}, 0, 1},  {{4, 5, 6}, 1, 1},   {{4, 5, 6}, 2, 1}, {{4, 5, 6}, -1, 1},
                        {{3, 1, 5}, 1, 1},  {{3, 17}, 1, 30},    {{3, 17}, -1, 30}, {{17, 3}, 0, 30},
                        {{2, 1000}, 1, 3},  {{1}, 0, 1},         {{7, 1}, -1, 1}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    for (DType d : {kFloat32, kFloat64}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE(std::string(dtype_name(d)) + " " + shape_str(c.shape) + " dim " + std::to_string(c.dim) +
                     " std " + std::to_string(c.scale) + " " + layout_name(layout));
        const double scale = c.scale;
        Tensor x = random_tensor(c.shape, d, layout, ++seed, [scale](double v) { return scale * v; });
        const double tol = d == kFloat32 ? 1e-5 : 1e-12;
        Tensor p = softmax(x, c.dim), lp = log_softmax(x, c.dim);
        EXPECT_DTYPE(p, d);
        EXPECT_DTYPE(lp, d);
        EXPECT_CLOSE(p, ref_softmax(x, c.dim, false), c.shape, tol, tol / 10);
        EXPECT_CLOSE(lp, ref_softmax(x, c.dim, true), c.shape, tol, tol);
      }
    }
  }
  // Logits that overflow exp() in any float type without max-subtraction.
  Tensor x = tensor({1000, 0, -1000, 88.8, 89, 89.2}, {2, 3}, kFloat32);
  std::vector<double> want = ref_softmax(x, 1, false), want_log = ref_softmax(x, 1, true);
  EXPECT_CLOSE(softmax(x, 1), want, (Shape{2, 3}), 1e-5, 1e-7);
  EXPECT_CLOSE(log_softmax(x, 1), want_log, (Shape{2, 3}), 1e-5, 1e-4);
  // A size-1 dim: softmax 1 and log_softmax 0 exactly.
  Tensor one = random_tensor({4, 1}, kFloat32, Layout::Contiguous, 99, [](double v) { return 50 * v; });
  EXPECT_CLOSE(softmax(one, 1), std::vector<double>(4, 1.0), (Shape{4, 1}), 0, 0);
  EXPECT_CLOSE(log_softmax(one, 1), std::vector<double>(4, 0.0), (Shape{4, 1}), 0, 0);
  EXPECT_EMBER_ERROR(softmax(x, 2), "softmax", "dim 2");
}

// ----- cat and stack -----
std::vector<double> ref_cat(const std::vector<Tensor>& ts, int64_t dim, Shape* out_shape) {
  Shape s = ts[0].shape();
  if (dim < 0) dim += static_cast<int64_t>(s.size());
  s[dim] = 0;
  for (const Tensor& t : ts) s[dim] += t.size(dim);
  std::vector<double> out(shape_numel(s));
  for (int64_t i = 0; i < shape_numel(s); ++i) {
    Shape idx = unravel(i, s);
    size_t j = 0;
    while (idx[dim] >= ts[j].size(dim)) idx[dim] -= ts[j++].size(dim);
    out[i] = values(ts[j])[ravel(idx, ts[j].shape())];
  }
  *out_shape = s;
  return out;
}

TEST(NnOps, Cat) {
  struct Case {
    std::vector<Shape> shapes;
    int64_t dim;
  };
  const Case cases[] = {{{{2, 3}, {4, 3}}, 0},          {{{2, 3}, {2, 5}, {2, 1}}, 1},
                        {{{2, 3, 4}, {2, 3, 2}}, -1},   {{{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}, -2},
                        {{{5}, {0}, {3}}, 0},           {{{3, 4}}, 1},
                        {{{2, 0}, {2, 3}}, 1}};
  uint64_t seed = 200;
  for (const Case& c : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      SCOPED_TRACE("cat dim " + std::to_string(c.dim) + " of " + shape_str(c.shapes[0]) + "... " + layout_name(layout));
      std::vector<Tensor> ts;
      for (const Shape& s : c.shapes) ts.push_back(random_tensor(s, kFloat64, layout, ++seed));
      Shape s;
      std::vector<double> want = ref_cat(ts, c.dim, &s);
      EXPECT_CLOSE(cat(ts, c.dim), want, s, 0, 0);
    }
  }
  // Promotion: int32 with float32 gives float32; int32 with int64 gives int64.
  Tensor i = tensor({1, 2}, kInt32), f = tensor({0.5, 1.5, 2.5}, kFloat32);
  Tensor cf = cat({i, f});
  EXPECT_DTYPE(cf, kFloat32);
  EXPECT_CLOSE(cf, std::vector<double>({1, 2, 0.5, 1.5, 2.5}), Shape{5}, 0, 0);
  EXPECT_DTYPE(cat({i, tensor({3}, kInt64)}), kInt64);
  EXPECT_DTYPE(cat({tensor({1.0}, kFloat16), tensor({1.0}, kBFloat16)}), kFloat32);

  EXPECT_EMBER_ERROR(cat({zeros({2, 3}), zeros({2, 4})}, 0), "cat", "[2, 3]", "[2, 4]");
  EXPECT_EMBER_ERROR(cat({zeros({2, 3}), zeros({2, 3, 1})}, 0), "cat");
  EXPECT_EMBER_ERROR(cat({zeros({2, 3}), zeros({2, 3})}, 2), "cat");
  EXPECT_EMBER_ERROR(cat({}, 0), "cat");
}

TEST(NnOps, Stack) {
  uint64_t seed = 300;
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      SCOPED_TRACE("stack dim " + std::to_string(dim) + " " + layout_name(layout));
      std::vector<Tensor> ts;
      for (int k = 0; k < 3; ++k) ts.push_back(random_tensor({2, 5}, kFloat32, layout, ++seed));
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape s = {2, 5};
      s.insert(s.begin() + d, 3);
      std::vector<double> want(shape_numel(s));
      for (int64_t i = 0; i < shape_numel(s); ++i) {
        Shape idx = unravel(i, s);
        const int64_t j = idx[d];
        idx.erase(idx.begin() + d);
        want[i] = values(ts[j])[ravel(idx, {2, 5})];
      }
      EXPECT_CLOSE(stack(ts, dim), want, s, 0, 0);
    }
  }
  EXPECT_EMBER_ERROR(stack({zeros({2, 3}), zeros({3, 2})}), "stack", "[2, 3]", "[3, 2]");
  EXPECT_EMBER_ERROR(stack({zeros({2, 3}), zeros({2, 3})}, 3), "stack");
}

// ----- indexing -----
TEST(NnOps, IndexSelect) {
  Tensor x = random_tensor({5, 4, 3}, kFloat32, Layout::Transposed, 400);
  std::vector<double> vx = values(x);
  for (DType it : {kInt64, kInt32}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      SCOPED_TRACE(std::string(dtype_name(it)) + " dim " + std::to_string(dim));
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor index = tensor({2, 0, 2, 1}, it);  // repeated and out of order
      Shape s = x.shape();
      s[d] = 4;
      std::vector<double> want(shape_numel(s)), vi = values(index);
      for (int64_t i = 0; i < shape_numel(s); ++i) {
        Shape idx = unravel(i, s);
        idx[d] = static_cast<int64_t>(vi[idx[d]]);
        want[i] = vx[ravel(idx, x.shape())];
      }
      EXPECT_CLOSE(index_select(x, dim, index), want, s, 0, 0);
    }
  }
  EXPECT_EQ(index_select(x, 0, tensor({}, kInt64)).shape(), (Shape{0, 4, 3}));
  // Read back: a device raises a bad index at the next synchronization, the CPU at once.
  EXPECT_EMBER_ERROR(index_select(x, 0, tensor({1, 7}, kInt64)).to(Device::cpu()), "index_select", "7");
  EXPECT_EMBER_ERROR(index_select(x, 1, tensor({9}, kInt32)).to(Device::cpu()), "index_select", "9");
  EXPECT_EMBER_ERROR(index_select(x, 0, tensor({1.0})), "index_select");  // float index
}

// out[idx] = x[idx with idx[dim] replaced by index[idx]]
std::vector<double> ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> vx = values(x), vi = values(index), out(vi.size());
  for (int64_t i = 0; i < index.numel(); ++i) {
    Shape idx = unravel(i, index.shape());
    idx[dim] = static_cast<int64_t>(vi[i]);
    out[i] = vx[ravel(idx, x.shape())];
  }
  return out;
}

TEST(NnOps, GatherAndScatterAdd) {
  struct Case {
    Shape x, index;
    int64_t dim;
  };
  const Case cases[] = {{{3, 5}, {3, 4}, 1}, {{3, 5}, {2, 5}, 0}, {{4, 6}, {2, 3}, 1}, {{2, 3, 4}, {2, 5, 4}, 1},
                        {{2, 3, 4}, {1, 2, 7}, 2}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE("x " + shape_str(c.x) + " index " + shape_str(c.index) + " dim " + std::to_string(c.dim));
    const double n = double(c.x[c.dim]);
    Tensor index = random_tensor(c.index, kInt64, Layout::Contiguous, ++seed,
                                 [n](double v) { return std::floor(std::fmod(std::fabs(v) * 7, n)); });
    Tensor x = random_tensor(c.x, kFloat64, Layout::Transposed, ++seed);
    EXPECT_CLOSE(gather(x, c.dim, index), ref_gather(x, c.dim, index), c.index, 0, 0);

    // scatter_add: repeated indices accumulate; self is not modified.
    Tensor self = random_tensor(c.x, kFloat64, Layout::Contiguous, ++seed);
    Tensor src = random_tensor(c.index, kFloat64, Layout::Strided, ++seed);
    std::vector<double> before = values(self), want = before, vi = values(index), vs = values(src);
    for (int64_t i = 0; i < index.numel(); ++i) {
      Shape idx = unravel(i, c.index);
      idx[c.dim] = static_cast<int64_t>(vi[i]);
      want[ravel(idx, c.x)] += vs[i];
    }
    EXPECT_CLOSE(scatter_add(self, c.dim, index, src), want, c.x, 1e-14, 1e-14);
    EXPECT_CLOSE(self, before, c.x, 0, 0);
  }
  // All of a row's sources into one slot.
  Tensor acc = scatter_add(zeros({2, 3}), 1, tensor({1, 1, 1, 1, 0, 2, 2, 2}, {2, 4}, kInt64),
                           tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}));
  EXPECT_CLOSE(acc, std::vector<double>({0, 10, 0, 5, 0, 21}), (Shape{2, 3}), 0, 0);
  EXPECT_EMBER_ERROR(gather(zeros({3, 5}), 1, tensor({0, 8}, {1, 2}, kInt64)).to(Device::cpu()), "gather", "8");
}

TEST(NnOps, OneHot) {
  Tensor idx = tensor({0, 3, 1, 3, 2, 0}, {2, 3}, kInt64);
  Tensor explicit_classes = one_hot(idx, 5), inferred = one_hot(idx);
  EXPECT_DTYPE(explicit_classes, kInt64);
  std::vector<double> v = values(idx), want5, want4;
  for (double c : v) {
    for (int k = 0; k < 5; ++k) want5.push_back(k == c ? 1 : 0);
    for (int k = 0; k < 4; ++k) want4.push_back(k == c ? 1 : 0);
  }
  EXPECT_CLOSE(explicit_classes, want5, (Shape{2, 3, 5}), 0, 0);
  EXPECT_CLOSE(inferred, want4, (Shape{2, 3, 4}), 0, 0);  // -1: max index + 1
  EXPECT_CLOSE(one_hot(tensor({2}, kInt64).select(0, 0), 3), std::vector<double>({0, 0, 1}), Shape{3}, 0, 0);
  EXPECT_EMBER_ERROR(one_hot(tensor({0, 6, 1}, kInt64), 4), "one_hot", "6");
  EXPECT_EMBER_ERROR(one_hot(tensor({0, -1}, kInt64), 4), "one_hot", "-1");
}

// ----- conv2d -----
TEST(NnOps, Conv2dMatchesDirectLoops) {
  const ConvCase cases[] = {
      {3, 4, 9, 7, 6, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},   // plain
      {3, 4, 9, 7, 5, 3, 2, {2, 1}, {1, 0}, {1, 1}, 1, true},   // stride and padding per axis
      {2, 3, 9, 9, 2, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, false},  // dilation 2, no bias
      {2, 3, 11, 9, 4, 2, 4, {3, 2}, {1, 2}, {2, 1}, 1, true},  // everything asymmetric
      {3, 4, 9, 7, 6, 3, 2, {1, 2}, {1, 1}, {1, 1}, 2, true},   // groups 2
      {3, 4, 9, 7, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, true},   // depthwise
      {2, 4, 6, 5, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, 4, false},  // depthwise, multiplier 2
      {3, 4, 9, 7, 7, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, false},  // 1x1
      {2, 4, 3, 5, 3, 3, 5, {1, 1}, {0, 0}, {1, 1}, 1, true},   // kernel = whole input
      {3, 6, 1, 7, 6, 1, 3, {1, 2}, {0, 1}, {1, 1}, 3, true},   // H = 1, groups 3
      {2, 3, 6, 5, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},   // "same" 3x3 (im2col's one-copy path)
      {2, 3, 7, 6, 4, 5, 3, {1, 1}, {2, 1}, {1, 1}, 1, true},   // "same" 5x3
      {1, 2, 5, 9, 3, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, false},  // "same", dilation 2
      {2, 2, 4, 6, 3, 4, 3, {1, 1}, {0, 1}, {1, 1}, 1, true},   // OW == W but OH < H
  };
  uint64_t seed = 700;
  for (const ConvCase& p : cases) {
    for (DType d : {kFloat64, kFloat32}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE(std::string(dtype_name(d)) + " input " + shape_str({p.n, p.c, p.h, p.w}) + " weight " +
                     shape_str({p.o, p.c / p.groups, p.kh, p.kw}) + " groups " + std::to_string(p.groups) + " " +
                     layout_name(layout));
        Tensor x = random_tensor({p.n, p.c, p.h, p.w}, d, layout, ++seed);
        Tensor wt = random_tensor({p.o, p.c / p.groups, p.kh, p.kw}, d, layout, ++seed);
        Tensor b = p.bias ? random_tensor({p.o}, d, Layout::Strided, ++seed) : Tensor();
        Shape s;
        std::vector<double> scale, want = ref_conv(p, x, wt, b, &s, &scale);
        Tensor y = conv2d(x, wt, b, p.stride, p.padding, p.dilation, p.groups);
        EXPECT_DTYPE(y, d);
        // K = Cg kh kw + 1 terms (the bias) summed in any order: gamma_K(u) S for the
        // kernel, gamma_K(2^-53) S for the float64 loops it is compared with.
        const double K = double(p.c / p.groups * p.kh * p.kw + 1);
        const double r = gamma_n(K, dtype_unit_roundoff(d)) + gamma_n(K, 0x1p-53);
        std::vector<double> tol(scale.size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = r * scale[i] + 1e-300;
        EXPECT_TRUE(all_close_tol(y, want, s, tol));
      }
    }
  }
}

TEST(NnOps, Conv2dErrors) {
  Tensor x = zeros({2, 3, 8, 8});
  EXPECT_EMBER_ERROR(conv2d(x, zeros({4, 5, 3, 3})), "conv2d");           // 3 input channels, weight wants 5
  EXPECT_EMBER_ERROR(conv2d(x, zeros({4, 1, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2), "conv2d");  // 3 % 2
  EXPECT_EMBER_ERROR(conv2d(zeros({8, 8}), zeros({4, 3, 3, 3})), "conv2d");  // neither 3-D nor 4-D
  EXPECT_EMBER_ERROR(conv2d(x, zeros({4, 3, 3, 3}), zeros({5})), "conv2d");   // bias size
  EXPECT_EMBER_ERROR(conv2d(x, zeros({4, 3, 9, 9})), "conv2d");                // kernel larger than input
}

// ----- pooling -----
struct PoolRef {
  Shape shape;
  std::vector<double> max, max_index, avg;
};
PoolRef ref_pool(const Tensor& x, const Pool2dOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const auto [kh, kw] = o.kernel_size;
  const auto [sh, sw] = o.stride.value_or(o.kernel_size);
  const auto [ph, pw] = o.padding;
  const auto [dh, dw] = o.dilation;
  const int64_t oh = out_size(H, kh, sh, ph, dh, o.ceil_mode), ow = out_size(W, kw, sw, pw, dw, o.ceil_mode);
  const int64_t aoh = out_size(H, kh, sh, ph, 1, o.ceil_mode), aow = out_size(W, kw, sw, pw, 1, o.ceil_mode);
  std::vector<double> v = values(x);
  PoolRef r{{N, C, oh, ow}, {}, {}, {}};
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const double* in = v.data() + plane * H * W;
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {  // max: padding is -inf, so only real elements compete
        double m = -kInf;
        int64_t arg = -1;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t hy = y * sh - ph + i * dh, wz = z * sw - pw + j * dw;
            if (hy < 0 || hy >= H || wz < 0 || wz >= W) continue;
            if (arg < 0 || in[hy * W + wz] > m) m = in[hy * W + wz], arg = hy * W + wz;
          }
        r.max.push_back(m);
        r.max_index.push_back(double(arg));
      }
    for (int64_t y = 0; y < aoh; ++y)
      for (int64_t z = 0; z < aow; ++z) {  // avg: PyTorch's window, clipped at H + pad first
        int64_t h0 = y * sh - ph, w0 = z * sw - pw;
        int64_t h1 = std::min(h0 + kh, H + ph), w1 = std::min(w0 + kw, W + pw);
        const int64_t pool_size = (h1 - h0) * (w1 - w0);
        h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0), h1 = std::min(h1, H), w1 = std::min(w1, W);
        double s = 0;
        for (int64_t hy = h0; hy < h1; ++hy)
          for (int64_t wz = w0; wz < w1; ++wz) s += in[hy * W + wz];
        const int64_t div = o.divisor_override ? o.divisor_override
                                               : (o.count_include_pad ? pool_size : (h1 - h0) * (w1 - w0));
        r.avg.push_back(s / double(div));
      }
  }
  return r;
}

Pool2dOptions pool(Pair k, std::optional<Pair> s, Pair p, Pair d = {1, 1}, bool ceil_mode = false,
                   bool include_pad = true, int64_t divisor = 0) {
  Pool2dOptions o;
  o.kernel_size = k;
  o.stride = s;
  o.padding = p;
  o.dilation = d;
  o.ceil_mode = ceil_mode;
  o.count_include_pad = include_pad;
  o.divisor_override = divisor;
  return o;
}

TEST(NnOps, Pool2dMatchesDirectLoops) {
  struct Case {
    Shape x;
    Pool2dOptions o;
    const char* note;
  };
  const Case cases[] = {
      {{2, 3, 7, 6}, pool({2, 2}, std::nullopt, {0, 0}), "k2, stride defaults to kernel, odd H"},
      {{2, 3, 7, 6}, pool({3, 3}, Pair{2, 2}, {1, 1}), "k3 s2 p1"},
      {{2, 3, 7, 6}, pool({3, 3}, Pair{2, 2}, {1, 1}, {1, 1}, false, false), "k3 s2 p1 exclude pad"},
      {{1, 5, 6, 7}, pool({3, 2}, Pair{1, 2}, {1, 0}), "non-square"},
      {{3, 2, 5, 5}, pool({2, 2}, Pair{1, 1}, {0, 0}), "overlapping"},
      {{1, 3, 9, 8}, pool({3, 3}, Pair{1, 1}, {1, 1}, {2, 2}), "dilation 2 (max only)"},
      {{2, 2, 8, 7}, pool({3, 3}, Pair{2, 2}, {0, 0}, {1, 1}, true), "ceil_mode"},
      {{2, 2, 8, 7}, pool({3, 3}, Pair{2, 2}, {1, 1}, {1, 1}, true), "ceil_mode with padding"},
      {{2, 2, 8, 7}, pool({3, 3}, Pair{2, 2}, {1, 1}, {1, 1}, true, false), "ceil_mode exclude pad"},
      {{2, 2, 6, 6}, pool({2, 2}, Pair{3, 3}, {1, 1}, {1, 1}, true), "ceil_mode stride > kernel"},
      {{2, 2, 7, 9}, pool({2, 2}, std::nullopt, {0, 0}, {1, 1}, true), "2x2 ceil_mode: odd H and W hang over"},
      {{2, 3, 7, 6}, pool({3, 3}, Pair{2, 2}, {1, 1}, {1, 1}, false, true, 5), "divisor_override 5"},
      {{1, 1, 1, 1}, pool({1, 1}, std::nullopt, {0, 0}), "1x1"},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) {
    for (DType d : {kFloat64, kFloat32}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE(std::string(c.note) + " " + std::string(dtype_name(d)) + " " + shape_str(c.x) + " " +
                     layout_name(layout));
        // All negative: padding taken as 0 instead of -inf would win every border window.
        Tensor x = random_tensor(c.x, d, layout, ++seed, [](double v) { return -std::fabs(v) - 1; });
        PoolRef r = ref_pool(x, c.o);
        const double tol = d == kFloat32 ? 1e-6 : 1e-14;
        auto [m, idx] = max_pool2d_with_indices(x, c.o);
        EXPECT_DTYPE(idx, kInt64);
        EXPECT_CLOSE(m, r.max, r.shape, 0, 0);
        EXPECT_CLOSE(idx, r.max_index, r.shape, 0, 0);
        EXPECT_CLOSE(max_pool2d(x, c.o), r.max, r.shape, 0, 0);
        if (c.o.dilation == Pair{1, 1}) {
          EXPECT_CLOSE(avg_pool2d(x, c.o), r.avg, r.shape, tol, tol);
        }
      }
    }
  }
}

// The 2x2 / stride-2 pool has its own loop (branch-free, with a NaN fallback per row):
// ties go to the first tap in row-major order, as in the generic loop, over rows long
// enough for its vector body and tails, in every float dtype.
TEST(NnOps, MaxPool2x2TiesGoToTheFirstTap) {
  uint64_t seed = 950;
  for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16})
    for (int64_t w : {2, 14, 16, 32, 34, 70}) {  // 8 and 16 outputs: exactly one AVX2 / AVX-512 vector
      SCOPED_TRACE(std::string(dtype_name(d)) + " W " + std::to_string(w));
      // Values in {-1, 0, 1}: most windows hold ties.
      Tensor x = random_tensor({2, 3, 6, w}, d, Layout::Contiguous, ++seed, [](double v) { return std::round(v); });
      const Pool2dOptions o = pool({2, 2}, std::nullopt, {0, 0});
      PoolRef r = ref_pool(x, o);
      auto [m, idx] = max_pool2d_with_indices(x, o);
      EXPECT_CLOSE(m, r.max, r.shape, 0, 0);
      EXPECT_CLOSE(idx, r.max_index, r.shape, 0, 0);
    }
}

// A NaN wins its window (the first NaN, when there are several), in the 2x2 loop and
// in the generic one alike; the other windows of the row are unaffected.
TEST(NnOps, MaxPool2dNaNWins) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(2 * 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 7);
  v[2 * 1 + 1] = nan;       // window 1: NaN at its top-right tap
  v[20 + 2 * 6] = nan;      // window 6: NaNs at bottom-left and bottom-right
  v[20 + 2 * 6 + 1] = nan;
  for (DType d : {kFloat32, kFloat64}) {
    for (Pair stride : {Pair{2, 2}, Pair{2, 3}}) {  // {2, 3}: the generic loop
      SCOPED_TRACE(std::string(dtype_name(d)) + " stride " + std::to_string(stride.second));
      Tensor x = tensor(v, {1, 1, 2, 20}, {d});
      auto [m, idx] = max_pool2d_with_indices(x, pool({2, 2}, stride, {0, 0}));
      std::vector<double> got = values(m), at = values(idx);
      for (int64_t k = 0; k < m.size(3); ++k) {
        const int64_t c0 = k * stride.second;
        std::vector<int64_t> taps = {c0, c0 + 1, 20 + c0, 20 + c0 + 1};
        int64_t want = taps[0];
        for (int64_t t : taps)
          if (std::isnan(v[want]) ? false : (std::isnan(v[t]) || v[t] > v[want])) want = t;
        EXPECT_EQ(at[k], double(want)) << "window " << k;
        if (std::isnan(v[want])) EXPECT_TRUE(std::isnan(got[k])) << "window " << k;
        else EXPECT_EQ(got[k], v[want]) << "window " << k;
      }
    }
  }
}

// max_pool2d's backward works from one-byte window codes (Note [Max-pool indices]),
// max_pool2d_with_indices's from int64 plane indices: both must send each gradient to
// the same element, in every window shape, with ties and NaNs, and odd sizes that leave
// a row or column no 2x2 window covers.
TEST(NnOps, MaxPool2dBackwardFromCodesMatchesIndices) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    Shape x;
    Pool2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 7, 9}, pool({2, 2}, std::nullopt, {0, 0})},          // the 2x2 path, odd H and W
      {{2, 2, 6, 34}, pool({2, 2}, std::nullopt, {0, 0})},         // a row longer than a vector
      {{2, 3, 7, 6}, pool({3, 3}, Pair{2, 2}, {1, 1})},            // overlapping windows with padding
      {{1, 3, 9, 8}, pool({3, 3}, Pair{1, 1}, {1, 1}, {2, 2})},    // dilation
      {{2, 2, 8, 7}, pool({3, 3}, Pair{2, 2}, {1, 1}, {1, 1}, true)},  // ceil_mode
      {{2, 3, 7, 9}, pool({2, 2}, std::nullopt, {0, 0}, {1, 1}, true)},  // 2x2 windows hanging over (ceil_mode)
  };
  uint64_t seed = 970;
  for (const Case& c : cases)
    for (DType d : {kFloat32, kFloat64}) {
      SCOPED_TRACE(shape_str(c.x) + " " + std::string(dtype_name(d)));
      Tensor x = random_tensor(c.x, d, Layout::Contiguous, ++seed, [](double v) { return std::round(2 * v); });
      std::vector<double> xv = values(x);
      xv[5] = nan;
      x = tensor(xv, c.x, {d});
      Tensor a = x.detach().requires_grad_(), b = x.detach().requires_grad_();
      Tensor ya = max_pool2d(a, c.o);
      Tensor yb = max_pool2d_with_indices(b, c.o).first;
      Tensor g = random_tensor(ya.shape(), d, Layout::Contiguous, ++seed);
      ya.backward(g);
      yb.backward(g);
      EXPECT_EQ(values(a.grad()), values(b.grad()));
    }
}

TEST(NnOps, MaxPool2dSavesOneBytePerOutputForBackward) {
  const memory::CachingAllocator& alloc = device_allocator(test_device());  // EMBER_TEST_DEVICE's
  auto allocated = [&] { return alloc.stats().allocated_bytes[memory::kAllPools].current; };
  Tensor x = random_tensor({8, 16, 32, 32}, kFloat32);  // 8 * 16 * 16 * 16 = 32768 outputs
  x.requires_grad_();
  const int64_t before = allocated();
  Tensor y = max_pool2d(x, pool({2, 2}, std::nullopt, {0, 0}));
  EXPECT_EQ(allocated() - before, 32768 * 4 + 32768);  // the output, and a byte per output
  const int64_t before_indices = allocated();
  auto [z, idx] = max_pool2d_with_indices(x, pool({2, 2}, std::nullopt, {0, 0}));
  EXPECT_EQ(allocated() - before_indices, 32768 * 4 + 32768 * 8);  // PyTorch's int64 indices
  EXPECT_DTYPE(idx, kInt64);
  NoGradGuard no_grad;
  const int64_t before_eval = allocated();
  Tensor e = max_pool2d(x, pool({2, 2}, std::nullopt, {0, 0}));
  EXPECT_EQ(allocated() - before_eval, 32768 * 4);  // no gradient: the values alone
}

}  // namespace
}  // namespace ember::test
