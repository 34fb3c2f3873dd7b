// Sparse weights: SparseLinear against the dense Linear with the pruned weight (forward
// and every gradient, against a float64 reference with bounds derived from the sums),
// pruning (exact counts, global vs per layer, 2:4, masks through Adam), CSR checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

// y [M, N] = x [M, K] @ W^T + b in float64, and |x| @ |W|^T + |b| for the bound.
struct LinearRef {
  std::vector<double> y, bound;
};
LinearRef linear_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                     int64_t M, int64_t K, int64_t N) {
  LinearRef r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b.empty() ? 0 : b[n], a = b.empty() ? 0 : std::abs(b[n]);
      for (int64_t k = 0; k < K; ++k) {
        s += x[m * K + k] * w[n * K + k];
        a += std::abs(x[m * K + k] * w[n * K + k]);
      }
      r.y[m * N + n] = s;
      r.bound[m * N + n] = a;
    }
  return r;
}

std::vector<double> scaled(std::vector<double> v, double f) {
  for (double& e : v) e *= f;
  return v;
}

// A Linear [N, K] whose weight is pruned (per layer) to `sparsity`, on the test device.
std::shared_ptr<nn::Linear> pruned_linear(int64_t K, int64_t N, double sparsity, DType dtype) {
  auto l = std::make_shared<nn::Linear>(K, N);
  l->to(dtype);
  l->to(test_device());
  nn::Pruning(*l, {.sparsity = sparsity, .global = false});
  return l;
}

// The sparse layer's output, input gradient and bias gradient match the dense Linear's
// (both checked against float64 with gamma_{terms} bounds), and the values' gradient is the
// dense weight gradient at the pattern's entries.
void check_against_dense(int64_t M, int64_t K, int64_t N, double sparsity, DType dtype) {
  SCOPED_TRACE(testing::Message() << "M " << M << " K " << K << " N " << N << " sparsity " << sparsity << " "
                                  << dtype_name(dtype));
  auto dense = pruned_linear(K, N, sparsity, dtype);
  nn::SparseLinear sparse(*dense);
  const double u = dtype_unit_roundoff(dtype);
  const Tensor x0 = random_tensor({M, K}, dtype, Layout::Contiguous, 3).to(test_device());
  const Tensor r = random_tensor({M, N}, dtype, Layout::Contiguous, 4).to(test_device());  // dL/dy
  const std::vector<double> xv = values(x0), wv = values(dense->weight), bv = values(dense->bias), rv = values(r);

  const LinearRef fwd = linear_ref(xv, wv, bv, M, K, N);
  // dx [M, K] = r @ W: K-term sums; dW [N, K] = r^T x: M-term sums.
  std::vector<double> wt(K * N), rt(N * M), xt(K * M);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) wt[k * N + n] = wv[n * K + k];
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) rt[n * M + m] = rv[m * N + n];
    for (int64_t k = 0; k < K; ++k) xt[k * M + m] = xv[m * K + k];
  }
  const LinearRef dx = linear_ref(rv, wt, {}, M, N, K), dw = linear_ref(rt, xt, {}, N, M, K);
  std::vector<double> db(N, 0.0), db_bound(N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      db[n] += rv[m * N + n];
      db_bound[n] += std::abs(rv[m * N + n]);
    }

  for (bool is_sparse : {false, true}) {
    SCOPED_TRACE(is_sparse ? "sparse" : "dense");
    Tensor x = x0.clone().requires_grad_();
    Tensor y = is_sparse ? sparse(x) : (*dense)(x);
    sum(mul(y, r)).backward();
    EXPECT_TRUE(all_close_tol(y, fwd.y, {M, N}, scaled(fwd.bound, gamma_n(K + 1, u))));
    EXPECT_TRUE(all_close_tol(x.grad(), dx.y, {M, K}, scaled(dx.bound, gamma_n(N, u))));
    EXPECT_TRUE(all_close_tol(is_sparse ? sparse.bias.grad() : dense->bias.grad(), db, {N},
                              scaled(db_bound, gamma_n(M, u))));
    // The values' gradient is dW at the pattern's entries; for dense, dW where w != 0.
    const Tensor gw = is_sparse ? sparse.pattern().to_dense(sparse.values.grad())
                                : mul(dense->weight.grad(), ne(dense->weight, Scalar(0)).to(dtype));
    std::vector<double> want(N * K), tol(N * K);
    for (int64_t i = 0; i < N * K; ++i) {
      const bool kept = wv[i] != 0;
      want[i] = kept ? dw.y[i] : 0;
      tol[i] = kept ? dw.bound[i] * gamma_n(M, u) : 0;
    }
    EXPECT_TRUE(all_close_tol(gw, want, {N, K}, tol));
  }
}

TEST(SparseLinear, MatchesDensePrunedLinear) {
  check_against_dense(13, 37, 29, 0.7, kFloat32);
  check_against_dense(1, 5, 3, 0.0, kFloat64);
  check_against_dense(130, 96, 40, 0.9, kFloat32);  // past the CPU's 16- and 128-row panels, with tails
  check_against_dense(7, 64, 17, 0.99, kFloat64);   // rows with no entries
  check_against_dense(0, 8, 4, 0.5, kFloat32);      // an empty batch
}

TEST(SparseLinear, FusedReluAndBatchDims) {
  auto dense = pruned_linear(20, 12, 0.6, kFloat64);
  nn::SparseLinear sparse(*dense);
  const Tensor x = random_tensor({2, 3, 20}, kFloat64, Layout::Contiguous, 5).to(test_device());
  EXPECT_TRUE(all_close(sparse.forward(x, Activation::kReLU), relu((*dense)(x)), 1e-12, 1e-12));
  EXPECT_EQ(sparse.forward(x).shape(), (Shape{2, 3, 12}));
}

TEST(SparseLinear, DenseWeightRoundTrips) {
  auto dense = pruned_linear(9, 6, 0.5, kFloat32);
  nn::SparseLinear sparse(*dense);
  EXPECT_EQ(sparse.pattern().nnz(), 27);
  EXPECT_TRUE(all_close(sparse.dense_weight(), dense->weight.detach(), 0, 0));
}

TEST(SparseLinear, SparsifyAndWeightMemory) {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(40, 30), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(30, 8)});
  model->to(test_device());
  nn::Pruning(*model, {.sparsity = 0.9});
  std::shared_ptr<nn::Module> sparse = nn::sparsify(model);
  const Tensor x = random_tensor({5, 40}, kFloat32, Layout::Contiguous, 6).to(test_device());
  EXPECT_TRUE(all_close((*sparse)(x), (*model)(x), 1e-5, 1e-6));
  EXPECT_EQ(sparse->parameters().size(), 4u);  // values and bias of each layer

  const nn::WeightMemory before = nn::weight_memory(*model), after = nn::weight_memory(*sparse);
  EXPECT_EQ(before.dense_bytes, (40 * 30 + 30 * 8) * 4);
  EXPECT_EQ(before.stored_bytes, before.dense_bytes);
  EXPECT_EQ(after.dense_bytes, before.dense_bytes);
  const int64_t nnz = 144;  // round(0.1 * 1440) kept
  EXPECT_EQ(after.stored_bytes, nnz * 4 + (31 + 9 + nnz) * 4);                 // values, row_ptr, col_idx
  EXPECT_EQ(after.sparse_backward_index_bytes, (41 + 31 + nnz + nnz) * 4);  // transposes' row_ptr, col_idx, perm
}

TEST(SparseLinear, RejectsBadInput) {
  auto dense = pruned_linear(6, 4, 0.5, kFloat32);
  nn::SparseLinear sparse(*dense);
  const CsrPattern& p = sparse.pattern();
  EXPECT_EMBER_ERROR(sparse(zeros({3, 5})), "csr_linear", "[3, 5]", "6 features");
  EXPECT_EMBER_ERROR(csr_linear(zeros({3, 6}), zeros({5}), p), "csr_linear", "values must be [12]");
  EXPECT_EMBER_ERROR(csr_linear(zeros({3, 6}), zeros({12}), p, zeros({3})), "bias must be [4]");
  EXPECT_EMBER_ERROR(csr_linear(zeros({3, 6}, kInt64), zeros({12}, kInt64), p), "floating");
  const auto idx = [](std::vector<double> v) { return tensor(v, {kInt64, Device::cpu()}); };
  const Device d = test_device();
  EXPECT_EMBER_ERROR(CsrPattern::from_indices(idx({0, 2, 1, 3}), idx({0, 1, 2}), 4, d), "row_ptr decreases at row 1");
  EXPECT_EMBER_ERROR(CsrPattern::from_indices(idx({0, 2, 3}), idx({0, 4, 1}), 4, d), "col_idx[1] = 4", "[0, 4)");
  EXPECT_EMBER_ERROR(CsrPattern::from_indices(idx({0, 2, 3}), idx({1, 0, 1}), 4, d), "must increase");
  EXPECT_EMBER_ERROR(CsrPattern::from_indices(idx({1, 2, 3}), idx({0, 1, 2}), 4, d), "from 0 to nnz = 3");
  EXPECT_EMBER_ERROR(CsrPattern::from_indices(zeros({3}), idx({0, 1}), 4, d), "integer tensors");
  EXPECT_EMBER_ERROR(CsrPattern::nonzeros_of(zeros({3})), "2-D");
}

TEST(SparseLinear, FromIndicesBuildsTheTranspose) {
  // A = [[0, 5, 0], [7, 0, 9]]
  const Device d = test_device();
  const CsrPattern p = CsrPattern::from_indices(tensor({0, 1, 3}, {kInt64, Device::cpu()}),
                                                tensor({1, 0, 2}, {kInt64, Device::cpu()}), 3, d);
  const Tensor v = tensor({5, 7, 9}, {kFloat64, d});
  EXPECT_EQ(values(p.to_dense(v)), (std::vector<double>{0, 5, 0, 7, 0, 9}));
  const CsrPattern& t = p.transpose();
  EXPECT_EQ(values(t.to_dense(index_select(v, 0, p.transpose_perm()))), (std::vector<double>{0, 7, 5, 0, 0, 9}));
}

// ----- pruning -----

int64_t zeros_in(const Tensor& t) { return t.numel() - sum(ne(t, Scalar(0))).item<int64_t>(); }

TEST(Pruning, PerLayerSparsityIsExact) {
  auto model = std::make_shared<nn::Sequential>();
  auto la = std::make_shared<nn::Linear>(33, 17), lb = std::make_shared<nn::Linear>(10, 3);
  model->push_back(la);
  model->push_back(lb);
  model->to(test_device());
  nn::Pruning p(*model, {.sparsity = 0.3, .global = false});
  EXPECT_EQ(zeros_in(la->weight), std::llround(0.3 * 33 * 17));
  EXPECT_EQ(zeros_in(lb->weight), 9);
  EXPECT_EQ(p.masks().size(), 2u);
  EXPECT_EQ(p.masks()[0].first, "0.weight");
  EXPECT_NEAR(p.sparsity(), (std::llround(0.3 * 561) + 9) / 591.0, 1e-12);
}

TEST(Pruning, GlobalRanksAllLayersTogether) {
  auto model = std::make_shared<nn::Sequential>();
  auto big = std::make_shared<nn::Linear>(20, 20), small = std::make_shared<nn::Linear>(20, 20);
  model->push_back(big);
  model->push_back(small);
  model->to(test_device());
  {
    NoGradGuard g;
    small->weight.copy_(mul(small->weight, Scalar(0.01)));
  }
  std::vector<double> before = values(big->weight), s = values(small->weight);
  before.insert(before.end(), s.begin(), s.end());
  nn::Pruning(*model, {.sparsity = 0.5});
  std::vector<double> after = values(big->weight);
  s = values(small->weight);
  after.insert(after.end(), s.begin(), s.end());
  // One threshold over both layers: every pruned weight was at most every kept one.
  double max_pruned = 0, min_kept = INFINITY;
  int64_t pruned = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i] == 0) {
      ++pruned;
      max_pruned = std::max(max_pruned, std::abs(before[i]));
    } else {
      min_kept = std::min(min_kept, std::abs(before[i]));
    }
  }
  EXPECT_EQ(pruned, 400);
  EXPECT_LE(max_pruned, min_kept);
  EXPECT_GT(zeros_in(small->weight), 300);  // per layer it would lose 200
}

TEST(Pruning, TwoOfFour) {
  nn::Linear l(12, 5);
  l.to(test_device());
  nn::Pruning(l, {.sparsity = 0.5, .two_of_four = true});
  const std::vector<double> w = values(l.weight);
  for (size_t g = 0; g < w.size(); g += 4) {
    int zeros = 0;
    for (int k = 0; k < 4; ++k) zeros += w[g + k] == 0;
    EXPECT_EQ(zeros, 2) << "group at " << g;
  }
  nn::Linear odd(10, 2);
  EXPECT_EMBER_ERROR(nn::Pruning(odd, {.sparsity = 0.5, .two_of_four = true}), "divisible by 4", "[2, 10]");
  EXPECT_EMBER_ERROR(nn::Pruning(l, {.sparsity = 0.7, .two_of_four = true}), "exactly half");
  EXPECT_EMBER_ERROR(nn::Pruning(l, {.sparsity = 1.5}), "[0, 1]");
  nn::ReLU relu_only;
  EXPECT_EMBER_ERROR(nn::Pruning(relu_only, {}), "no Linear");
}

// Note [Keeping pruned weights at zero]: Adam with weight decay whose moments were filled
// before pruning; after fine-tuning steps the pruned weights are exactly zero.
TEST(Pruning, MaskHoldsThroughAdamSteps) {
  for (bool decoupled : {false, true}) {
    auto l = std::make_shared<nn::Linear>(16, 8);
    l->to(test_device());
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled) opt = std::make_unique<optim::AdamW>(l->parameters(), optim::AdamW::Options{.lr = 0.05, .weight_decay = 0.1});
    else opt = std::make_unique<optim::Adam>(l->parameters(), optim::Adam::Options{.lr = 0.05, .weight_decay = 0.1});
    const Tensor x = random_tensor({4, 16}, kFloat32, Layout::Contiguous, 7).to(test_device());
    auto step = [&] {
      opt->zero_grad();
      sum(mul((*l)(x), (*l)(x))).backward();
      opt->step();
    };
    step();
    step();  // Adam's moments are now nonzero everywhere
    nn::Pruning p(*l, {.sparsity = 0.75});
    const std::vector<double> mask = values(p.masks()[0].second);
    for (int i = 0; i < 5; ++i) {
      step();
      p.apply();
    }
    const std::vector<double> w = values(l->weight);
    int64_t live = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (mask[i] == 0) EXPECT_EQ(w[i], 0.0) << "pruned weight " << i << (decoupled ? " (AdamW)" : " (Adam)");
      live += mask[i] != 0 && w[i] != 0;
    }
    EXPECT_GT(live, 0);
    const std::vector<double> g = values(l->weight.grad());  // the hook's half
    for (size_t i = 0; i < g.size(); ++i)
      if (mask[i] == 0) EXPECT_EQ(g[i], 0.0) << "gradient of pruned weight " << i;
  }
}

}  // namespace
}  // namespace ember::test
