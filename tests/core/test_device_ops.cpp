// The elementwise, random, reduction, softmax and index ops on the test device, each
// compared with the CPU backend (or a float64 reference) on inputs a device kernel must
// get right beyond the contiguous case: strided, transposed and broadcast (stride-0)
// views, views narrowed by one element (so their pointers are not 16-byte aligned),
// sizes 1, 7, 1023, 4097 and 0, every dtype the op takes. Results are read back without
// an explicit synchronization: the copy to the host must wait for the stream.
// On the CPU these tests would compare the CPU with itself, so they skip there.
#include <cmath>
#include <functional>

#include "core/op_utils.h"
#include "core/stream.h"
#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

#define EMBER_DEVICE_ONLY()                                                                  \
  do {                                                                                       \
    if (!on_cuda()) GTEST_SKIP() << "compares the test device with the CPU backend";         \
  } while (0)

const Device kCpu = Device::cpu();

// Relative tolerance of a result computed in float (or double) and stored in `t`: a few
// ulp of the device's math functions (CUDA's float exp/log/tanh/erf are within 2 ulp),
// or one rounding of the 16-bit storage type, whichever is larger.
double ulps(DType t, double n = 4) {
  switch (t) {
    case kFloat64: return n * 0x1p-52;
    case kFloat16: return 0x1p-10;
    case kBFloat16: return 0x1p-7;
    default: return n * 0x1p-23;
  }
}

// Views of a fresh [rows, cols] tensor of `t` on the device, all with the same values
// as `base` (itself on the device): contiguous, transposed twice, narrowed by one
// element, broadcast from a row.
std::vector<std::pair<const char*, Tensor>> views(const Tensor& base) {
  const int64_t rows = base.size(0), cols = base.size(1);
  Tensor wide = zeros({rows, cols + 1}, {base.dtype(), base.device()});
  wide.narrow(1, 1, cols).copy_(base);
  return {{"contiguous", base},
          {"transposed", base.t().contiguous().t()},
          {"narrowed (unaligned)", wide.narrow(1, 1, cols)},
          {"broadcast row", base.narrow(0, 0, 1).expand({rows, cols})}};
}

Tensor random_on_device(const Shape& shape, DType dtype, uint64_t seed, double lo = -3, double hi = 3) {
  Generator g(seed);
  Tensor u = rand(shape, {kFloat64, kCpu}, &g);
  return add(mul(u, Scalar(hi - lo)), Scalar(lo)).to(dtype).to(test_device());
}

void expect_matches_cpu(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(got.device() == test_device());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_CLOSE(got, values(want), want.shape(), rtol, atol);
}

const std::vector<int64_t> kSizes = {1, 7, 1023, 4097};

TEST(DeviceOps, UnaryOpsOnEveryLayoutAndFloatDtype) {
  EMBER_DEVICE_ONLY();
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},     {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},     {"log", [](const Tensor& x) { return log(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }}, {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x)); }},
      {"relu", [](const Tensor& x) { return relu(x); }},   {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); }}, {"erf", [](const Tensor& x) { return erf(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},   {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -1.0, 2.0); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }}};
  // The device's sin, cos, exp and expm1 are within 2 ulp of the result (CUDA's
  // documented bounds), the CPU's within 1, and 16-bit results round once more.
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> libm_ops = {
      {"sin", [](const Tensor& x) { return sin(x); }}, {"cos", [](const Tensor& x) { return cos(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }}, {"elu", [](const Tensor& x) { return elu(x, 1.5); }}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16})
    for (int64_t n : kSizes) {
      const Tensor base = random_on_device({3, n}, dt, 7 + n);
      for (const auto& [layout, x] : views(base))
        for (const auto& [name, op] : ops) {
          // The CPU computes on its own copy of the same view.
          const Tensor want = op(x.to(kCpu));
          // abs feeds log/sqrt/rsqrt, so the tolerance covers two roundings for 16-bit.
          expect_matches_cpu(op(x), want, 2 * ulps(dt), 1e-300,
                             std::string(name) + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " " + layout);
        }
      for (const auto& [layout, x] : views(base))
        for (const auto& [name, op] : libm_ops)
          expect_matches_cpu(op(x), op(x.to(kCpu)), 4 * ulps(dt), 1e-300,
                             std::string(name) + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " " + layout);
    }
}

TEST(DeviceOps, IntegerUnaryAndClampAreExact) {
  EMBER_DEVICE_ONLY();
  for (DType dt : {kUInt8, kInt32, kInt64}) {
    const Tensor x = random_on_device({5, 1023}, dt, 3, dt == kUInt8 ? 0 : -100, 100);
    for (const auto& [layout, v] : views(x)) {
      const std::string what = std::string(dtype_name(dt)) + " " + layout;
      expect_matches_cpu(neg(v), neg(v.to(kCpu)), 0, 0, "neg " + what);
      expect_matches_cpu(abs(v), abs(v.to(kCpu)), 0, 0, "abs " + what);
      expect_matches_cpu(relu(v), relu(v.to(kCpu)), 0, 0, "relu " + what);
      expect_matches_cpu(clamp(v, 3.0, 50.0), clamp(v.to(kCpu), 3.0, 50.0), 0, 0, "clamp " + what);
    }
  }
}

TEST(DeviceOps, BinaryOpsBroadcastAndEveryDtype) {
  EMBER_DEVICE_ONLY();
  using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> arith = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"relu_backward", [](const Tensor& a, const Tensor& b) { return detail::relu_backward(a, b); }}};
  const std::vector<std::pair<const char*, Op>> compare = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kUInt8, kInt32, kInt64, kBool}) {
    const bool integral = !is_floating(dt);
    // Small integers, so that ties (eq, maximum) occur and products stay exact.
    Generator g(1);
    const Tensor a = randint(0, 5, {7, 1}, {kInt64, kCpu}, &g).to(dt).to(test_device());
    const Tensor b = randint(0, 5, {1, 1023}, {kInt64, kCpu}, &g).to(dt).to(test_device());
    const Tensor bt = b.to(kCpu).expand({7, 1023}).contiguous().to(test_device()).t().contiguous().t();
    for (const auto& [bname, bv] : std::vector<std::pair<const char*, Tensor>>{{"broadcast", b}, {"transposed", bt}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + bname;
      for (const auto& [name, op] : compare) expect_matches_cpu(op(a, bv), op(a.to(kCpu), bv.to(kCpu)), 0, 0, name + (" " + what));
      if (dt == kBool) continue;
      for (const auto& [name, op] : arith)
        expect_matches_cpu(op(a, bv), op(a.to(kCpu), bv.to(kCpu)), integral ? 0 : ulps(dt, 1), 0, name + (" " + what));
      if (!integral) {
        expect_matches_cpu(div(a, add(bv, Scalar(1))), div(a.to(kCpu), add(bv.to(kCpu), Scalar(1))), ulps(dt, 1), 0,
                           "div " + what);
        expect_matches_cpu(pow(a, bv), pow(a.to(kCpu), bv.to(kCpu)), ulps(dt), 0, "pow " + what);
      }
    }
  }
}

TEST(DeviceOps, NaNPropagatesThroughMaxMinClampAndReductions) {
  EMBER_DEVICE_ONLY();
  const double nan = std::nan("");
  Tensor x = tensor({1, nan, 3, -2, 5, 0}, {2, 3});
  Tensor y = tensor({nan, 1, 4, 9, -1, 0}, {2, 3});
  for (const Tensor& got : {maximum(x, y), minimum(x, y), clamp(x, 0.0, 1.0), relu(x)}) EXPECT_TRUE(std::isnan(values(got)[1]));
  EXPECT_TRUE(std::isnan(values(maximum(x, y))[0]));
  EXPECT_TRUE(std::isnan(values(amax(x, {1}))[0]));
  EXPECT_EQ(values(amax(x, {1}))[1], 5);
  auto [v, i] = max(x, 1);
  EXPECT_TRUE(std::isnan(values(v)[0]));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values(eq(x, x)), (std::vector<double>{1, 0, 1, 1, 1, 1}));
}

TEST(DeviceOps, WhereOnBroadcastAndStridedOperands) {
  EMBER_DEVICE_ONLY();
  for (DType dt : {kFloat32, kFloat16, kInt64, kBool}) {
    const Tensor cond = gt(random_on_device({1, 4097}, kFloat32, 5), Scalar(0));
    const Tensor a = random_on_device({3, 4097}, kFloat64, 6).to(dt);
    const Tensor b = random_on_device({3, 1}, kFloat64, 7).to(dt);
    for (const auto& [layout, av] : views(a))
      expect_matches_cpu(where(cond, av, b), where(cond.to(kCpu), av.to(kCpu), b.to(kCpu)), 0, 0,
                         std::string(dtype_name(dt)) + " " + layout);
  }
}

TEST(DeviceOps, ArangeAndLinspaceMatchTheCpu) {
  EMBER_DEVICE_ONLY();
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt32, kInt64})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4097)}) {
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      expect_matches_cpu(arange(0, double(n), 1, {dt, test_device()}), arange(0, double(n), 1, {dt, kCpu}), 0, 0,
                         "arange " + what);
      expect_matches_cpu(linspace(-2, 3, n, {dt, test_device()}), linspace(-2, 3, n, {dt, kCpu}), 0, 0,
                         "linspace " + what);
    }
}

TEST(DeviceOps, SeededDrawsEqualTheCpus) {
  EMBER_DEVICE_ONLY();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(4097)}) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      Generator gd(11), gc(11);
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      expect_matches_cpu(rand({n}, {dt, test_device()}, &gd), rand({n}, {dt, kCpu}, &gc), 0, 0, "rand " + what);
      // Box-Muller through the device's log/sin/cos: a few ulp of the compute type.
      expect_matches_cpu(randn({n}, {dt, test_device()}, &gd), randn({n}, {dt, kCpu}, &gc), ulps(dt, 16), 1e-6,
                         "randn " + what);
      EXPECT_EQ(gd.offset(), gc.offset());
    }
    for (DType dt : {kUInt8, kInt32, kInt64, kFloat32}) {
      for (int64_t high : {int64_t(10), int64_t(1) << 40}) {
        if (dt != kInt64 && high > 1000) continue;
        Generator gd(12), gc(12);
        expect_matches_cpu(randint(-3 * (dt != kUInt8), high, {n}, {dt, test_device()}, &gd),
                           randint(-3 * (dt != kUInt8), high, {n}, {dt, kCpu}, &gc), 0, 0,
                           "randint " + std::string(dtype_name(dt)) + " high=" + std::to_string(high));
      }
    }
  }
}

// sum |x| over the same groups as sum(x, dims): the float32 error bound's scale.
std::vector<double> abs_sums(const Tensor& x, const std::vector<int64_t>& dims) {
  return values(sum(abs(x.to(kCpu).to(kFloat64)), dims));
}

TEST(DeviceOps, ReductionsOverStridedViewsAndAnyDims) {
  EMBER_DEVICE_ONLY();
  const std::vector<std::vector<int64_t>> masks = {{0}, {1}, {2}, {0, 2}, {0, 1, 2}, {1, 2}};
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kUInt8, kInt32, kInt64, kBool}) {
    Tensor x = random_on_device({6, 7, 33}, kFloat64, 21, dt == kUInt8 ? 0 : -50, 50).to(dt);
    const std::vector<std::pair<const char*, Tensor>> xs = {
        {"contiguous", x}, {"permuted", x.permute({2, 0, 1})}, {"narrowed", x.narrow(2, 1, 31)},
        {"broadcast", x.narrow(0, 0, 1).expand({6, 7, 33})}};
    for (const auto& [layout, v] : xs)
      for (const auto& dims : masks) {
        const std::string what = std::string(dtype_name(dt)) + " " + layout + " dims " + shape_str(Shape(dims));
        const Tensor ref = sum(v.to(kCpu).to(is_floating(dt) ? kFloat64 : kInt64), dims);
        if (is_floating(dt)) {
          // A float sum of n terms, each rounding bounded by eps * sum |x| (n <= 1386 here).
          const double n = double(v.numel()) / double(ref.numel()), eps = ulps(dt, 1);
          std::vector<double> tol = abs_sums(v, dims);
          for (double& t : tol) t *= n * eps;
          EXPECT_TRUE(all_close_tol(sum(v, dims), values(ref), ref.shape(), tol)) << "sum " << what;
        } else {
          expect_matches_cpu(sum(v, dims), ref, 0, 0, "sum " + what);
        }
        expect_matches_cpu(amax(v, dims), amax(v.to(kCpu), dims), 0, 0, "amax " + what);
        expect_matches_cpu(amin(v, dims), amin(v.to(kCpu), dims), 0, 0, "amin " + what);
      }
    for (int64_t d : {0, 1, 2}) {
      auto [vd, id] = max(x.permute({1, 2, 0}), d);
      auto [vc, ic] = max(x.to(kCpu).permute({1, 2, 0}), d);
      expect_matches_cpu(vd, vc, 0, 0, "max values " + std::string(dtype_name(dt)));
      expect_matches_cpu(id, ic, 0, 0, "max indices " + std::string(dtype_name(dt)));
      auto [wd, jd] = min(x, d);
      auto [wc, jc] = min(x.to(kCpu), d);
      expect_matches_cpu(wd, wc, 0, 0, "min values " + std::string(dtype_name(dt)));
      expect_matches_cpu(jd, jc, 0, 0, "min indices " + std::string(dtype_name(dt)));
    }
  }
}

TEST(DeviceOps, ReductionsOfAwkwardAndEmptySizes) {
  EMBER_DEVICE_ONLY();
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1023), int64_t(4097), int64_t(100003)}) {
    const Tensor x = random_on_device({n}, kFloat32, 31, 0.5, 1.5);
    const std::vector<double> v = values(x);
    double want = 0, abs_sum = 0;
    for (double e : v) want += e, abs_sum += std::fabs(e);
    EXPECT_CLOSE(sum(x), std::vector<double>{want}, Shape{}, 0, double(n) * 0x1p-23 * abs_sum + 1e-30);
    EXPECT_CLOSE(sum(x.view({1, n}), {0}), v, (Shape{n}), 0, 0);
    if (n > 0) EXPECT_EQ(values(amax(x))[0], *std::max_element(v.begin(), v.end()));
  }
  EXPECT_EQ(sum(zeros({0, 3}, kInt32), {0}).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
}

TEST(DeviceOps, SoftmaxOverEveryDim) {
  EMBER_DEVICE_ONLY();
  for (DType dt : {kFloat32, kFloat64, kBFloat16})
    for (const Shape& s : {Shape{3, 7, 5}, Shape{2, 1023}, Shape{1, 4097}, Shape{4, 1}})
      for (int64_t d = 0; d < int64_t(s.size()); ++d) {
        const Tensor x = random_on_device(s, dt, 41, -10, 10);
        const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " dim " + std::to_string(d);
        // A few ulp for exp, plus the normalizer: a sum of n positive terms, which the CPU
        // adds in order (relative error up to n eps) and the device in a tree (log2(n) eps).
        // log_softmax subtracts its log: the same bound, absolute.
        const double sum_eps = double(s[d]) * (dt == kFloat64 ? 0x1p-53 : 0x1p-24), tol = ulps(dt, 8) + sum_eps;
        expect_matches_cpu(softmax(x, d), softmax(x.to(kCpu), d), tol, 1e-300, "softmax " + what);
        expect_matches_cpu(log_softmax(x, d), log_softmax(x.to(kCpu), d), ulps(dt, 8), tol, "log_softmax " + what);
      }
}

TEST(DeviceOps, IndexOpsMatchTheCpuBitForBit) {
  EMBER_DEVICE_ONLY();
  for (DType dt : {kFloat32, kBFloat16, kInt64, kUInt8, kBool}) {
    const Tensor x = random_on_device({5, 7, 9}, kFloat64, 51, 0, 5).to(dt);
    const Tensor idx = tensor({4, 0, 4, 2, 1, 3, 3}, kInt64);
    for (int64_t d : {0, 1, 2})
      expect_matches_cpu(index_select(x, d, idx), index_select(x.to(kCpu), d, idx.to(kCpu)), 0, 0,
                         "index_select " + std::string(dtype_name(dt)) + " dim " + std::to_string(d));
    const Tensor gi = randint(0, 5, {5, 3, 9}, kInt64);
    expect_matches_cpu(gather(x.transpose(0, 2).transpose(0, 2), 1, gi), gather(x.to(kCpu), 1, gi.to(kCpu)), 0, 0,
                       "gather " + std::string(dtype_name(dt)));
  }
  // scatter_add adds each element's terms in the CPU's order: equal bits, even in float32.
  for (DType dt : {kFloat32, kFloat16, kInt32}) {
    const Tensor self = random_on_device({4, 1023}, kFloat64, 61).to(dt);
    const Tensor src = random_on_device({1023, 9}, kFloat64, 62).to(dt).t();  // transposed: strided
    const Tensor index = randint(0, 4, {9, 1023}, kInt64);
    expect_matches_cpu(scatter_add(self, 0, index, src), scatter_add(self.to(kCpu), 0, index.to(kCpu), src.to(kCpu)), 0, 0,
                       "scatter_add " + std::string(dtype_name(dt)));
  }
}

TEST(DeviceOps, BadIndicesAreRaisedAtTheNextSynchronization) {
  EMBER_DEVICE_ONLY();
  const Tensor x = zeros({3, 5});
  EXPECT_EMBER_ERROR(index_select(x, 1, tensor({0, 5}, kInt64)).to(kCpu), "index_select", "5", "size 5");
  EXPECT_EMBER_ERROR(gather(x, 0, tensor({-1}, {1, 1}, kInt64)).to(kCpu), "gather", "-1", "size 3");
  EXPECT_EMBER_ERROR(scatter_add(x, 0, tensor({3}, {1, 1}, kInt64), ones({1, 1})).to(kCpu), "scatter_add", "3");
  // Raised once: the next read is clean, and the bad index was never followed.
  EXPECT_EQ(values(index_select(x, 1, tensor({4}, kInt64))), (std::vector<double>{0, 0, 0}));
  Tensor y = scatter_add(x, 0, tensor({7}, {1, 1}, kInt64), ones({1, 1}));
  EXPECT_EMBER_ERROR(synchronize(test_device()), "scatter_add", "7");
  EXPECT_EQ(values(y), std::vector<double>(15, 0.0));
}

TEST(DeviceOps, HostReadsWaitForTheStream) {
  EMBER_DEVICE_ONLY();
  // A long chain queued on the stream, read at once: to_vector must wait for all of it.
  Tensor x = ones({1 << 20});
  for (int i = 0; i < 8; ++i) x = add(x, x);
  const std::vector<float> v = x.to_vector<float>();
  EXPECT_EQ(v.front(), 256.0f);
  EXPECT_EQ(v.back(), 256.0f);
  EXPECT_EQ(sum(x).item<double>(), 256.0 * (1 << 20));
}

}  // namespace
}  // namespace ember::test
