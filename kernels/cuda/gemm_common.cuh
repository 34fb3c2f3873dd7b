// What the GEMM kernels share (sgemm.cuh: float32 on the FMA units; gemm_bf16.cuh: bf16 on
// the tensor cores): the description of one, possibly batched, GEMM problem, its checks,
// the order in which blocks walk the output tiles, and the alpha/beta epilogue.
//
// Convention (the CPU backend's kernels/cpu/gemm.h, and BLAS's, in row-major terms):
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C[m, n]
// op(A) is A stored row-major [m, lda] (lda >= k), or, when trans_a, A^T of a matrix stored
// [k, lda] (lda >= m); likewise op(B) from [k, ldb] or, when trans_b, [n, ldb] (ldb >= k):
// a Linear layer's x [M, K] @ w [N, K]^T is trans_b. When beta == 0, C is only written,
// never read (NaN in C does not leak through), as in BLAS. FLOPs: 2*m*n*k per matrix.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"


namespace ember::kernels::cuda {

// One GEMM, or `batch` of them: matrix i of each operand starts stride_x elements after
// matrix i-1 (stride 0 broadcasts one matrix to the whole batch).
template <class TAB, class TC>
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const TAB* a = nullptr;  // op(A) (m, k) input: [m, lda], or [k, lda] when trans_a
  int64_t lda = 0;
  bool trans_a = false;
  const TAB* b = nullptr;  // op(B) (k, n) input: [k, ldb], or [n, ldb] when trans_b
  int64_t ldb = 0;
  bool trans_b = false;
  TC* c = nullptr;  // C (m, n) output (and input when beta != 0): [m, ldc]
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// The problem as the kernels see it: int extents (checked on the host), 64-bit offsets.
template <class TAB, class TC>
struct GemmArgs {
  int m, n, k;
  const TAB* a;
  int64_t lda, stride_a;
  const TAB* b;
  int64_t ldb, stride_b;
  TC* c;
  int64_t ldc, stride_c;
  float alpha, beta;
};

// Checks a problem before any launch (hosts check, kernels assume); `who` names the caller.
template <class TAB, class TC>
void check_gemm_problem(const GemmProblem<TAB, TC>& p, const char* who) {
  EMBER_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0 && p.batch >= 0, who, ": negative size (m ", p.m, ", n ", p.n, ", k ",
              p.k, ", batch ", p.batch, ")");
  EMBER_CHECK(p.m <= INT_MAX && p.n <= INT_MAX && p.k <= INT_MAX, who, ": m ", p.m, ", n ", p.n, ", k ", p.k,
              " must each be below 2^31");
  const int64_t a_row = p.trans_a ? p.m : p.k, b_row = p.trans_b ? p.k : p.n;
  EMBER_CHECK(p.lda >= (a_row > 1 ? a_row : 1), who, ": lda ", p.lda, " is less than the ", a_row,
              " elements of a stored row of ", p.trans_a ? "A [k, m]" : "A [m, k]");
  EMBER_CHECK(p.ldb >= (b_row > 1 ? b_row : 1), who, ": ldb ", p.ldb, " is less than the ", b_row,
              " elements of a stored row of ", p.trans_b ? "B [n, k]" : "B [k, n]");
  EMBER_CHECK(p.ldc >= (p.n > 1 ? p.n : 1), who, ": ldc ", p.ldc, " is less than n = ", p.n);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  EMBER_CHECK(p.c != nullptr, who, ": C is null");
  EMBER_CHECK(p.k == 0 || (p.a != nullptr && p.b != nullptr), who, ": A or B is null with k = ", p.k);
}

// How many launches a batch takes (grid.z holds at most 65535 matrices) and the arguments
// of the launch for matrices [first, first + count).
inline constexpr int64_t kMaxGridZ = 65535;
template <class TAB, class TC>
GemmArgs<TAB, TC> gemm_args(const GemmProblem<TAB, TC>& p, int64_t first) {
  GemmArgs<TAB, TC> g;
  g.m = int(p.m), g.n = int(p.n), g.k = int(p.k);
  g.a = p.a + first * p.stride_a, g.lda = p.lda, g.stride_a = p.stride_a;
  g.b = p.b + first * p.stride_b, g.ldb = p.ldb, g.stride_b = p.stride_b;
  g.c = p.c + first * p.stride_c, g.ldc = p.ldc, g.stride_c = p.stride_c;
  g.alpha = p.alpha, g.beta = p.beta;
  return g;
}

// The grid of a tiled GEMM: one block per (bm x bn) output tile, all tiles of a matrix on
// grid.x (see block_tile), matrices of the batch on grid.z.
inline LaunchConfig gemm_tile_config(int64_t m, int64_t n, int64_t batch, int bm, int bn, dim3 block,
                                     const char* who) {
  const int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  EMBER_CHECK(tiles <= INT_MAX, who, ": ", m, " x ", n, " needs ", tiles, " tiles of ", bm, " x ", bn,
              ", more than a grid holds");
  LaunchConfig cfg;
  cfg.grid = dim3(unsigned(tiles), 1, unsigned(batch < kMaxGridZ ? batch : kMaxGridZ));
  cfg.block = block;
  return cfg;
}

// Runs launch_one(args, count) once per chunk of at most 65535 matrices of the batch.
template <class TAB, class TC, class F>
void for_each_batch_chunk(const GemmProblem<TAB, TC>& p, F&& launch_one) {
  for (int64_t first = 0; first < p.batch; first += kMaxGridZ)
    launch_one(gemm_args(p, first), p.batch - first < kMaxGridZ ? p.batch - first : kMaxGridZ);
}

// Calls f(std::bool_constant<trans_a>, std::bool_constant<trans_b>): one instantiation of
// a kernel per layout.
template <class F>
void gemm_dispatch_layout(bool trans_a, bool trans_b, F&& f) {
  if (trans_a) {
    if (trans_b) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (trans_b) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}


// True when x + i*ld (and + j*stride) is 16-byte aligned for every i, j: the condition for
// a kernel to read rows of x with 16-byte vector loads. `per16` elements make 16 bytes.
template <class T>
bool rows_aligned16(const T* x, int64_t ld, int64_t stride, int64_t batch) {
  constexpr int64_t per16 = 16 / sizeof(T);
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && ld % per16 == 0 && (batch <= 1 || stride % per16 == 0);
}

// The output tile (tm, tn) of this block. Blocks are numbered along grid.x; they walk down
// groups of kTileGroup tile rows, column by column, so that the blocks resident at one
// time share a few rows of A and columns of B in L2 instead of all of B (the "grouped"
// order of Triton's matmul tutorial). Every tile is visited exactly once.
inline constexpr int kTileGroup = 8;
__device__ __forceinline__ void block_tile(int tiles_m, int tiles_n, int& tm, int& tn) {
  const int id = int(blockIdx.x);
  const int per_group = kTileGroup * tiles_n;
  const int first_m = id / per_group * kTileGroup;
  const int rows = tiles_m - first_m < kTileGroup ? tiles_m - first_m : kTileGroup;
  tm = first_m + (id % per_group) % rows;
  tn = (id % per_group) / rows;
}

// The element types C may have, read and written in float.
__device__ __forceinline__ float gemm_to_float(float x) { return x; }
__device__ __forceinline__ float gemm_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T gemm_from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(x);
  else return x;
}

// alpha * acc + beta * c_old; c_old is not read when beta == 0 (C may hold garbage or NaN).
template <class TC>
__device__ __forceinline__ float gemm_epilogue(float acc, float alpha, float beta, const TC* c_old) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * gemm_to_float(*c_old);
}

}  // namespace ember::kernels::cuda
