// GEMM variants. Note [GEMM choice]: OpenBLAS's sgemm kernel is 20-35% faster than
// Eigen's from 256^3 up (bench/report.py, table in the README), so Auto sends products of
// 64^3 multiply-adds and more to it, and smaller ones to Eigen. Auto splits a product
// over ember's pool, one single-threaded OpenBLAS call per block, rather than letting
// OpenBLAS run its own threads: those spin in sched_yield for about 0.1 s after each
// call, and in training they took the cores from ember's pool, which runs everything
// else. Alternating runs on the project machine (2 threads, 2026-12-02): MLP epoch
// 2.23 / 2.17 s on OpenBLAS's threads against 1.58 / 1.33 s split; CNN epoch 21.7 /
// 21.8 s against 17.8 / 18.5 s. A lone large product is a few percent faster on
// OpenBLAS's threads (the split packs the shared operand once per block); that variant
// stays reachable by name.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <Eigen/Core>
#include <atomic>

#include "base/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/variant.h"

namespace ember::kernels::cpu {
namespace {

std::atomic<GemmVariant> g_variant{variant_from_env("EMBER_GEMM", GemmVariant::Auto, parse_gemm_variant)};

// Products of at least this many multiply-adds go to OpenBLAS under Auto.
constexpr double kOpenBlasMinFlops = 64.0 * 64 * 64;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;

// C rows [r0, r1) (or columns [c0, c1) when split_cols) of the product, single-threaded.
template <class T>
void eigen_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                 int64_t ldb, T* c, int64_t ldc, bool acc, int64_t lo, int64_t hi, bool split_cols) {
  ConstMap<T> A(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  ConstMap<T> B(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  MutMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  auto run = [&](const auto& opA, const auto& opB) {
    if (split_cols) {
      auto dst = C.middleCols(lo, hi - lo);
      auto rhs = opB.middleCols(lo, hi - lo);
      if (acc) dst.noalias() += opA * rhs; else dst.noalias() = opA * rhs;
    } else {
      auto dst = C.middleRows(lo, hi - lo);
      auto lhs = opA.middleRows(lo, hi - lo);
      if (acc) dst.noalias() += lhs * opB; else dst.noalias() = lhs * opB;
    }
  };
  if (!ta && !tb) run(A, B);
  else if (ta && !tb) run(A.transpose(), B);
  else if (!ta && tb) run(A, B.transpose());
  else run(A.transpose(), B.transpose());
}

// Runs block(lo, hi, split_cols) over row blocks of C (or column blocks, when n > m), one
// per thread, in multiples of 16; single-threaded when parallel is false or C is small.
template <class Block>
void split_product(int64_t m, int64_t n, int64_t k, bool parallel, const Block& block) {
  const bool split_cols = n > m;
  const int64_t extent = split_cols ? n : m;
  const int threads = parallel ? num_threads() : 1;
  const int64_t blocks = std::min<int64_t>(threads, std::max<int64_t>(1, extent / 16));
  if (blocks <= 1 || double(m) * double(n) * double(k) < 32.0 * 32 * 32) {
    block(0, extent, split_cols);
    return;
  }
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t lo = extent * blk / blocks / 16 * 16;
      const int64_t hi = blk + 1 == blocks ? extent : extent * (blk + 1) / blocks / 16 * 16;
      if (hi > lo) block(lo, hi, split_cols);
    }
  });
}

// (Checked per call: a program may change OpenBLAS's setting, as bench_matmul's direct
// OpenBLAS baseline does.)
void use_openblas_threads(int n) {
  if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

template <class T>
void openblas_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                    int64_t ldb, T* c, int64_t ldc, bool acc, int64_t lo, int64_t hi, bool split_cols) {
  // Sub-blocks: rows lo..hi of op(A) and C, or columns lo..hi of op(B) and C.
  if (split_cols) {
    b += tb ? lo * ldb : lo;
    c += lo;
    n = hi - lo;
  } else {
    a += ta ? lo : lo * lda;
    c += lo * ldc;
    m = hi - lo;
  }
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const T beta = acc ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void set_gemm_variant(GemmVariant v) { g_variant.store(v); }
GemmVariant gemm_variant() { return g_variant.load(); }

GemmVariant parse_gemm_variant(std::string_view name) {
  if (name == "auto") return GemmVariant::Auto;
  if (name == "eigen") return GemmVariant::Eigen;
  if (name == "openblas") return GemmVariant::OpenBlas;
  if (name == "openblas_split") return GemmVariant::OpenBlasSplit;
  EMBER_FAIL("gemm: unknown variant '", name, "' (expected auto, eigen, openblas or openblas_split)");
}

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T* c, int64_t ldc, bool acc, bool parallel) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!acc)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  GemmVariant v = g_variant.load();
  if (v == GemmVariant::Auto)
    v = double(m) * n * k >= kOpenBlasMinFlops ? GemmVariant::OpenBlasSplit : GemmVariant::Eigen;
  if (v == GemmVariant::OpenBlas && parallel) {
    use_openblas_threads(num_threads());
    openblas_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, 0, m, false);
  } else if (v == GemmVariant::OpenBlas || v == GemmVariant::OpenBlasSplit) {
    use_openblas_threads(1);
    split_product(m, n, k, parallel, [&](int64_t lo, int64_t hi, bool cols) {
      openblas_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, lo, hi, cols);
    });
  } else {
    split_product(m, n, k, parallel, [&](int64_t lo, int64_t hi, bool cols) {
      eigen_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, lo, hi, cols);
    });
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                          float*, int64_t, bool, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double*, int64_t, bool, bool);

}  // namespace ember::kernels::cpu
