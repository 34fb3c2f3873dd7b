// The pooling kernels (kernels/cuda/pool.cuh) against the CPU backend: max_pool2d with
// its int64 indices and uint8 window codes, with the fused ReLU, NaNs and ties;
// avg_pool2d with padding, ceil_mode, count_include_pad and divisor_override; and both
// backwards, given the CPU's own indices. The kernels do the CPU's comparisons and
// additions in the CPU's order, so float results are compared exactly. Every kernel
// choice runs (Note [Pool kernels]): the windows kernels where the windows tile the
// input, the general ones everywhere, each with int32 and int64 index arithmetic; all
// give the same bits. Outputs start as NaN (DeviceArray), so an element a kernel leaves
// unwritten fails.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/ops.h"
#include "kernels/cuda/pool.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda::test {
namespace {

struct PoolCase {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode;
};
const std::vector<PoolCase> kPoolCases = {
    {1, 3, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, true},
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},    // the CPU's 2x2 fast path
    {1, 2, 33, 31, 2, 2, 2, 2, 0, 0, 1, 1, true},   // odd sizes: last windows hang over
    {1, 1, 5, 7, 3, 2, 1, 2, 1, 0, 2, 1, false},    // dilation
    {2, 2, 9, 6, 4, 3, 3, 2, 2, 1, 1, 1, true},
    {1, 3, 11, 13, 3, 3, 2, 3, 0, 1, 1, 2, true},
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, false},
    {1, 3, 6, 10, 3, 5, 1, 1, 1, 2, 1, 1, false},   // overlapping windows, stride 1
};

std::string str(const PoolCase& c) {
  return "[" + std::to_string(c.N) + ", " + std::to_string(c.C) + ", " + std::to_string(c.H) + ", " +
         std::to_string(c.W) + "] kernel " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " stride " +
         std::to_string(c.sh) + "," + std::to_string(c.sw) + " pad " + std::to_string(c.ph) + "," +
         std::to_string(c.pw) + " dilation " + std::to_string(c.dh) + "," + std::to_string(c.dw) +
         (c.ceil_mode ? " ceil" : "");
}

Pool2dOptions options(const PoolCase& c) {
  Pool2dOptions o;
  o.kernel_size = {c.kh, c.kw};
  o.stride = std::pair{c.sh, c.sw};
  o.padding = {c.ph, c.pw};
  o.dilation = {c.dh, c.dw};
  o.ceil_mode = c.ceil_mode;
  return o;
}
Pool2dParams params(const PoolCase& c) {
  return Pool2dParams{{c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.ceil_mode, true, 0};
}
PoolGeometry geometry(const PoolCase& c) {
  return pool_geometry(c.N, c.C, c.H, c.W, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.ceil_mode);
}

// Inputs: plain random values; values on a coarse grid (many ties: the first maximum
// must win); and random values with NaNs sprinkled in (a NaN wins its window, the first
// NaN if several).
enum class Input { kRandom, kTies, kNaNs };
std::vector<double> pool_input(const PoolCase& c, Input kind, uint32_t seed) {
  auto v = random_doubles(size_t(c.N * c.C * c.H * c.W), seed);
  std::mt19937 rng(seed);
  for (auto& x : v) {
    if (kind == Input::kTies) x = std::floor(x);
    if (kind == Input::kNaNs && rng() % 7 == 0) x = NAN;
  }
  return v;
}

std::vector<uint8_t> as_bytes(const Tensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.numel());
}

// The launchers' own choice (windows kernels where they apply, int32 index arithmetic),
// and each with one or both of those forbidden: the last runs the first kernels' code.
const PoolKernelChoice kChoices[] = {{true, true}, {false, true}, {true, false}, {false, false}, {true, true, false}};
std::string str(const PoolKernelChoice& k) {
  return std::string(k.windows ? (k.pairs ? "windows where they tile" : "windows, no pairs") : "general kernels") +
         (k.int32 ? ", int32" : ", int64");
}

// Equal bit for bit (so -0 differs from +0, and NaN payloads count).
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "first difference at element " << i << " of " << got.size() << ": got "
                                           << to_double(got[i]) << ", want " << to_double(want[i]);
  return ::testing::AssertionSuccess();
}

// Max pooling of case c, input kind `kind`, by every kernel choice: values, int64
// indices, uint8 codes and the fused ReLU against the CPU backend, exactly; then the
// backward from both index forms (the CPU's own) against the CPU's backward, exactly,
// with some gradients -0 (the general kernel's 0 + gy makes them +0); and every choice
// gives the same bits. gx_offset 1: gx not aligned to two elements; in_offset 0: x, y and
// gy aligned (the pairs kernels' condition, Note [Pool pairs]).
void check_max_pool(const PoolCase& c, Input kind, size_t gx_offset = 0, size_t in_offset = 1) {
  const auto x = pool_input(c, kind, uint32_t(c.H * 7 + c.W + int(kind)));
  const Tensor xt = tensor(x, {c.N, c.C, c.H, c.W});
  const PoolGeometry g = geometry(c);
  const auto [want, want_idx] = max_pool2d_with_indices(xt, options(c));
  ASSERT_EQ(want.shape(), (Shape{c.N, c.C, g.OH, g.OW}));
  const size_t n_out = size_t(want.numel());
  const Tensor cpu_out = empty(want.shape()), cpu_codes = empty(want.shape(), kUInt8);
  max_pool2d_stub(Device::cpu(), cpu_out, cpu_codes, xt, params(c));  // the codes autograd keeps
  const Tensor want_relu = max_pool2d(xt, options(c), Activation::kReLU);

  std::vector<double> gy = random_doubles(n_out, uint32_t(c.kh * 3 + c.kw + int(kind)));
  for (size_t i = 0; i < gy.size(); i += 5) gy[i] = -0.0;
  const Tensor gyt = tensor(gy, want.shape());
  DeviceArray<float> dx(from_doubles<float>(x), in_offset), dgy(from_doubles<float>(gy), in_offset);
  DeviceArray<int64_t> didx(want_idx.to_vector<int64_t>());
  DeviceArray<uint8_t> dcodes(as_bytes(cpu_codes));
  std::vector<float> first_gx[2];
  for (const PoolKernelChoice& k : kChoices) {
    SCOPED_TRACE(str(k));
    DeviceArray<float> y(n_out, in_offset);
    DeviceArray<int64_t> idx(n_out);
    max_pool2d_forward(dx.data(), y.data(), idx.data(), nullptr, g, false, nullptr, k);
    EXPECT_TRUE(same_bits(y.host(), from_doubles<float>(want.to_vector<double>())));
    EXPECT_EQ(idx.host(), want_idx.to_vector<int64_t>());

    DeviceArray<float> y2(n_out);
    DeviceArray<uint8_t> codes(n_out);
    max_pool2d_forward(dx.data(), y2.data(), nullptr, codes.data(), g, false, nullptr, k);
    EXPECT_TRUE(same_bits(y2.host(), from_doubles<float>(want.to_vector<double>())));
    EXPECT_EQ(codes.host(), as_bytes(cpu_codes));

    // Values only, with the fused ReLU (NaN stays NaN).
    DeviceArray<float> y3(n_out);
    max_pool2d_forward(dx.data(), y3.data(), nullptr, nullptr, g, true, nullptr, k);
    EXPECT_TRUE(same_bits(y3.host(), from_doubles<float>(want_relu.to_vector<double>())));

    for (DType index_dtype : {kInt64, kUInt8}) {
      SCOPED_TRACE(index_dtype == kInt64 ? "backward from int64 indices" : "backward from uint8 codes");
      const Tensor want_gx = empty(xt.shape());
      max_pool2d_backward_stub(Device::cpu(), want_gx, gyt, index_dtype == kInt64 ? want_idx : cpu_codes, params(c));
      DeviceArray<float> gx(size_t(xt.numel()), gx_offset);
      if (index_dtype == kInt64)
        max_pool2d_backward(dgy.data(), didx.data(), nullptr, gx.data(), g, nullptr, k);
      else
        max_pool2d_backward(dgy.data(), nullptr, dcodes.data(), gx.data(), g, nullptr, k);
      // The gradients of each pixel's windows, added in the CPU's order: exact.
      const std::vector<float> got = gx.host();
      EXPECT_TRUE(all_close(got, want_gx.to_vector<double>(), 0.0));
      std::vector<float>& first = first_gx[index_dtype == kInt64 ? 0 : 1];
      if (first.empty()) first = got;
      EXPECT_TRUE(same_bits(got, first)) << "against " << str(kChoices[0]);
    }
  }
}

TEST(CudaPool, MaxPoolForwardAndBackwardMatchCpu) {
  EMBER_NEED_DEVICE();
  for (const PoolCase& c : kPoolCases)
    for (Input kind : {Input::kRandom, Input::kTies, Input::kNaNs}) {
      SCOPED_TRACE(str(c) + " input kind " + std::to_string(int(kind)));
      check_max_pool(c, kind);
    }
}

// Windows that tile the input (kernel == stride, no padding or dilation), which the
// windows kernels take: rows and columns left over below and right of the last windows,
// windows clipped by ceil_mode, 1 x 1 planes, many planes, kw = 2 with and without the
// pair stores (W = 2 OW, gx aligned).
const std::vector<PoolCase> kTilingCases = {
    {3, 70, 5, 7, 2, 2, 2, 2, 0, 0, 1, 1, false},   // 210 planes, a row and a column left over
    {2, 2, 7, 6, 2, 2, 2, 2, 0, 0, 1, 1, false},    // pairs, a row left over
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},    // pairs
    {2, 3, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1, false},  // the CNN's (a few planes)
    {1, 2, 33, 31, 2, 2, 2, 2, 0, 0, 1, 1, true},   // ceil_mode clips the last windows
    {2, 5, 9, 10, 3, 3, 3, 3, 0, 0, 1, 1, false},   // 3x3: a column left over
    {2, 5, 11, 11, 3, 3, 3, 3, 0, 0, 1, 1, false},  // 3x3: two rows and columns left over
    {1, 4, 7, 11, 3, 2, 3, 2, 0, 0, 1, 1, true},    // clipped by ceil_mode both ways
    {1, 3, 6, 4, 2, 4, 2, 4, 0, 0, 1, 1, false},    // one window across each row
    {1, 2, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, false},    // 1x1: the identity
    {4, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, false},    // 1x1 planes
    {4, 3, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, true},     // 1x1 planes in clipped 2x2 windows
    {2, 2, 1, 9, 1, 2, 1, 2, 0, 0, 1, 1, false},    // one row
    {2, 16, 33, 35, 2, 2, 2, 2, 0, 0, 1, 1, true},  // 9792 outputs: the windows forward's second output
                                                    // a turn (the emulator's grid: 8192 threads), clipped
};

TEST(CudaPool, TilingWindowsMatchCpu) {
  EMBER_NEED_DEVICE();
  for (const PoolCase& c : kTilingCases) {
    ASSERT_TRUE(pool_windows_tile(geometry(c))) << str(c);
    for (Input kind : {Input::kRandom, Input::kTies, Input::kNaNs})
      for (size_t gx_offset : {0, 1}) {
        SCOPED_TRACE(str(c) + " input kind " + std::to_string(int(kind)) + " gx offset " + std::to_string(gx_offset));
        check_max_pool(c, kind, gx_offset);
      }
  }
  // Overlap, padding, dilation, or an input smaller than a window: the general kernels.
  for (const PoolCase& c : {PoolCase{1, 1, 8, 8, 2, 2, 1, 1, 0, 0, 1, 1, false},
                            PoolCase{1, 1, 8, 8, 2, 2, 2, 2, 1, 1, 1, 1, false},
                            PoolCase{1, 1, 8, 8, 2, 2, 2, 2, 0, 0, 2, 1, false},
                            PoolCase{1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, false}})
    EXPECT_FALSE(pool_windows_tile(geometry(c))) << str(c);
}

// The pairs kernels (Note [Pool pairs]): aligned inputs, OW even, with a row left below
// the last windows, many planes over several grid turns (the second pair a turn), and
// shapes one condition short of them (OW odd, W odd, ceil_mode clipping a row), which take
// the windows kernels; every choice gives the same bits, against the CPU.
TEST(CudaPool, PairsMatchCpu) {
  EMBER_NEED_DEVICE();
  const std::vector<PoolCase> cases = {
      {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},     // pairs
      {2, 2, 7, 12, 2, 2, 2, 2, 0, 0, 1, 1, false},    // pairs, a row left over
      {3, 70, 6, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},    // 210 planes
      {2, 16, 56, 56, 2, 2, 2, 2, 0, 0, 1, 1, false},  // the bench's planes: 25088 outputs, a second pair a turn
      {2, 3, 8, 10, 2, 2, 2, 2, 0, 0, 1, 1, false},    // OW = 5: windows kernels
      {2, 3, 8, 17, 2, 2, 2, 2, 0, 0, 1, 1, false},    // W odd: windows kernels
      {1, 2, 9, 16, 2, 2, 2, 2, 0, 0, 1, 1, true},     // ceil_mode clips the last row: windows kernels
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    const PoolGeometry g = geometry(c);
    const DeviceArray<float> x(size_t(c.N * c.C * c.H * c.W)), y(size_t(c.N * c.C * g.OH * g.OW));
    const DeviceArray<uint8_t> codes(size_t(c.N * c.C * g.OH * g.OW));
    EXPECT_EQ(pool_pairs(g, PoolKernelChoice{}, x.data(), y.data(), nullptr, codes.data()), i < 4) << str(c);
    EXPECT_FALSE(pool_pairs(g, PoolKernelChoice{true, true, false}, x.data(), y.data(), nullptr, codes.data()));
    EXPECT_FALSE(pool_pairs(g, PoolKernelChoice{}, x.data() + 1, y.data(), nullptr, codes.data()));
    for (Input kind : {Input::kRandom, Input::kTies, Input::kNaNs}) {
      SCOPED_TRACE(str(c) + " input kind " + std::to_string(int(kind)));
      check_max_pool(c, kind, /*gx_offset=*/0, /*in_offset=*/0);
    }
  }
}

// The pairs kernels in bfloat16 (rows of 4 pixels as 8-byte vectors): the CPU's maximum
// and indices exactly, and the windows kernels' bits forward and backward.
TEST(CudaPool, PairsInBFloat16) {
  EMBER_NEED_DEVICE();
  const PoolCase c{2, 5, 9, 20, 2, 2, 2, 2, 0, 0, 1, 1, false};
  const PoolGeometry g = geometry(c);
  const Tensor xb = tensor(pool_input(c, Input::kNaNs, 8), {c.N, c.C, c.H, c.W}, kBFloat16);
  const auto [want, want_idx] = max_pool2d_with_indices(xb, options(c));
  const size_t n_out = size_t(want.numel());
  using B = __nv_bfloat16;
  DeviceArray<B> x(from_doubles<B>(xb.to_vector<double>())), y(n_out), y_windows(n_out);
  DeviceArray<int64_t> idx(n_out), idx_windows(n_out);
  DeviceArray<uint8_t> codes(n_out), codes_windows(n_out);
  const PoolKernelChoice no_pairs{true, true, false};
  ASSERT_TRUE(pool_pairs(g, PoolKernelChoice{}, x.data(), y.data(), idx.data(), nullptr));
  max_pool2d_forward(x.data(), y.data(), idx.data(), nullptr, g, false, nullptr);
  EXPECT_TRUE(all_close(y.host(), want.to_vector<double>(), 0.0));
  EXPECT_EQ(idx.host(), want_idx.to_vector<int64_t>());
  max_pool2d_forward(x.data(), y.data(), nullptr, codes.data(), g, true, nullptr);
  max_pool2d_forward(x.data(), y_windows.data(), nullptr, codes_windows.data(), g, true, nullptr, no_pairs);
  EXPECT_TRUE(same_bits(y.host(), y_windows.host()));
  EXPECT_EQ(codes.host(), codes_windows.host());
  const DeviceArray<B> gy(from_doubles<B>(random_doubles(n_out, 12)));
  DeviceArray<B> gx(size_t(xb.numel())), gx_windows(size_t(xb.numel()));
  max_pool2d_backward(gy.data(), nullptr, codes.data(), gx.data(), g, nullptr);
  max_pool2d_backward(gy.data(), nullptr, codes.data(), gx_windows.data(), g, nullptr, no_pairs);
  EXPECT_TRUE(same_bits(gx.host(), gx_windows.host()));
  max_pool2d_backward(gy.data(), idx.data(), nullptr, gx.data(), g, nullptr);
  max_pool2d_backward(gy.data(), idx.data(), nullptr, gx_windows.data(), g, nullptr, no_pairs);
  EXPECT_TRUE(same_bits(gx.host(), gx_windows.host()));
}

TEST(CudaPool, MaxPoolBackwardIgnoresIndicesOutsideTheirWindow) {
  EMBER_NEED_DEVICE();
  // 1 x 1 x 5 x 5, 2x2 windows (row 4 and column 4 in no window). Int64 indices: output 0
  // names pixel 15 (outside its window), output 1 a huge index (whose low 32 bits name
  // its pixel 2), output 2 pixel 16 (its own), output 3 pixel 24 (in no window). Codes:
  // output 0 its tap 0 (pixel 0), output 1 code 4 (past its 2x2 window: where a left-over
  // row would continue it), output 2 tap 3 (pixel 16), output 3 code 255. Only the
  // in-window ones reach the input.
  const PoolGeometry g = pool_geometry(1, 1, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, false);
  DeviceArray<float> gy(std::vector<float>{1, 2, 3, 4});
  DeviceArray<int64_t> idx(std::vector<int64_t>{15, (int64_t(1) << 40) + 2, 16, 24});
  DeviceArray<uint8_t> codes(std::vector<uint8_t>{0, 4, 3, 255});
  std::vector<double> want_idx(25, 0.0), want_codes(25, 0.0);
  want_idx[16] = want_codes[16] = 3;
  want_codes[0] = 1;
  for (const PoolKernelChoice& k : kChoices) {
    SCOPED_TRACE(str(k));
    DeviceArray<float> gx(25), gx2(25);
    max_pool2d_backward(gy.data(), idx.data(), nullptr, gx.data(), g, nullptr, k);
    EXPECT_TRUE(all_close(gx.host(), want_idx, 0.0));
    max_pool2d_backward(gy.data(), nullptr, codes.data(), gx2.data(), g, nullptr, k);
    EXPECT_TRUE(all_close(gx2.host(), want_codes, 0.0));
  }
}

TEST(CudaPool, AvgPoolForwardAndBackwardMatchCpu) {
  EMBER_NEED_DEVICE();
  for (PoolCase c : kPoolCases) {
    c.dh = c.dw = 1;  // average pooling has no dilation
    for (const auto& [include_pad, divisor] : {std::pair{true, int64_t(0)}, {false, 0}, {true, 5}, {false, 3}}) {
      SCOPED_TRACE(str(c) + (include_pad ? " count_include_pad" : "") + " divisor_override " + std::to_string(divisor));
      Pool2dOptions o = options(c);
      o.count_include_pad = include_pad;
      o.divisor_override = divisor;
      PoolGeometry g = geometry(c);
      g.count_include_pad = include_pad;
      g.divisor_override = divisor;
      const auto x = random_doubles(size_t(c.N * c.C * c.H * c.W), uint32_t(c.H + divisor));
      const Tensor xt = tensor(x, {c.N, c.C, c.H, c.W});
      const Tensor want = avg_pool2d(xt, o);
      ASSERT_EQ(want.shape(), (Shape{c.N, c.C, g.OH, g.OW}));
      DeviceArray<float> dx(from_doubles<float>(x), 1), y(size_t(want.numel()));
      avg_pool2d_forward(dx.data(), y.data(), g, nullptr);
      DeviceArray<float> y64(size_t(want.numel()));
      avg_pool2d_forward(dx.data(), y64.data(), g, nullptr, PoolKernelChoice{true, false});
      EXPECT_TRUE(same_bits(y64.host(), y.host())) << "int64 index arithmetic";
      // Both sides sum a window's T = kh kw float32 values and divide (or multiply by a
      // rounded reciprocal): at most T + 1 roundings, each within 2^-24 of the window's
      // sum of |x| over the divisor (S, the same pooling of |x| in float64). The two
      // orders may differ by 2 gamma_{T+1}(2^-24) S; an average near 0 has the error of
      // its terms, not of itself.
      const double T = double(c.kh * c.kw + 1);
      const std::vector<double> S = avg_pool2d(abs(xt).to(kFloat64), o).to_vector<double>();
      std::vector<double> tol(S.size());
      for (size_t i = 0; i < S.size(); ++i) tol[i] = 2 * gamma_n(T, 0x1p-24) * S[i];
      EXPECT_TRUE(all_within(y.host(), want.to_vector<double>(), tol));

      const auto gy = random_doubles(size_t(want.numel()), uint32_t(c.W + divisor));
      const Tensor want_gx = empty(xt.shape());
      Pool2dParams p = params(c);
      p.count_include_pad = include_pad;
      p.divisor_override = divisor;
      avg_pool2d_backward_stub(Device::cpu(), want_gx, tensor(gy, want.shape()), p);
      DeviceArray<float> dgy(from_doubles<float>(gy)), gx(size_t(xt.numel()), 1);
      avg_pool2d_backward(dgy.data(), gx.data(), g, nullptr);
      DeviceArray<float> gx64(size_t(xt.numel()));
      avg_pool2d_backward(dgy.data(), gx64.data(), g, nullptr, PoolKernelChoice{true, false});
      EXPECT_TRUE(same_bits(gx64.host(), gx.host())) << "int64 index arithmetic";
      // Each input gathers gy / divisor from at most kh kw windows: the same T + 1
      // roundings, on the same scatter of |gy| (S_gx).
      const Tensor s_gx = empty(xt.shape(), kFloat64);
      avg_pool2d_backward_stub(Device::cpu(), s_gx, abs(tensor(gy, want.shape())).to(kFloat64), p);
      const std::vector<double> S_gx = s_gx.to_vector<double>();
      std::vector<double> tol_gx(S_gx.size());
      for (size_t i = 0; i < S_gx.size(); ++i) tol_gx[i] = 2 * gamma_n(T, 0x1p-24) * S_gx[i];
      EXPECT_TRUE(all_within(gx.host(), want_gx.to_vector<double>(), tol_gx));
    }
  }
}

TEST(CudaPool, OtherDtypes) {
  EMBER_NEED_DEVICE();
  const PoolCase c = kPoolCases[0];
  const PoolGeometry g = geometry(c);
  const auto x = pool_input(c, Input::kNaNs, 3);
  // float64: max exactly, average to float64 rounding.
  const Tensor x64 = tensor(x, {c.N, c.C, c.H, c.W}, kFloat64);
  const auto [want, want_idx] = max_pool2d_with_indices(x64, options(c));
  DeviceArray<double> dx(x), y(size_t(want.numel()));
  DeviceArray<int64_t> idx(size_t(want.numel()));
  max_pool2d_forward(dx.data(), y.data(), idx.data(), nullptr, g, false, nullptr);
  EXPECT_TRUE(all_close(y.host(), want.to_vector<double>(), 0.0));
  EXPECT_EQ(idx.host(), want_idx.to_vector<int64_t>());
  // bfloat16: the maximum of bf16 values is one of them, exactly; indices equal.
  const Tensor xb = tensor(x, {c.N, c.C, c.H, c.W}, kBFloat16);
  const auto [want_b, want_b_idx] = max_pool2d_with_indices(xb, options(c));
  DeviceArray<__nv_bfloat16> dxb(from_doubles<__nv_bfloat16>(xb.to_vector<double>())), yb(size_t(want_b.numel()));
  max_pool2d_forward(dxb.data(), yb.data(), idx.data(), nullptr, g, false, nullptr);
  EXPECT_TRUE(all_close(yb.host(), want_b.to_vector<double>(), 0.0));
  EXPECT_EQ(idx.host(), want_b_idx.to_vector<int64_t>());
  // float16 average: inputs exact in float16, summed in float, rounded once to float16,
  // as the CPU backend does. The two float results a, b differ by at most 2 gamma_{T+1}
  // (2^-24) S (as above); rounding each to nearest adds up to u16 (|a| + |b|) more, u16 =
  // 2^-11, or half a float16 subnormal (2^-25) each where they underflow.
  const Tensor xh = tensor(pool_input(c, Input::kRandom, 4), {c.N, c.C, c.H, c.W}, kFloat16);
  Pool2dOptions o = options(c);
  const Tensor want_h = avg_pool2d(xh, o);
  DeviceArray<__half> dxh(from_doubles<__half>(xh.to_vector<double>())), yh(size_t(want_h.numel()));
  avg_pool2d_forward(dxh.data(), yh.data(), g, nullptr);
  const std::vector<double> wh = want_h.to_vector<double>(), S = avg_pool2d(abs(xh).to(kFloat64), o).to_vector<double>();
  const double uh = 0x1p-11, e = 2 * gamma_n(double(c.kh * c.kw + 1), 0x1p-24);
  std::vector<double> tol(wh.size());
  for (size_t i = 0; i < wh.size(); ++i)
    tol[i] = 2 * uh / (1 - uh) * std::abs(wh[i]) + (1 + 2 * uh) * e * S[i] + 2 * 0x1p-25;
  EXPECT_TRUE(all_within(yh.host(), wh, tol));
}

TEST(CudaPool, EmptyInputsAndBadArguments) {
  EMBER_NEED_DEVICE();
  PoolGeometry g = pool_geometry(0, 3, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, false);
  DeviceArray<float> a(0), b(0);
  DeviceArray<int64_t> i(0);
  max_pool2d_forward(a.data(), b.data(), i.data(), nullptr, g, false, nullptr);
  max_pool2d_backward(a.data(), i.data(), nullptr, b.data(), g, nullptr);
  avg_pool2d_forward(a.data(), b.data(), g, nullptr);
  avg_pool2d_backward(a.data(), b.data(), g, nullptr);

  // Inputs smaller than a window (no outputs): the backward writes zeros.
  g = pool_geometry(2, 3, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, false);
  ASSERT_EQ(g.OH, 0);
  DeviceArray<float> gx(6);
  max_pool2d_backward(a.data(), i.data(), nullptr, gx.data(), g, nullptr);
  EXPECT_TRUE(all_close(gx.host(), std::vector<double>(6, 0.0), 0.0));
  DeviceArray<float> gx_avg(6);
  avg_pool2d_backward(a.data(), gx_avg.data(), g, nullptr);
  EXPECT_TRUE(all_close(gx_avg.host(), std::vector<double>(6, 0.0), 0.0));

  g = pool_geometry(1, 1, 40, 40, 17, 17, 1, 1, 0, 0, 1, 1, false);
  DeviceArray<uint8_t> codes(size_t(g.OH * g.OW));
  EXPECT_THROW(max_pool2d_forward(a.data(), b.data(), nullptr, codes.data(), g, false, nullptr), Error);  // 289 taps
  EXPECT_THROW(max_pool2d_forward(a.data(), b.data(), i.data(), codes.data(), g, false, nullptr), Error);
  EXPECT_THROW(max_pool2d_backward(a.data(), nullptr, nullptr, b.data(), g, nullptr), Error);
  g = pool_geometry(1, 1, 8, 8, 2, 2, 2, 2, 2, 0, 1, 1, false);  // padding above half the kernel
  EXPECT_THROW(avg_pool2d_forward(a.data(), b.data(), g, nullptr), Error);
  g = pool_geometry(1, 1, 8, 8, 3, 3, 2, 2, 1, 1, 2, 1, false);
  EXPECT_THROW(avg_pool2d_backward(a.data(), b.data(), g, nullptr), Error);  // dilation
}

}  // namespace
}  // namespace ember::kernels::cuda::test
