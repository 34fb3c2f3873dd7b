// The hand-written CSR kernels (kernels/cuda/csr.cuh) against a float64 reference on
// awkward sizes (batch rows around a warp, empty rows of A, empty batches), with every
// output poisoned (NaN) before the kernel writes it. Each output is a sum of at most
// n = row length (+ 1 for the bias) products, so it is within gamma_{n+1}(u) of the
// reference times the same sum over absolute values (Higham 3.1).
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/csr.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda::test {
namespace {

struct Csr {
  std::vector<int32_t> row_ptr, col_idx;
  std::vector<double> values;
};

// A random [rows, cols] pattern keeping each entry with probability `density`; every
// third row is empty.
Csr random_csr(int64_t rows, int64_t cols, double density, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> keep(0, 1), val(-2, 2);
  Csr a{{0}, {}, {}};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (r % 3 != 2 && keep(rng) < density) {
        a.col_idx.push_back(int32_t(c));
        a.values.push_back(val(rng));
      }
    a.row_ptr.push_back(int32_t(a.col_idx.size()));
  }
  return a;
}

template <class T>
void check_linear(int64_t M, int64_t K, int64_t N, double density, bool with_bias) {
  SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N) + " density " +
               std::to_string(density) + (with_bias ? " bias" : ""));
  const Csr a = random_csr(N, K, density, uint32_t(M * 7 + K * 3 + N));
  const auto v = rounded<T>(a.values), x = rounded<T>(random_doubles(size_t(M * K), uint32_t(K)));
  const auto b = rounded<T>(random_doubles(size_t(N), uint32_t(N + 1)));
  std::vector<double> want(size_t(M * N)), tol(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = with_bias ? b[n] : 0, abs_s = std::abs(s);
      for (int32_t j = a.row_ptr[n]; j < a.row_ptr[n + 1]; ++j) {
        s += v[j] * x[m * K + a.col_idx[j]];
        abs_s += std::abs(v[j] * x[m * K + a.col_idx[j]]);
      }
      want[m * N + n] = s;
      tol[m * N + n] = gamma_n(double(a.row_ptr[n + 1] - a.row_ptr[n] + 1), unit_roundoff<T>()) * abs_s + kAtol<T>;
    }
  DeviceArray<T> dx(from_doubles<T>(x)), dv(from_doubles<T>(v)), db(from_doubles<T>(b)), out(size_t(M * N));
  DeviceArray<int32_t> rp(a.row_ptr), ci(a.col_idx);
  csr_linear<T>(out.data(), dx.data(), rp.data(), ci.data(), dv.data(), with_bias ? db.data() : nullptr, M, K, N,
                nullptr);
  EXPECT_TRUE(all_within(out.host(), want, tol));
}

template <class T>
void check_sddmm(int64_t M, int64_t K, int64_t N, double density) {
  SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N) + " density " +
               std::to_string(density));
  const Csr a = random_csr(N, K, density, uint32_t(M * 5 + K + N * 11));
  const auto x = rounded<T>(random_doubles(size_t(M * K), uint32_t(K + 2)));
  const auto dy = rounded<T>(random_doubles(size_t(M * N), uint32_t(N + 3)));
  const size_t nnz = a.col_idx.size();
  std::vector<double> want(nnz), tol(nnz);
  for (int64_t n = 0; n < N; ++n)
    for (int32_t j = a.row_ptr[n]; j < a.row_ptr[n + 1]; ++j) {
      double s = 0, abs_s = 0;
      for (int64_t m = 0; m < M; ++m) {
        s += dy[m * N + n] * x[m * K + a.col_idx[j]];
        abs_s += std::abs(dy[m * N + n] * x[m * K + a.col_idx[j]]);
      }
      want[j] = s;
      tol[j] = gamma_n(double(M), unit_roundoff<T>()) * abs_s + kAtol<T>;
    }
  DeviceArray<T> dx(from_doubles<T>(x)), ddy(from_doubles<T>(dy)), out(nnz);
  DeviceArray<int32_t> rp(a.row_ptr), ci(a.col_idx);
  csr_sddmm<T>(out.data(), ddy.data(), dx.data(), rp.data(), ci.data(), M, K, N, int64_t(nnz), nullptr);
  EXPECT_TRUE(all_within(out.host(), want, tol));
}

TEST(CudaCsr, LinearMatchesFloat64) {
  EMBER_NEED_DEVICE();
  for (int64_t M : {1, 31, 33, 70})
    for (int64_t N : {1, 9, 33}) {
      check_linear<float>(M, 37, N, 0.3, true);
      check_linear<double>(M, 37, N, 0.3, false);
    }
  check_linear<float>(5, 1, 4, 1.0, true);       // K = 1
  check_linear<float>(3, 300, 40, 0.01, true);   // 99% sparse: most rows hold a bias only
  check_linear<float>(0, 8, 8, 0.5, true);       // an empty batch writes nothing
}

TEST(CudaCsr, SddmmMatchesFloat64) {
  EMBER_NEED_DEVICE();
  for (int64_t M : {0, 1, 31, 33, 70})
    for (int64_t N : {1, 9, 33}) {
      check_sddmm<float>(M, 37, N, 0.3);
      check_sddmm<double>(M, 37, N, 0.5);
    }
  check_sddmm<float>(4, 100, 3, 1.0);  // rows longer than a warp: lanes loop over entries
}

}  // namespace
}  // namespace ember::kernels::cuda::test
