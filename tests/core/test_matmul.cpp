// matmul against a float64 triple loop: every torch.matmul form (1-D@1-D -> 0-dim,
// 1-D@2-D, 2-D@1-D, 1-D@N-D, N-D@1-D, 2-D, batched, broadcast batch dims), transposed
// and strided operands, awkward sizes up to 300x257x131, float32/float64 and the 16-bit
// types, an empty inner dim, and the shape error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"

namespace ember::test {
namespace {

// The reference product and, per output element, S = sum_k |a_mk * b_kn|: the scale of
// the rounding error any summation order can make.
struct MatRef {
  Shape shape;
  std::vector<double> out, abs_sum;
  int64_t k = 0;
};
MatRef ref_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);  // [K] -> [1, K], the 1 removed again below
  if (b_vec) sb.push_back(1);           // [K] -> [K, 1]
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = broadcast_all({ba, bb});
  MatRef r;
  r.k = K;
  r.shape = batch;
  if (!a_vec) r.shape.push_back(M);
  if (!b_vec) r.shape.push_back(N);
  const std::vector<double> va = values(a), vb = values(b);
  const int64_t nbatch = shape_numel(batch);
  r.out.assign(nbatch * M * N, 0.0);
  r.abs_sum.assign(nbatch * M * N, 0.0);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    const Shape idx = unravel(bi, batch);
    const int64_t oa = broadcast_source(idx, ba) * M * K, ob = broadcast_source(idx, bb) * K * N;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, s_abs = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = va[oa + m * K + k] * vb[ob + k * N + n];
          s += p;
          s_abs += std::fabs(p);
        }
        r.out[(bi * M + m) * N + n] = s;
        r.abs_sum[(bi * M + m) * N + n] = s_abs;
      }
    }
  }
  return r;
}

// Note [matmul tolerance]: a dot product of length K summed in any order (sequential,
// blocked, pairwise, with or without FMA: AVX2 and AVX-512 kernels alike) has |error| <=
// gamma_K(u) S, u the unit roundoff, S = sum |a_k b_k| and gamma_K = K u / (1 - K u)
// (inputs are exact: the reference reads the rounded inputs). The float64 reference adds
// gamma_K(2^-53) S of its own. The 16-bit types accumulate in float32 and round the output
// once: u16 |c| more (2^-8 bf16, 2^-11 f16), on (1 + u16) times the float32 error, or
// half a subnormal (2^-25 f16) where the result underflows. An accumulator kept in 16
// bits would be off by about K u16 S, and fail.
std::vector<double> tolerance(DType d, int64_t k, const MatRef& r) {
  const bool half = d == kBFloat16 || d == kFloat16;
  const double K = double(std::max<int64_t>(k, 1)), u16 = half ? dtype_unit_roundoff(d) : 0;
  const double eta = half ? dtype_underflow(d) : 0;
  const double u = d == kFloat64 ? 0x1p-53 : 0x1p-24, g = (1 + u16) * gamma_n(K, u) + gamma_n(K, 0x1p-53);
  std::vector<double> tol(r.out.size());
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = u16 * std::fabs(r.out[i]) + eta + g * r.abs_sum[i] + 1e-300;
  return tol;
}

::testing::AssertionResult matmul_matches(const Tensor& a, const Tensor& b) {
  MatRef r = ref_matmul(a, b);
  Tensor c = matmul(a, b);
  if (c.dtype() != a.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtype_name(c.dtype()) << ", want " << dtype_name(a.dtype());
  }
  return all_close_tol(c, r.out, r.shape, tolerance(a.dtype(), r.k, r));
}

std::string trace(DType d, const Shape& a, Layout la, const Shape& b, Layout lb) {
  return std::string(dtype_name(d)) + " " + shape_str(a) + " " + layout_name(la) + " @ " + shape_str(b) + " " +
         layout_name(lb);
}

struct ShapePair {
  Shape a, b, out;
};
const ShapePair kForms[] = {
    {{7}, {7}, {}},                        // dot product: 0-dim
    {{5}, {5, 3}, {3}},                    // 1-D @ 2-D
    {{4, 5}, {5}, {4}},                    // 2-D @ 1-D
    {{5}, {3, 5, 2}, {3, 2}},              // 1-D @ 3-D
    {{3, 4, 5}, {5}, {3, 4}},              // 3-D @ 1-D
    {{3, 5}, {5, 4}, {3, 4}},              // 2-D
    {{1, 7}, {7, 1}, {1, 1}},              // size-1 outer dims
    {{3, 2, 5}, {3, 5, 4}, {3, 2, 4}},     // batched
    {{3, 2, 5}, {5, 4}, {3, 2, 4}},        // batch @ 2-D
    {{5, 4}, {3, 4, 2}, {3, 5, 2}},        // 2-D @ batch
    {{2, 1, 3, 5}, {3, 5, 4}, {2, 3, 3, 4}},     // broadcast batch dims
    {{2, 1, 3, 4}, {1, 5, 4, 2}, {2, 5, 3, 2}},  // broadcast both ways
    {{2, 3, 8, 6}, {6, 5}, {2, 3, 8, 5}},
};

TEST(Matmul, AllFormsMatchReference) {
  uint64_t seed = 1;
  for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (const ShapePair& p : kForms) {
      for (Layout la : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        for (Layout lb : {Layout::Contiguous, Layout::Transposed}) {
          SCOPED_TRACE(trace(d, p.a, la, p.b, lb));
          Tensor a = random_tensor(p.a, d, la, ++seed), b = random_tensor(p.b, d, lb, ++seed);
          EXPECT_EQ(matmul(a, b).shape(), p.out);
          EXPECT_TRUE(matmul_matches(a, b));
        }
      }
    }
  }
}

TEST(Matmul, AwkwardSizes) {
  struct Mkn {
    int64_t m, k, n;
  };
  uint64_t seed = 100;
  for (Mkn s : {Mkn{1, 1, 1}, Mkn{17, 17, 17}, Mkn{64, 64, 64}, Mkn{129, 129, 129}, Mkn{300, 257, 131},
                Mkn{1, 300, 1}, Mkn{33, 1, 65}}) {
    for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      if (!(d == kFloat32 || d == kFloat64) && s.m * s.k * s.n > 129 * 129 * 129) continue;
      for (Layout la : {Layout::Contiguous, Layout::Transposed}) {
        for (Layout lb : {Layout::Contiguous, Layout::Transposed}) {
          SCOPED_TRACE(trace(d, {s.m, s.k}, la, {s.k, s.n}, lb));
          Tensor a = random_tensor({s.m, s.k}, d, la, ++seed), b = random_tensor({s.k, s.n}, d, lb, ++seed);
          if (s.m > 1 && s.k > 1 && la == Layout::Transposed) {
            ASSERT_FALSE(a.is_contiguous());
          }
          EXPECT_TRUE(matmul_matches(a, b));
        }
      }
    }
  }
}

TEST(Matmul, TransposeViewsOfOneTensor) {
  // a.t() @ a and a @ a.t() read the same storage through both strides.
  Tensor a = random_tensor({37, 19}, kFloat32, Layout::Contiguous, 7);
  EXPECT_TRUE(matmul_matches(a.t(), a));
  EXPECT_TRUE(matmul_matches(a, a.t()));
  // A batch dim that is itself strided: every other matrix of a batch.
  Tensor batch = random_tensor({6, 4, 5}, kFloat64, Layout::Contiguous, 8).slice(0, 0, 6, 2);
  Tensor other = random_tensor({3, 5, 2}, kFloat64, Layout::Transposed, 9);
  EXPECT_TRUE(matmul_matches(batch, other));
  // An expanded (stride-0) batch dim.
  Tensor shared = random_tensor({1, 4, 5}, kFloat32, Layout::Contiguous, 10).expand({3, 4, 5});
  EXPECT_TRUE(matmul_matches(shared, random_tensor({3, 5, 6}, kFloat32, Layout::Contiguous, 11)));
}

TEST(Matmul, EmptyDims) {
  // K = 0: every output element is an empty sum, 0.
  Tensor c = matmul(zeros({3, 0}), zeros({0, 4}));
  EXPECT_CLOSE(c, std::vector<double>(12, 0.0), (Shape{3, 4}), 0, 0);
  EXPECT_CLOSE(matmul(zeros({0}), zeros({0})), std::vector<double>{0}, Shape{}, 0, 0);
  EXPECT_EQ(matmul(zeros({0, 5}), zeros({5, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(matmul(zeros({2, 0, 3, 5}), zeros({5, 4})).shape(), (Shape{2, 0, 3, 4}));
}

TEST(Matmul, ShapeErrors) {
  const std::string msg = error_of([] { (void)matmul(zeros({32, 784}), zeros({512, 256})); });
  EXPECT_NE(msg.find("matmul: cannot multiply [32, 784] by [512, 256] (784 != 512)"), std::string::npos) << msg;
  EXPECT_EMBER_ERROR(matmul(zeros({3}), zeros({4})), "matmul", "[3]", "[4]");
  EXPECT_EMBER_ERROR(matmul(zeros({2, 5}), zeros({4})), "matmul", "[2, 5]", "[4]");
  EXPECT_EMBER_ERROR(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), "matmul");  // batch 2 vs 3
  EXPECT_EMBER_ERROR(matmul(scalar_tensor(2.0), zeros({3})), "matmul");
  EXPECT_EMBER_ERROR(matmul(zeros({3}), scalar_tensor(2.0)), "matmul");
}

}  // namespace
}  // namespace ember::test
