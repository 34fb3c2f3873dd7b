// What the kernel tests in tests/cuda share. Each test source is built twice: with the
// host compiler against the CUDA emulator (binary ember_tests_cuda_emu, label emu), and
// with nvcc for a real GPU (ember_tests_cuda_gpu, label gpu; its tests skip without one).
// DeviceArray is host memory in the first build and cudaMalloc'd memory in the second.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda::test {

inline bool have_device() {
#if defined(__CUDACC__)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
#else
  return true;  // the emulator
#endif
}

// Skips the test (with the reason) when there is no device to run kernels on.
#define EMBER_NEED_DEVICE()                                                             \
  do {                                                                                  \
    if (!::ember::kernels::cuda::test::have_device()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Waits for the device and turns an asynchronous kernel fault into a test failure.
inline void synchronize() {
#if defined(__CUDACC__)
  const cudaError_t err = cudaDeviceSynchronize();
  EMBER_CHECK(err == cudaSuccess, "kernel failed: ", cudaGetErrorString(err));
#endif
}

// n elements of device memory, every byte 0xFF until written (NaN for floating types,
// -1 for signed integers), so an element a kernel forgets to write fails the comparison.
// `offset` elements of padding come before data(): offset 1 gives a view that is not
// 16-byte aligned, as a tensor view starting at an odd element is.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, size_t offset = 0) : n_(n), offset_(offset) {
    const size_t bytes = (n + offset) * sizeof(T);
#if defined(__CUDACC__)
    EMBER_CHECK(cudaMalloc(&base_, bytes > 0 ? bytes : 1) == cudaSuccess, "cudaMalloc of ", bytes, " bytes failed");
    cudaMemset(base_, 0xFF, bytes);
#else
    base_ = static_cast<T*>(::operator new(bytes > 0 ? bytes : 1, std::align_val_t(256)));  // cudaMalloc aligns to 256
    std::memset(static_cast<void*>(base_), 0xFF, bytes);
#endif
  }
  explicit DeviceArray(const std::vector<T>& values, size_t offset = 0) : DeviceArray(values.size(), offset) {
    upload(values);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
#if defined(__CUDACC__)
    cudaFree(base_);
#else
    ::operator delete(static_cast<void*>(base_), std::align_val_t(256));
#endif
  }

  T* data() const { return base_ + offset_; }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& values) {
    EMBER_CHECK(values.size() == n_, "DeviceArray::upload: ", values.size(), " values for ", n_, " elements");
    std::unique_ptr<T[]> staged(new T[n_]);  // std::vector<bool> has no data()
    std::copy(values.begin(), values.end(), staged.get());
#if defined(__CUDACC__)
    cudaMemcpy(data(), staged.get(), n_ * sizeof(T), cudaMemcpyHostToDevice);
#else
    if (n_ > 0) std::memcpy(static_cast<void*>(data()), staged.get(), n_ * sizeof(T));
#endif
  }
  std::vector<T> host() const {
    synchronize();
    std::unique_ptr<T[]> staged(new T[n_]);
#if defined(__CUDACC__)
    cudaMemcpy(staged.get(), data(), n_ * sizeof(T), cudaMemcpyDeviceToHost);
#else
    if (n_ > 0) std::memcpy(static_cast<void*>(staged.get()), data(), n_ * sizeof(T));
#endif
    return std::vector<T>(staged.get(), staged.get() + n_);
  }

 private:
  T* base_ = nullptr;
  size_t n_, offset_;
};

// Sizes that catch off-by-one and tail bugs: empty, single, around a warp, around a
// block, and not divisible by any vector width.
inline const std::vector<int64_t> kAwkwardSizes = {0, 1, 31, 32, 33, 1023, 4097};

// Uniform values in [lo, hi) as doubles, reproducible from the seed.
inline std::vector<double> random_doubles(size_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Conversions between doubles and the element types kernels take (float, double,
// __half, __nv_bfloat16, integers).
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>) return __double2half(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __double2bfloat16(v);
  else return static_cast<T>(v);
}
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, __half>) return double(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(v));
  else return static_cast<double>(v);
}
template <class T>
std::vector<T> from_doubles(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_double<T>(v[i]);
  return out;
}

// v rounded to T and back: what a kernel receives of values given as doubles.
template <class T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_double(from_double<T>(v[i]));
  return out;
}

// The largest finite |v[i]| (0 when there is none).
inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// n values of T with random bits (for kernels that move bytes without reading them).
template <class T>
std::vector<T> random_bits(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    const uint64_t r = rng();
    std::memcpy(static_cast<void*>(&x), &r, sizeof(T));
  }
  return v;
}

// Each got[i] equal to want[i] or within atol + rtol |want[i]| (so infinities match
// themselves; NaN matches only where want is NaN);
// reports the first mismatches with their indices.
template <class T>
::testing::AssertionResult all_close(const std::vector<T>& got, const std::vector<double>& want, double rtol,
                                     double atol = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_double(got[i]), w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : (g == w || std::abs(g - w) <= atol + rtol * std::abs(w));
    if (!ok && bad++ < 5) first += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + ", want " + std::to_string(w);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (rtol " << rtol
                                       << ", atol " << atol << "):" << first;
}

// gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability, 3.1): a value computed with
// at most n roundings of unit roundoff u on any path from its operands (in any order,
// with or without FMA) is within gamma_n of the same computation on |operands|.
inline double gamma_n(double n, double u) { return n <= 0 ? 0.0 : n * u / (1 - n * u); }

// exp and log in the compute type: CUDA's expf / exp are within 2 ulp, logf / log within
// 1 ulp (CUDA Programming Guide, mathematical functions), glibc's (the emulator's) within
// 1; an ulp is at most 2u relative, so exp costs up to 4u, log 2u.
inline constexpr double kExpRoundings = 4, kLogRoundings = 2;

// Absolute floor: below the smallest normal number relative precision fades (float16's
// subnormal step is 2^-24 = 6e-8, float's and bfloat16's smallest normal 1.2e-38).
template <class T> constexpr double kAtol = 1.2e-38;
template <> constexpr double kAtol<__half> = 6e-8;
template <> constexpr double kAtol<double> = 0;

// Unit roundoff of the data type T (half an ulp at 1): 2^-24 float, 2^-53 double, 2^-8
// bfloat16, 2^-11 half.
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, float>) return std::ldexp(1.0, -24);
  else if constexpr (std::is_same_v<T, double>) return std::ldexp(1.0, -53);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return std::ldexp(1.0, -8);
  else return std::ldexp(1.0, -11);
}
// Unit roundoff of T's compute type: double for double, float otherwise.
template <class T>
double compute_roundoff() {
  return std::is_same_v<T, double> ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}
// The cost of storing a compute-type result as T: none when T is the compute type.
template <class T>
double store_roundoff() {
  return std::is_same_v<T, float> || std::is_same_v<T, double> ? 0.0 : unit_roundoff<T>();
}

// Each got[i] within tol[i] of want[i] (equal values, infinities included, always pass;
// NaN matches only where want is NaN); reports the first mismatches with their bounds.
template <class T>
::testing::AssertionResult all_within(const std::vector<T>& got, const std::vector<double>& want,
                                      const std::vector<double>& tol) {
  if (got.size() != want.size() || tol.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << ", " << want.size() << ", " << tol.size();
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_double(got[i]), w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : (g == w || std::abs(g - w) <= tol[i]);
    if (!ok && bad++ < 5)
      first += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + ", want " + std::to_string(w) + ", |diff| " +
               std::to_string(std::abs(g - w)) + " > " + std::to_string(tol[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ:" << first;
}

}  // namespace ember::kernels::cuda::test
