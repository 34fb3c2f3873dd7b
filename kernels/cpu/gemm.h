// Dense matrix multiply on the CPU, with its variants reachable by name from tests and
// benchmarks: Eigen's GEMM (split across ember's thread pool) and OpenBLAS's
// cblas_?gemm. Auto picks per call from the measurements noted in gemm.cpp.
#pragma once

#include <cstdint>
#include <string_view>

namespace ember::kernels::cpu {

// OpenBlas: one call on OpenBLAS's own threads; OpenBlasSplit: OpenBLAS's kernel on one
// thread per block of ember's pool; Eigen: Eigen's kernel per block of ember's pool.
// EMBER_GEMM (auto, eigen, openblas, openblas_split) sets the starting choice.
enum class GemmVariant { Auto, Eigen, OpenBlas, OpenBlasSplit };
void set_gemm_variant(GemmVariant v);
GemmVariant gemm_variant();
// "auto", "eigen", "openblas", "openblas_split"; throws ember::Error otherwise.
GemmVariant parse_gemm_variant(std::string_view name);

// Row-major C[m, n] = op(A) op(B) (+ C when accumulate), where op(A) is A [m, k] stored
// with leading dimension lda, or its transpose stored [k, m] when trans_a; likewise B.
// `parallel` allows the call to use the thread pool (false inside a parallel region).
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc, bool accumulate, bool parallel);

}  // namespace ember::kernels::cpu
