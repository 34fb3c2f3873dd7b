// The fused cross entropy, embedding backward and dropout (core/ops_fused.cpp) on the
// test's device against float64 loop references: awkward sizes (1, 3 and 1000 classes,
// rows that are no multiple of a warp, ignored rows, an empty batch), their gradients,
// bad indices as ember::Error, and, on the CPU, against the composed ops they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fused_util.h"
#include "reference.h"

namespace ember::test {
namespace {

constexpr int64_t kIgnore = -100;

struct CeRef {
  std::vector<double> loss;   // per row, or one value when reduced
  std::vector<double> dx;     // [n, c] for the given upstream gradient
};

// PyTorch's cross entropy in float64, with class weights w (empty: all 1) and label
// smoothing eps: loss_i = (1 - eps) w_t (lse_i - x_it) + eps / c sum_j w_j (lse_i - x_ij);
// dx_ij = (p_ij ((1 - eps) w_t + eps W / c) - (1 - eps) w_t [j = t_i] - eps w_j / c) g_i;
// the mean divides by the sum of the counted rows' w_t.
CeRef ref_cross_entropy(const Tensor& x, const Tensor& t, Reduction r, const std::vector<double>& g,
                        const std::vector<double>& w = {}, double eps = 0) {
  const int64_t n = x.size(0), c = x.size(1);
  const std::vector<double> v = values(x), tv = values(t);
  auto weight = [&](int64_t j) { return w.empty() ? 1.0 : w[j]; };
  double W = 0;
  for (int64_t j = 0; j < c; ++j) W += weight(j);
  CeRef out;
  std::vector<double> rows(n, 0.0), lse(n, 0.0);
  double sum = 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(tv[i]);
    if (ti == kIgnore) continue;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, v[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(v[i * c + j] - m);
    lse[i] = m + std::log(s);
    double smooth = 0;
    for (int64_t j = 0; j < c; ++j) smooth += weight(j) * (lse[i] - v[i * c + j]);
    rows[i] = (1 - eps) * weight(ti) * (lse[i] - v[i * c + ti]) + eps / c * smooth;
    sum += rows[i];
    total += weight(ti);
  }
  out.loss = r == Reduction::None ? rows : std::vector<double>{r == Reduction::Sum ? sum : sum / total};
  out.dx.assign(static_cast<size_t>(n * c), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(tv[i]);
    if (ti == kIgnore) continue;
    const double gi = r == Reduction::None ? g[i] : (r == Reduction::Sum ? g[0] : g[0] / total);
    const double a = (1 - eps) * weight(ti) + eps * W / c;
    for (int64_t j = 0; j < c; ++j)
      out.dx[i * c + j] =
          (std::exp(v[i * c + j] - lse[i]) * a - (j == ti) * (1 - eps) * weight(ti) - eps * weight(j) / c) * gi;
  }
  return out;
}

// Targets in [0, c) with every fifth row ignored.
Tensor targets_with_ignored(int64_t n, int64_t c, uint64_t seed) {
  std::vector<double> t = values(randint_on(0, c, {n}, seed));
  for (int64_t i = 0; i < n; i += 5) t[i] = static_cast<double>(kIgnore);
  return tensor(t, {n}, {kInt64, Device::cpu()}).to(test_device());
}

class CrossEntropySizes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType>> {};

TEST_P(CrossEntropySizes, MatchesFloat64ReferenceForwardAndBackward) {
  const auto [n, c, dtype] = GetParam();
  const double u = dtype_unit_roundoff(dtype);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    SCOPED_TRACE(testing::Message() << "n=" << n << " c=" << c << " reduction=" << static_cast<int>(r));
    const Tensor x = randn_on({n, c}, dtype, 7 + n + c, 3.0).requires_grad_();
    const Tensor t = targets_with_ignored(n, c, 11 + n);
    const Tensor y = cross_entropy(x, t, kIgnore, r);
    const Tensor g = r == Reduction::None ? randn_on({n}, dtype, 5) : scalar_tensor(1.7, {dtype, test_device()});
    const CeRef want = ref_cross_entropy(x.detach(), t, r, values(g));
    // A row's log-sum-exp of c terms is within (c + 8) u of |lse| + |x_t| (recursive
    // summation's bound), and its gradient within as much relative to |g|; a mean adds n u.
    const double tol = (c + 8) * u * 20, rows_tol = tol + n * u * 4;
    EXPECT_CLOSE(y, want.loss, r == Reduction::None ? Shape{n} : Shape{}, rows_tol, rows_tol);
    y.backward(g);
    EXPECT_CLOSE(x.grad(), want.dx, (Shape{n, c}), tol, tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Fused, CrossEntropySizes,
                         ::testing::Values(std::tuple{int64_t{5}, int64_t{1}, kFloat32},
                                           std::tuple{int64_t{37}, int64_t{3}, kFloat32},
                                           std::tuple{int64_t{45}, int64_t{1000}, kFloat32},
                                           std::tuple{int64_t{9}, int64_t{3000}, kFloat32},
                                           std::tuple{int64_t{33}, int64_t{10}, kFloat64}));

TEST(FusedCrossEntropy, SpatialTargetsMatchTheRowForm) {
  const Tensor x = randn_on({2, 4, 3}, kFloat32, 3);
  const Tensor t = randint_on(0, 4, {2, 3}, 4);
  const Tensor y = cross_entropy(x, t, kIgnore, Reduction::None);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const std::vector<double> xv = values(x), tv = values(t), got = values(y);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t k = 0; k < 3; ++k) {
      double m = -1e300, s = 0;
      for (int64_t j = 0; j < 4; ++j) m = std::max(m, xv[(b * 4 + j) * 3 + k]);
      for (int64_t j = 0; j < 4; ++j) s += std::exp(xv[(b * 4 + j) * 3 + k] - m);
      const double want = m + std::log(s) - xv[(b * 4 + static_cast<int64_t>(tv[b * 3 + k])) * 3 + k];
      EXPECT_NEAR(got[b * 3 + k], want, 1e-5) << "b=" << b << " k=" << k;
    }
}

TEST(FusedCrossEntropy, EmptyBatchAndAllIgnored) {
  const Tensor empty_x = randn_on({0, 4}, kFloat32, 1).requires_grad_();
  const Tensor empty_t = randint_on(0, 4, {0}, 2);
  EXPECT_EQ(cross_entropy(empty_x, empty_t, kIgnore, Reduction::Sum).item<double>(), 0.0);
  EXPECT_TRUE(std::isnan(cross_entropy(empty_x, empty_t, kIgnore, Reduction::Mean).item<double>()));
  EXPECT_EQ(cross_entropy(empty_x, empty_t, kIgnore, Reduction::None).shape(), (Shape{0}));
  const Tensor x = randn_on({3, 4}, kFloat32, 1);
  const Tensor all_ignored = tensor({-100, -100, -100}, {kInt64, Device::cpu()}).to(test_device());
  EXPECT_TRUE(std::isnan(cross_entropy(x, all_ignored, kIgnore, Reduction::Mean).item<double>()));
}

TEST(FusedCrossEntropy, TargetOutOfRangeIsAnError) {
  const Tensor x = randn_on({3, 4}, kFloat32, 1);
  const Tensor bad = tensor({0, 4, 1}, {kInt64, Device::cpu()}).to(test_device());
  // On a GPU the error comes at the next synchronization (.item()), not at the call.
  EXPECT_EMBER_ERROR(cross_entropy(x, bad).item<double>(), "cross_entropy", "target 4", "position 1",
                     "out of range for 4 classes");
  const Tensor negative = tensor({0, -1, 1}, {kInt64, Device::cpu()}).to(test_device());
  EXPECT_EMBER_ERROR(cross_entropy(x, negative).item<double>(), "target -1", "out of range");
  // ignore_index is not out of range
  const Tensor ignored = tensor({0, -100, 1}, {kInt64, Device::cpu()}).to(test_device());
  EXPECT_TRUE(std::isfinite(cross_entropy(x, ignored).item<double>()));
  EXPECT_EMBER_ERROR(cross_entropy(x, randint_on(0, 4, {2}, 1)), "cross_entropy", "does not match");
}

// Class weights and label smoothing, alone and together (eps 1: only the smoothing term).
TEST(FusedCrossEntropy, ClassWeightsAndLabelSmoothingMatchFloat64Reference) {
  for (DType dtype : {kFloat32, kFloat64})
    for (int64_t c : {3, 1000, 3000}) {  // 3000: a block per row on cuda
      const int64_t n = 33;
      const double u = dtype_unit_roundoff(dtype);
      const Tensor weight = add(abs(randn_on({c}, dtype, 21 + c)), Scalar(0.25));
      for (bool weighted : {false, true})
        for (double eps : {0.0, 0.1, 1.0})
          for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
            SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " c=" << c << " weighted=" << weighted
                                            << " eps=" << eps << " reduction=" << static_cast<int>(r));
            const Tensor x = randn_on({n, c}, dtype, 17 + c, 3.0).requires_grad_();
            const Tensor t = targets_with_ignored(n, c, 19 + c);
            const Tensor w = weighted ? weight : Tensor();
            const Tensor y = cross_entropy(x, t, kIgnore, r, w, eps);
            const Tensor g = r == Reduction::None ? randn_on({n}, dtype, 5) : scalar_tensor(1.7, {dtype, test_device()});
            const CeRef want =
                ref_cross_entropy(x.detach(), t, r, values(g), weighted ? values(weight) : std::vector<double>{}, eps);
            // As above, with the smoothing term's second sum of c terms (each |lse - x_j|, of
            // the size of the row's lse and logits): (2c + 8) u.
            const double tol = (2 * c + 8) * u * 20, rows_tol = tol + n * u * 4;
            EXPECT_CLOSE(y, want.loss, r == Reduction::None ? Shape{n} : Shape{}, rows_tol, rows_tol);
            y.backward(g);
            EXPECT_CLOSE(x.grad(), want.dx, (Shape{n, c}), tol, tol);
          }
    }
  const Tensor x = randn_on({4, 3}, kFloat32, 1);
  const Tensor t = randint_on(0, 3, {4}, 2);
  EXPECT_EMBER_ERROR(cross_entropy(x, t, kIgnore, Reduction::Mean, randn_on({4}, kFloat32, 3)), "cross_entropy",
                     "weight must be [3]");
  EXPECT_EMBER_ERROR(cross_entropy(x, t, kIgnore, Reduction::Mean, {}, 1.5), "label_smoothing must be in [0, 1]");
}

// Today's composed form: log_softmax, then the negative picked log-probability.
TEST(FusedCrossEntropy, CpuMatchesTheComposedOps) {
  EMBER_CPU_ONLY();
  for (int64_t c : {1, 3, 1000}) {
    const Tensor x = randn_on({64, c}, kFloat32, 9 + c, 2.0);
    const Tensor t = targets_with_ignored(64, c, c);
    const Tensor composed = nn::functional::nll_loss(log_softmax(x, 1), t, {.reduction = Reduction::None});
    // Both round each row's log-sum-exp in float32: within (c + 8) u of its size.
    EXPECT_TRUE(all_close(cross_entropy(x, t, kIgnore, Reduction::None), composed, 0, (c + 8) * 6e-8 * 20));
  }
}

// ----- embedding backward -----

std::vector<double> ref_embedding_grad(const Tensor& g, const Tensor& idx, int64_t rows) {
  const int64_t d = g.size(-1), n = idx.numel();
  const std::vector<double> gv = values(g), iv = values(idx);
  std::vector<double> out(static_cast<size_t>(rows * d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) out[static_cast<int64_t>(iv[i]) * d + j] += gv[i * d + j];
  return out;
}

TEST(FusedEmbedding, BackwardMatchesReferenceAndIsDeterministic) {
  for (auto [rows, n, d] : {std::tuple{1, 7, 3}, std::tuple{10, 300, 17}, std::tuple{300, 5000, 64}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows, " << n << " indices, width " << d);
    const Tensor idx = randint_on(0, rows, {n}, rows);  // many repeats
    const Tensor g = randn_on({n, d}, kFloat32, n);
    const Tensor gw = embedding_backward(g, idx, rows);
    // Each sum has at most n terms of size |g| ~ 4: recursive summation's n u bound.
    EXPECT_CLOSE(gw, ref_embedding_grad(g, idx, rows), (Shape{rows, d}), 0, 4 * n * 6e-8);
    EXPECT_EQ(values(gw), values(embedding_backward(g, idx, rows)));  // bit for bit, run to run
  }
}

TEST(FusedEmbedding, BackwardGivesThePaddingRowNoGradient) {
  const Tensor idx = tensor({4, 0, 4, 2, 2, 2}, {2, 3}, {kInt64, Device::cpu()}).to(test_device());
  const Tensor g = randn_on({2, 3, 3}, kFloat64, 2);
  std::vector<double> want = ref_embedding_grad(g, idx, 5);
  for (int64_t j = 0; j < 3; ++j) want[2 * 3 + j] = 0;
  EXPECT_CLOSE(embedding_backward(g, idx, 5, 2), want, (Shape{5, 3}), 0, 1e-14);
  EXPECT_EMBER_ERROR(embedding_backward(g, idx, 5, 5), "embedding_backward", "padding_idx 5");
}

TEST(FusedEmbedding, ForwardGathersAndBackwardSkipsPadding) {
  EMBER_SKIP_WITHOUT(index_select_stub);  // the forward is a gather
  const Tensor w = randn_on({5, 3}, kFloat64, 1).requires_grad_();
  const Tensor idx = tensor({4, 0, 4, 2, 2, 2}, {2, 3}, {kInt64, Device::cpu()}).to(test_device());
  const Tensor y = embedding(idx, w, /*padding_idx=*/-3);  // row 2, counted from the end
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  const std::vector<double> wv = values(w), yv = values(y), iv = values(idx);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(yv[i * 3 + j], wv[static_cast<int64_t>(iv[i]) * 3 + j]);
  const Tensor g = randn_on({2, 3, 3}, kFloat64, 2);
  y.backward(g);
  std::vector<double> want = ref_embedding_grad(g, idx, 5);
  for (int64_t j = 0; j < 3; ++j) want[2 * 3 + j] = 0;  // the padding row
  EXPECT_CLOSE(w.grad(), want, (Shape{5, 3}), 0, 1e-14);
}

TEST(FusedEmbedding, IndexOutOfRangeIsAnError) {
  const Tensor w = randn_on({4, 2}, kFloat32, 1);
  const Tensor bad = tensor({0, 3, 4}, {kInt64, Device::cpu()}).to(test_device());
  // On a GPU the error comes at the next synchronization (reading the result), not at the call.
  EXPECT_EMBER_ERROR(embedding(bad, w).to_vector<float>(), "embedding", "index 4", "position 2",
                     "out of range for 4 rows");
  EXPECT_EMBER_ERROR(embedding_backward(randn_on({3, 2}, kFloat32, 1), bad, 4).to_vector<float>(),
                     "embedding_backward", "index 4");
  const Tensor negative = tensor({-1}, {kInt64, Device::cpu()}).to(test_device());
  EXPECT_EMBER_ERROR(embedding(negative, w).to_vector<float>(), "index -1", "out of range");
  // The arguments in the other order are named as such.
  EXPECT_EMBER_ERROR(embedding(w, tensor({0, 1}, {kInt64, Device::cpu()}).to(test_device())), "embedding",
                     "indices are float32 and weight is int64", "embedding(indices, weight)");
}

// ----- dropout -----

TEST(FusedDropout, MaskIsTheCpuDrawOnEveryDeviceAndBackwardUsesIt) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (int64_t n : {1, 7, 1001}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n);
      const double p = 0.3;
      const Tensor x = randn_on({n}, dtype, n).requires_grad_();
      Generator gen(42), cpu_gen(42);
      const Tensor y = dropout(x, p, /*train=*/true, &gen);
      // What functional::dropout computed before: x * ((rand >= p) * 1 / (1 - p)) in x's dtype.
      const Tensor u = rand({n}, {dtype, Device::cpu()}, &cpu_gen);
      const Tensor want = mul(x.detach().to(Device::cpu()), mul(ge(u, Scalar(p)).to(dtype), Scalar(1.0 / (1.0 - p))));
      EXPECT_EQ(values(y), values(want));
      EXPECT_EQ(gen.advance(0), cpu_gen.advance(0)) << "dropout takes rand's Philox blocks";
      const Tensor g = randn_on({n}, dtype, 3);
      y.backward(g);
      const Tensor gwant = mul(g.to(Device::cpu()), mul(ge(u, Scalar(p)).to(dtype), Scalar(1.0 / (1.0 - p))));
      EXPECT_EQ(values(x.grad()), values(gwant));
    }
  }
}

TEST(FusedDropout, RejectsPOutsideTheRange) {
  const Tensor x = randn_on({3}, kFloat32, 1);
  EXPECT_EMBER_ERROR(dropout(x, 1.5, true), "dropout", "p must be in [0, 1], got 1.5");
  EXPECT_EMBER_ERROR(dropout(x, -0.1, false), "dropout", "got -0.1");
}

TEST(FusedDropout, TrainFlagAndTheEndsOfTheRange) {
  const Tensor x = randn_on({5}, kFloat32, 1);
  Generator gen(3);
  const uint64_t before = gen.advance(0);
  // Not training, or p = 0: x itself, and no draw.
  EXPECT_TRUE(dropout(x, 0.5, /*train=*/false, &gen).shares_storage_with(x));
  EXPECT_TRUE(dropout(x, 0.0, true, &gen).shares_storage_with(x));
  // p = 1 zeroes, without a draw.
  EXPECT_EQ(values(dropout(x, 1.0, true, &gen)), std::vector<double>(5, 0.0));
  EXPECT_EQ(gen.advance(0), before);
}

// ----- gradient checks (they need sum, mul and randn on the device) -----

TEST(FusedGradcheck, CrossEntropyEmbeddingDropout) {
  EMBER_SKIP_WITHOUT(sum_stub);
  EMBER_SKIP_WITHOUT(mul_stub);
  EMBER_SKIP_WITHOUT(normal_stub);
  const Tensor x = randn_on({6, 5}, kFloat64, 1).requires_grad_();
  const Tensor t = targets_with_ignored(6, 5, 2);
  const Tensor cw = add(abs(randn_on({5}, kFloat64, 5)), Scalar(0.5));
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, kIgnore, r); }, {x}));
    EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, kIgnore, r, cw, 0.2); },
                        {x}));
  }
  const Tensor w = randn_on({4, 3}, kFloat64, 3).requires_grad_();
  const Tensor idx = randint_on(0, 4, {2, 5}, 4);
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return embedding(idx, in[0]); }, {w}));
  EXPECT_TRUE(grad_ok(
      [&](const std::vector<Tensor>& in) {
        Generator gen(7);  // the same mask at every evaluation
        return dropout(in[0], 0.4, true, &gen);
      },
      {x}));
}

}  // namespace
}  // namespace ember::test
