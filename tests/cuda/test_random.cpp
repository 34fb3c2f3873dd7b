// The Philox draws (kernels/cuda/random.cuh) against the CPU backend's: uniform values
// and dropout masks bit for bit for the same seed and offset, normals to a few ulp.
#include <cmath>

#include "core/dispatch.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/cuda/random.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace ember::kernels::cuda::test;

Tensor cpu_draw(OpStub<RandomFn>& stub, int64_t n, DType dtype, uint64_t seed, uint64_t offset, double a, double b) {
  Tensor t = ember::empty({n}, dtype);
  stub(Device::cpu(), t, PhiloxState{seed, offset}, a, b);
  return t;
}
std::vector<double> as_doubles(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

TEST(CudaRandom, UniformIsTheCpuDrawBitForBit) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes) {
    for (uint64_t offset : {uint64_t(0), uint64_t(5), (uint64_t(1) << 33) + 3}) {
      DeviceArray<float> f(n, 1);
      uniform(f.data(), n, 1234, offset, -1.0, 3.0);
      ASSERT_TRUE(all_close(f.host(), as_doubles(cpu_draw(uniform_stub, n, kFloat32, 1234, offset, -1.0, 3.0)), 0.0))
          << "float, n " << n << ", offset " << offset;
      DeviceArray<double> d(n);
      uniform(d.data(), n, 99, offset, 0.0, 1.0);
      ASSERT_TRUE(all_close(d.host(), as_doubles(cpu_draw(uniform_stub, n, kFloat64, 99, offset, 0.0, 1.0)), 0.0))
          << "double, n " << n;
      DeviceArray<__nv_bfloat16> h(n);
      uniform(h.data(), n, 7, offset, 0.0, 1.0);
      ASSERT_TRUE(all_close(h.host(), as_doubles(cpu_draw(uniform_stub, n, kBFloat16, 7, offset, 0.0, 1.0)), 0.0))
          << "bf16, n " << n;
    }
  }
}

TEST(CudaRandom, NormalMatchesTheCpuDraw) {
  EMBER_NEED_DEVICE();
  // Same uniforms; sqrt/log/sin/cos of the GPU are within 2 ulp of glibc's, so 1e-5
  // relative (plus 1e-6 absolute near the zeros of sin and cos) bounds the difference.
  for (int64_t n : kAwkwardSizes) {
    DeviceArray<float> f(n);
    normal(f.data(), n, 42, 17, 0.5, 2.0);
    ASSERT_TRUE(all_close(f.host(), as_doubles(cpu_draw(normal_stub, n, kFloat32, 42, 17, 0.5, 2.0)), 1e-5, 1e-6))
        << n;
    DeviceArray<double> d(n);
    normal(d.data(), n, 42, 17, 0.0, 1.0);
    ASSERT_TRUE(all_close(d.host(), as_doubles(cpu_draw(normal_stub, n, kFloat64, 42, 17, 0.0, 1.0)), 1e-13, 1e-14))
        << n;
  }
  // And it is a normal: mean and variance of 2^16 draws within 4 standard errors.
  const int64_t n = 1 << 16;
  DeviceArray<float> f(n);
  normal(f.data(), n, 5, 0, 0.0, 1.0);
  double sum = 0, sq = 0;
  for (float v : f.host()) {
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 4.0 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1.0, 4.0 * std::sqrt(2.0 / n));
}

TEST(CudaRandom, DropoutIsTheCpuFormulaBitForBit) {
  EMBER_NEED_DEVICE();
  // What the CPU's dropout computed as composed ops: keep = rand(x.shape) >= p, then
  // x * (keep * (1 / (1 - p))), all in x's dtype, drawn at the generator's offset.
  for (int64_t n : kAwkwardSizes) {
    for (double p : {0.0, 0.1, 0.5}) {
      const auto xv = random_doubles(n, uint32_t(n + 3));
      DeviceArray<float> x(from_doubles<float>(xv), 1), out(n);
      DeviceArray<uint8_t> keep(n);
      dropout(x.data(), out.data(), keep.data(), n, p, 77, 3);
      const Tensor u = cpu_draw(uniform_stub, n, kFloat32, 77, 3, 0.0, 1.0);
      const Tensor k = ember::ge(u, Scalar(p)).to(kFloat32);
      const Tensor want = ember::mul(ember::tensor(xv, {n}, kFloat32), ember::mul(k, Scalar(1.0 / (1.0 - p))));
      ASSERT_TRUE(all_close(out.host(), as_doubles(want), 0.0)) << "n " << n << ", p " << p;
      ASSERT_TRUE(all_close(keep.host(), as_doubles(k), 0.0)) << "n " << n << ", p " << p;
      // The backward multiplies by the same rounded scale: the gradient of x * (keep * s).
      DeviceArray<float> grad_in(n);
      dropout_backward(x.data(), keep.data(), grad_in.data(), n, p);
      ASSERT_TRUE(all_close(grad_in.host(), as_doubles(want), 0.0)) << "backward, n " << n << ", p " << p;
    }
  }
  DeviceArray<float> x(4), out(4);
  EXPECT_THROW(dropout(x.data(), out.data(), static_cast<uint8_t*>(nullptr), 4, 1.0, 1, 0), Error);
}

// Each dropout thread takes two Philox blocks a turn: sizes past two turns of the whole
// grid (the emulator's 4 SMs: 32 blocks of 256 threads, 2 x 8192 blocks a turn), aligned
// (16-byte loads and stores) and not, float and double (2 values a block), with a tail.
TEST(CudaRandom, DropoutOverSeveralGridTurns) {
  EMBER_NEED_DEVICE();
  const int64_t n = 5 * 8192 * 4 + 7;
  const double p = 0.3;
  const auto xv = random_doubles(n, 91);
  auto check = [&](auto tag, DType dtype, size_t offset) {
    using T = decltype(tag);
    DeviceArray<T> x(from_doubles<T>(xv), offset), out(n, offset);
    DeviceArray<uint8_t> keep(n);
    dropout(x.data(), out.data(), keep.data(), n, p, 5, 11);
    const Tensor k = ember::ge(cpu_draw(uniform_stub, n, dtype, 5, 11, 0.0, 1.0), Scalar(p)).to(dtype);
    const Tensor want = ember::mul(ember::tensor(xv, {n}, dtype), ember::mul(k, Scalar(1.0 / (1.0 - p))));
    EXPECT_TRUE(all_close(out.host(), as_doubles(want), 0.0)) << dtype_name(dtype) << ", offset " << offset;
    EXPECT_TRUE(all_close(keep.host(), as_doubles(k), 0.0)) << dtype_name(dtype) << ", offset " << offset;
  };
  check(float{}, kFloat32, 0);
  check(float{}, kFloat32, 1);
  check(double{}, kFloat64, 0);
}

}  // namespace
}  // namespace ember::kernels::cuda
