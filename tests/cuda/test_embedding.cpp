// The embedding kernels (kernels/cuda/embedding.cuh) against the CPU backend: the row
// gather against ember::index_select (bit for bit, any element size, misaligned rows,
// along dim 0 and along an inner dim), bad indices, and the scatter-add backward against
// ember::scatter_add, whose serial loop adds each row's gradients in order of position:
// the deterministic kernel does the same additions in the same order, so float results
// are compared exactly. The atomic variant within a stated tolerance.
#include <cstring>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/embedding.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda::test {
namespace {

std::vector<int64_t> random_indices(size_t n, int64_t rows, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = int64_t(rng() % uint64_t(rows));
  return v;
}

Tensor index_tensor(const std::vector<int64_t>& idx) {
  return tensor(std::vector<double>(idx.begin(), idx.end()), {int64_t(idx.size())}, kInt64);
}

// index_select_rows of `in` [outer, rows, inner] against the CPU's index_select of an
// arange of the same shape, which names the source of every output element.
template <class T>
void check_gather(int64_t outer, int64_t rows, int64_t inner, const std::vector<int64_t>& idx, size_t in_pad,
                  size_t out_pad) {
  SCOPED_TRACE("[" + std::to_string(outer) + ", " + std::to_string(rows) + ", " + std::to_string(inner) + "] " +
               std::to_string(idx.size()) + " indices, " + std::to_string(sizeof(T)) + "-byte elements, pads " +
               std::to_string(in_pad) + "/" + std::to_string(out_pad));
  const int64_t L = int64_t(idx.size());
  const auto host = random_bits<T>(size_t(outer * rows * inner), uint32_t(rows * 3 + inner));
  const Tensor src = index_select(arange(outer * rows * inner).view({outer, rows, inner}), 1, index_tensor(idx));
  const std::vector<int64_t> from = src.to_vector<int64_t>();
  DeviceArray<T> in(host, in_pad), out(size_t(outer * L * inner), out_pad);
  DeviceArray<int64_t> di(idx);
  DeviceArray<unsigned long long> bad(1);
  index_select_rows(in.data(), di.data(), out.data(), outer, rows, L, inner, bad.data(), nullptr);
  const std::vector<T> got = out.host();
  ASSERT_EQ(got.size(), from.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &host[size_t(from[i])], sizeof(T)), 0) << "element " << i;
  EXPECT_EQ(bad.host()[0], kNoBadIndex);
}

TEST(CudaEmbedding, GatherMatchesIndexSelect) {
  EMBER_NEED_DEVICE();
  for (int64_t D : {1, 3, 4, 33, 64})
    for (int64_t L : {0, 1, 37, 1000}) {
      const auto idx = random_indices(size_t(L), 50, uint32_t(D * 100 + L));
      check_gather<float>(1, 50, D, idx, 0, 0);
      check_gather<float>(1, 50, D, idx, 1, 0);  // rows not 16-byte aligned in the input
      check_gather<float>(1, 50, D, idx, 0, 1);  // or in the output
    }
  const auto idx = random_indices(77, 9, 5);
  check_gather<__half>(1, 9, 24, idx, 0, 0);
  check_gather<__half>(1, 9, 24, idx, 4, 0);  // 8-byte aligned input
  check_gather<__nv_bfloat16>(1, 9, 7, idx, 1, 1);
  check_gather<double>(1, 9, 5, idx, 0, 1);
  check_gather<uint8_t>(1, 9, 19, idx, 3, 0);
  check_gather<float>(4, 9, 5, idx, 0, 0);  // index_select along dim 1 of [4, 9, 5]
  check_gather<__half>(3, 9, 8, idx, 1, 0);
}

TEST(CudaEmbedding, GatherWithInt32IndicesAndEmbeddingForward) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 40, D = 12, L = 300;
  const auto idx = random_indices(L, rows, 8);
  const auto w = random_doubles(size_t(rows * D), 9);
  const Tensor want = index_select(tensor(w, {rows, D}), 0, index_tensor(idx));
  DeviceArray<float> dw(from_doubles<float>(w)), out(size_t(L * D));
  DeviceArray<int32_t> di(std::vector<int32_t>(idx.begin(), idx.end()));
  embedding_forward(dw.data(), di.data(), out.data(), rows, L, D, nullptr, nullptr);
  EXPECT_TRUE(all_close(out.host(), want.to_vector<double>(), 0.0));
}

TEST(CudaEmbedding, GatherNeverFollowsABadIndex) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 6, D = 5;
  const std::vector<int64_t> idx = {2, 5, 6, -1, int64_t(1) << 40, -(int64_t(1) << 40), 0};
  const auto w = random_doubles(size_t(rows * D), 10);
  DeviceArray<float> dw(from_doubles<float>(w), 1), out(idx.size() * D);
  DeviceArray<int64_t> di(idx);
  DeviceArray<unsigned long long> bad(1);
  embedding_forward(dw.data(), di.data(), out.data(), rows, int64_t(idx.size()), D, bad.data(), nullptr);
  std::vector<double> want(idx.size() * D, 0.0);  // bad indices give zero rows
  for (size_t i = 0; i < idx.size(); ++i)
    if (idx[i] >= 0 && idx[i] < rows)
      for (int64_t c = 0; c < D; ++c) want[i * D + c] = double(float(w[size_t(idx[i] * D + c)]));
  EXPECT_TRUE(all_close(out.host(), want, 0.0));
  EXPECT_EQ(bad.host()[0], 2u);  // the first bad position
}

// grad_weight from the deterministic backward against ember::scatter_add.
template <class I>
void check_backward(int64_t rows, int64_t D, const std::vector<int64_t>& idx, uint32_t seed) {
  SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(D) + ", " + std::to_string(idx.size()) +
               " indices (" + std::to_string(sizeof(I) * 8) + "-bit)");
  const int64_t L = int64_t(idx.size());
  const auto g = random_doubles(size_t(L * D), seed);
  // scatter_add's index has grad's shape: each position's index repeated along the row.
  std::vector<double> index2d(size_t(L * D));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < D; ++c) index2d[size_t(i * D + c)] = double(idx[size_t(i)]);
  const Tensor want = scatter_add(zeros({rows, D}), 0, tensor(index2d, {L, D}, kInt64), tensor(g, {L, D}));
  DeviceArray<float> dg(from_doubles<float>(g), 1), gw(size_t(rows * D), 1);
  DeviceArray<I> di(std::vector<I>(idx.begin(), idx.end()));
  const size_t ws_bytes = embedding_backward_workspace_bytes(L);
  DeviceArray<unsigned char> ws(ws_bytes);
  DeviceArray<unsigned long long> bad(1);
  embedding_backward(dg.data(), di.data(), gw.data(), L, rows, D, ws.data(), ws_bytes, bad.data(), nullptr);
  EXPECT_TRUE(all_close(gw.host(), want.to_vector<double>(), 0.0));
  EXPECT_EQ(bad.host()[0], kNoBadIndex);
}

TEST(CudaEmbedding, DeterministicBackwardEqualsCpuScatterAdd) {
  EMBER_NEED_DEVICE();
  check_backward<int64_t>(1, 3, random_indices(33, 1, 1), 1);
  check_backward<int64_t>(7, 4, random_indices(2049, 7, 2), 2);       // a tile and one more position
  check_backward<int64_t>(300, 5, random_indices(5000, 300, 3), 3);   // two radix passes, three tiles
  check_backward<int32_t>(70000, 1, random_indices(3000, 70000, 4), 4);  // three passes, most rows empty
  check_backward<int64_t>(5, 2, random_indices(4097, 5, 5), 5);       // long runs of each index across tiles
  check_backward<int64_t>(1000, 1, random_indices(9000, 1000, 8), 8);  // 5 tiles: the counts' scan takes 2 rounds
  check_backward<int64_t>(100, 1, random_indices(40000, 100, 9), 9);  // 20 tiles: blocks take several turns
  check_backward<int64_t>(50, 33, {}, 6);                              // no indices: zeros
  check_backward<int64_t>(256, 2, {255, 0, 255, 128, 255}, 7);        // keys up to 256 need 9 bits
}

TEST(CudaEmbedding, BackwardSkipsBadIndices) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 10, D = 3;
  const std::vector<int64_t> idx = {4, -3, 9, 10, 4, int64_t(1) << 35, 0, 4};
  const int64_t L = int64_t(idx.size());
  const auto g = random_doubles(size_t(L * D), 11);
  std::vector<double> want(size_t(rows * D), 0.0), S(want.size(), 0.0), terms(want.size(), 0.0);
  for (int64_t i = 0; i < L; ++i)
    if (idx[i] >= 0 && idx[i] < rows)
      for (int64_t c = 0; c < D; ++c) {
        want[size_t(idx[i] * D + c)] += double(float(g[size_t(i * D + c)]));
        S[size_t(idx[i] * D + c)] += std::abs(double(float(g[size_t(i * D + c)])));
        terms[size_t(idx[i] * D + c)] += 1;
      }
  // A row of n exact float terms takes n - 1 float adds: gamma_{n-1}(2^-24) S.
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = gamma_n(terms[i] - 1, 0x1p-24) * S[i];
  DeviceArray<float> dg(from_doubles<float>(g)), gw(size_t(rows * D));
  DeviceArray<int64_t> di(idx);
  DeviceArray<unsigned long long> bad(1);
  for (EmbeddingBackward mode : {EmbeddingBackward::kDeterministic, EmbeddingBackward::kAtomic}) {
    const size_t ws_bytes = embedding_backward_workspace_bytes(L, mode);
    DeviceArray<unsigned char> ws(ws_bytes);
    embedding_backward(dg.data(), di.data(), gw.data(), L, rows, D, ws.data(), ws_bytes, bad.data(), nullptr, mode);
    EXPECT_TRUE(all_within(gw.host(), want, tol));
    EXPECT_EQ(bad.host()[0], 1u);
  }
}

TEST(CudaEmbedding, AtomicBackwardAgreesWithinRounding) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 300, D = 6, L = 1000;
  const auto idx = random_indices(L, rows, 12);
  const auto g = random_doubles(size_t(L * D), 13);
  std::vector<double> want(size_t(rows * D), 0.0), S(want.size(), 0.0);
  std::vector<int64_t> count(rows, 0);
  for (int64_t i = 0; i < L; ++i) {
    ++count[size_t(idx[size_t(i)])];
    for (int64_t c = 0; c < D; ++c) {
      want[size_t(idx[size_t(i)] * D + c)] += double(float(g[size_t(i * D + c)]));
      S[size_t(idx[size_t(i)] * D + c)] += std::abs(double(float(g[size_t(i * D + c)])));
    }
  }
  // A row of n terms, added in any order: gamma_{n-1}(u) S, S the sum of their |values|;
  // the float64 check allows as much again for the reference's own order.
  std::vector<double> tol(want.size()), tol64(want.size());
  for (size_t i = 0; i < tol.size(); ++i) {
    const double n = double(count[i / size_t(D)]);
    tol[i] = gamma_n(n - 1, 0x1p-24) * S[i];
    tol64[i] = 2 * gamma_n(n - 1, 0x1p-53) * S[i];
  }
  DeviceArray<float> dg(from_doubles<float>(g)), gw(size_t(rows * D));
  DeviceArray<int64_t> di(idx);
  embedding_backward(dg.data(), di.data(), gw.data(), L, rows, D, nullptr, 0, nullptr, nullptr,
                     EmbeddingBackward::kAtomic);
  EXPECT_TRUE(all_within(gw.host(), want, tol));
  DeviceArray<double> dg64(g), gw64(size_t(rows * D));
  embedding_backward(dg64.data(), di.data(), gw64.data(), L, rows, D, nullptr, 0, nullptr, nullptr,
                     EmbeddingBackward::kAtomic);
  std::vector<double> want64(size_t(rows * D), 0.0);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < D; ++c) want64[size_t(idx[size_t(i)] * D + c)] += g[size_t(i * D + c)];
  EXPECT_TRUE(all_within(gw64.host(), want64, tol64));
}

TEST(CudaEmbedding, DeterministicBackwardInBFloat16) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 20, D = 8, L = 400;
  const auto idx = random_indices(L, rows, 14);
  const auto g = from_doubles<__nv_bfloat16>(random_doubles(size_t(L * D), 15));
  std::vector<double> want(size_t(rows * D), 0.0), S(want.size(), 0.0), terms(want.size(), 0.0);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < D; ++c) {
      want[size_t(idx[size_t(i)] * D + c)] += to_double(g[size_t(i * D + c)]);
      S[size_t(idx[size_t(i)] * D + c)] += std::abs(to_double(g[size_t(i * D + c)]));
      terms[size_t(idx[size_t(i)] * D + c)] += 1;
    }
  // n exact bf16 terms summed in float (gamma_{n-1}(2^-24) S), rounded once to bfloat16
  // (u = 2^-8 of the float sum).
  const double ub = 0x1p-8;
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = ub * std::abs(want[i]) + (1 + ub) * gamma_n(terms[i] - 1, 0x1p-24) * S[i];
  DeviceArray<__nv_bfloat16> dg(g), gw(size_t(rows * D));
  DeviceArray<int64_t> di(idx);
  const size_t ws_bytes = embedding_backward_workspace_bytes(L);
  DeviceArray<unsigned char> ws(ws_bytes);
  embedding_backward(dg.data(), di.data(), gw.data(), L, rows, D, ws.data(), ws_bytes, nullptr, nullptr);
  EXPECT_TRUE(all_within(gw.host(), want, tol));
  EXPECT_THROW(embedding_backward(dg.data(), di.data(), gw.data(), L, rows, D, nullptr, 0, nullptr, nullptr,
                                  EmbeddingBackward::kAtomic),
               Error);  // atomics: float and double only
}

TEST(CudaEmbedding, BadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> g(40), gw(40);
  DeviceArray<int64_t> idx(std::vector<int64_t>(10, 1));
  const size_t need = embedding_backward_workspace_bytes(10);
  DeviceArray<unsigned char> ws(need + 16);
  EXPECT_THROW(embedding_backward(g.data(), idx.data(), gw.data(), 10, 10, 4, ws.data(), need - 1, nullptr, nullptr),
               Error);  // too small
  EXPECT_THROW(embedding_backward(g.data(), idx.data(), gw.data(), 10, 10, 4, ws.data() + 4, need, nullptr, nullptr),
               Error);  // misaligned
  EXPECT_THROW(embedding_forward(g.data(), idx.data(), gw.data(), 10, -1, 4, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace ember::kernels::cuda::test
