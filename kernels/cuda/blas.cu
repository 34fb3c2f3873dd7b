// The GEMM variants behind kernels/cuda/blas.h and their names (variants.h): cuBLASLt on
// a GPU (row-major through the column-major identity C^T = op(B)^T op(A)^T, bias and ReLU
// in its epilogue), the hand-written SGEMM (float32; the only float32 GEMM in emulation),
// and a plain kernel, one thread per output summing in the operands' type, for float64
// in emulation, for integers everywhere (rare in practice; wrapping as the CPU's) and k = 0.
#include "kernels/cuda/blas.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/runtime.h"
#include "kernels/common/unary_ops.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/sgemm.cuh"
#include "kernels/cuda/variants.h"
#include "kernels/cpu/variant.h"

#if !defined(EMBER_CUDA_EMULATED)
#include <cublasLt.h>

namespace ember::detail {
// EMBER_CUDA_CHECK's overload for cuBLASLt's status (base/cuda_check.h).
inline void check_cuda(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    EMBER_FAIL("cuBLASLt call ", call, " failed at ", file, ":", line, ": ", cublasGetStatusString(st), " (", int(st),
               ")");
}
}  // namespace ember::detail
#endif

namespace ember::kernels::cuda {
namespace {

// 0: auto, -1: cuBLASLt, 1..6: that SGEMM version.
constexpr int kAuto = 0, kCublasLt = -1;

int parse_gemm(std::string_view name) {
  if (name == "auto") return kAuto;
  if (name == "cublaslt") {
#if defined(EMBER_CUDA_EMULATED)
    EMBER_FAIL("gemm variant 'cublaslt' needs a GPU: the emulated CUDA device has no cuBLASLt (use sgemm)");
#endif
    return kCublasLt;
  }
  if (name == "sgemm") return int(kSgemmDefault);
  if (name.substr(0, 6) == "sgemm-") return int(parse_sgemm_version(name.substr(6)));
  EMBER_FAIL("gemm: unknown cuda variant '", name, "' (expected auto, cublaslt, sgemm or sgemm-<version>)");
}

std::atomic<int> g_gemm{cpu::variant_from_env("EMBER_GEMM", kAuto, +[](std::string_view s) { return parse_gemm(s); })};

// --- The plain kernel, with the epilogue ------------------------------------------------

// ReLU where it means something: integer products never ask for it.
template <class T>
__device__ __forceinline__ T relu_if(T v, bool relu) {
  if constexpr (std::is_floating_point_v<T>)
    return relu ? ops::Relu{}(v) : v;
  else
    return v;
}

template <class T>
__global__ void __launch_bounds__(256) gemm_plain_kernel(GemmArgs<T, T> g, bool ta, bool tb, int64_t total,
                                                         const T* bias, bool relu) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t n = i % g.n, t = i / g.n, m = t % g.m, b = t / g.m;
    const T* a = g.a + b * g.stride_a;
    const T* bm = g.b + b * g.stride_b;
    T* c = g.c + b * g.stride_c + m * g.ldc + n;
    // 16-bit operands are summed in float32 and rounded once, as cuBLASLt's 16-bit GEMM does.
    using C = compute_t<T>;
    C acc = g.beta != 0 ? widen(*c) : C(0);
    for (int64_t k = 0; k < g.k; ++k)
      acc += C(widen(ta ? a[k * g.lda + m] : a[m * g.lda + k]) * widen(tb ? bm[n * g.ldb + k] : bm[k * g.ldb + n]));
    if (bias) acc += widen(bias[n]);
    *c = round_to<T>(relu_if(acc, relu));
  }
}

// c[., n] = relu?(c[., n] + bias[n]) over a contiguous [rows, n] output: the SGEMM's epilogue.
template <class T>
__global__ void __launch_bounds__(256) bias_relu_kernel(T* c, const T* bias, int64_t n, int64_t total, bool relu) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    const compute_t<T> v = bias ? widen(c[i]) + widen(bias[i % n]) : widen(c[i]);
    c[i] = round_to<T>(relu ? ops::Relu{}(v) : v);
  }
}

template <class T>
GemmArgs<T, T> args_of(const GemmProblem<T, T>& p) {
  return {int(p.m), int(p.n), int(p.k), p.a, p.lda, p.stride_a, p.b, p.ldb, p.stride_b, p.c, p.ldc, p.stride_c,
          p.alpha, p.beta};
}

template <class T>
void gemm_plain(const GemmProblem<T, T>& p, const T* bias, bool relu, cudaStream_t stream) {
  const int64_t total = p.batch * p.m * p.n;
  const LaunchConfig cfg{dim3(grid_stride_blocks(total, kBlockThreads)), dim3(kBlockThreads), 0};
  launch<gemm_plain_kernel<T>>(cfg, stream, args_of(p), p.trans_a, p.trans_b, total, bias, relu);
}

// The epilogue pass after a GEMM that has none; c is contiguous [batch * m, n].
template <class T>
void bias_relu(const GemmProblem<T, T>& p, const T* bias, bool relu, cudaStream_t stream) {
  if (!bias && !relu) return;
  EMBER_CHECK(p.ldc == p.n && (p.batch == 1 || p.stride_c == p.m * p.n), "gemm: the epilogue needs a contiguous C");
  const int64_t total = p.batch * p.m * p.n;
  const LaunchConfig cfg{dim3(grid_stride_blocks(total, kBlockThreads)), dim3(kBlockThreads), 0};
  launch<bias_relu_kernel<T>>(cfg, stream, p.c, bias, p.n, total, relu);
}

// --- cuBLASLt ---------------------------------------------------------------------------
#if !defined(EMBER_CUDA_EMULATED)

// The most workspace an algorithm may ask for: cuBLASLt's recommendation for Hopper
// (smaller ones rule out some split-K kernels); a call allocates what its pick needs.
constexpr std::size_t kCublasLtWorkspace = 32u << 20;

cublasLtHandle_t lt_handle(int device) {
  constexpr int kMaxDevices = 64;
  static cublasLtHandle_t handles[kMaxDevices] = {};
  static std::mutex mu;
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cublaslt: device ", device, " out of range");
  std::lock_guard lock(mu);
  if (!handles[device]) EMBER_CUDA_CHECK(cublasLtCreate(&handles[device]));  // lives for the process
  return handles[device];
}

// Owns the descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  EMBER_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

cublasLtMatrixLayout_t lt_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                 int64_t stride) {
  cublasLtMatrixLayout_t l;
  EMBER_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld));
  const int32_t count = int32_t(batch);
  EMBER_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  EMBER_CUDA_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return l;
}

// The alignment in bytes (up to 256) of every matrix of a batch starting at p: the
// heuristics assume 256 unless told, and a view or a packed batch can have less.
uint32_t alignment_of(const void* p, int64_t stride, int64_t batch, std::size_t elem) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p);
  if (batch > 1) bits |= uint64_t(stride) * elem;
  uint32_t a = 1;
  while (a < 256 && !(bits & a)) a <<= 1;
  return a;
}

void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, uint32_t v) {
  EMBER_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
}

// Column-major, cuBLASLt computes D (n x m) = op(B') (n x k) op(A') (k x m) with B' our B
// and A' our A: a row-major [r, c] matrix is a column-major [c, r] one.
template <class T>
void gemm_cublaslt(const GemmProblem<T, T>& p, const T* bias, bool relu, int device, cudaStream_t stream) {
  constexpr bool kDouble = std::is_same_v<T, double>;
  using Scale = std::conditional_t<kDouble, double, float>;
  const cudaDataType_t type = kDouble                                  ? CUDA_R_64F
                              : std::is_same_v<T, __half>              ? CUDA_R_16F
                              : std::is_same_v<T, __nv_bfloat16>       ? CUDA_R_16BF
                                                                       : CUDA_R_32F;
  // 16-bit operands: products and sums in float32 (the tensor cores' float accumulation).
  const cublasComputeType_t compute = kDouble                        ? CUBLAS_COMPUTE_64F
                                      : std::is_same_v<T, float> && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = kDouble ? CUDA_R_64F : CUDA_R_32F;
  EMBER_CHECK(p.batch <= INT32_MAX, "cublaslt: batch ", p.batch, " exceeds 2^31 - 1");
  LtCall call;
  EMBER_CUDA_CHECK(cublasLtMatmulDescCreate(&call.op, compute, scale_type));
  const cublasOperation_t op_first = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(call.op, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_attr(call.op, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  // The epilogue's bias runs along D's rows: our n, one value per output column. It
  // wants a 16-byte aligned bias and one matrix; otherwise the separate pass runs.
  const bool fused = !kDouble && (bias || relu) && p.batch == 1 && reinterpret_cast<uintptr_t>(bias) % 16 == 0;
  if (fused) {
    const cublasLtEpilogue_t ep =
        bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS) : CUBLASLT_EPILOGUE_RELU;
    set_attr(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, ep);
    if (bias) set_attr(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  }
  call.a = p.trans_b ? lt_layout(type, p.k, p.n, p.ldb, p.batch, p.stride_b)
                     : lt_layout(type, p.n, p.k, p.ldb, p.batch, p.stride_b);
  call.b = p.trans_a ? lt_layout(type, p.m, p.k, p.lda, p.batch, p.stride_a)
                     : lt_layout(type, p.k, p.m, p.lda, p.batch, p.stride_a);
  call.c = lt_layout(type, p.n, p.m, p.ldc, p.batch, p.stride_c);
  const uint32_t align_a = alignment_of(p.a, p.stride_a, p.batch, sizeof(T));
  const uint32_t align_b = alignment_of(p.b, p.stride_b, p.batch, sizeof(T));
  const uint32_t align_c = alignment_of(p.c, p.stride_c, p.batch, sizeof(T));
  const cublasLtHandle_t handle = lt_handle(device);
  // The heuristic's pick, once per problem: the query costs more than the descriptors.
  const std::array<int64_t, 20> key = {int64_t(sizeof(T)), int64_t(compute), p.trans_a, p.trans_b, p.m, p.n, p.k,
                                       p.lda, p.ldb, p.ldc, p.batch, p.stride_a, p.stride_b, p.stride_c,
                                       fused ? (bias ? 1 : 0) + (relu ? 2 : 0) : -1, align_a, align_b, align_c,
                                       device, p.beta != 0};
  static std::mutex mu;
  static std::map<std::array<int64_t, 20>, cublasLtMatmulHeuristicResult_t> cache;
  cublasLtMatmulHeuristicResult_t heuristic{};
  std::unique_lock lock(mu);
  if (auto it = cache.find(key); it != cache.end()) {
    heuristic = it->second;
  } else {
    lock.unlock();
    const uint64_t max_ws = kCublasLtWorkspace;
    EMBER_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
    EMBER_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &max_ws, sizeof(max_ws)));
    set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b);  // cuBLASLt's A is our B
    set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a);
    set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
    set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
    int found = 0;
    EMBER_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, call.op, call.a, call.b, call.c, call.c, call.pref, 1,
                                                      &heuristic, &found));
    EMBER_CHECK(found > 0, "cublaslt: no algorithm for m ", p.m, ", n ", p.n, ", k ", p.k, ", batch ", p.batch);
    lock.lock();
    cache.emplace(key, heuristic);
  }
  lock.unlock();
  DeviceScratch workspace(device, stream, heuristic.workspaceSize);
  const Scale alpha = 1, beta = Scale(p.beta);
  EMBER_CUDA_CHECK(cublasLtMatmul(handle, call.op, &alpha, p.b, call.a, p.a, call.b, &beta, p.c, call.c, p.c, call.c,
                                    &heuristic.algo, workspace.get(), heuristic.workspaceSize, stream));
  if (!fused) bias_relu(p, bias, relu, stream);
}

#endif  // !EMBER_CUDA_EMULATED

// A span of n 16-bit values as float32 scratch.
template <class T>
const float* widened(const T* x, int64_t n, DeviceScratch& buf, cudaStream_t stream) {
  const Layout l = make_layout({n}, {1});
  cast<float, T>(x, l, buf.get<float>(), l, stream);
  return buf.get<float>();
}

// 16-bit operands under the hand-written SGEMM variants (which take float32): A, B and the
// bias widened to float32 scratch, the float32 GEMM, C rounded once. C must be contiguous.
template <class T>
void gemm_through_float(const GemmProblem<T, T>& p, const T* bias, bool relu, int device, cudaStream_t stream) {
  EMBER_CHECK(p.beta == 0 && p.ldc == p.n && (p.batch == 1 || p.stride_c == p.m * p.n),
              "gemm: 16-bit operands need a fresh, contiguous C");
  // The elements each operand's matrices span, from the first to the last.
  const int64_t span_a = (p.batch - 1) * p.stride_a + (p.trans_a ? (p.k - 1) * p.lda + p.m : (p.m - 1) * p.lda + p.k);
  const int64_t span_b = (p.batch - 1) * p.stride_b + (p.trans_b ? (p.n - 1) * p.ldb + p.k : (p.k - 1) * p.ldb + p.n);
  const int64_t nc = p.batch * p.m * p.n;
  DeviceScratch a(device, stream, span_a * sizeof(float)), b(device, stream, span_b * sizeof(float));
  DeviceScratch c(device, stream, nc * sizeof(float)), bf(device, stream, (bias ? p.n : 0) * sizeof(float));
  GemmProblem<float, float> q;
  q.m = p.m, q.n = p.n, q.k = p.k, q.batch = p.batch;
  q.a = widened(p.a, span_a, a, stream), q.lda = p.lda, q.trans_a = p.trans_a, q.stride_a = p.stride_a;
  q.b = widened(p.b, span_b, b, stream), q.ldb = p.ldb, q.trans_b = p.trans_b, q.stride_b = p.stride_b;
  q.c = c.get<float>(), q.ldc = p.n, q.stride_c = p.m * p.n;
  gemm<float>(q, bias ? widened(bias, p.n, bf, stream) : nullptr, relu, device, stream);
  const Layout l = make_layout({nc}, {1});
  cast<T, float>(c.get<float>(), l, p.c, l, stream);
}

}  // namespace

template <class T>
void gemm(const GemmProblem<T, T>& p, const T* bias, bool relu, int device, cudaStream_t stream) {
  check_gemm_problem(p, "gemm");
  EMBER_CHECK(p.alpha == 1 && (p.beta == 0 || p.beta == 1), "gemm: alpha ", p.alpha, " and beta ", p.beta,
              " (expected 1 and 0 or 1)");
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  const int variant = g_gemm.load();
  if constexpr (is_16bit_float_v<T>) {
#if !defined(EMBER_CUDA_EMULATED)
    if (variant <= 0 && p.k > 0) return gemm_cublaslt(p, bias, relu, device, stream);
#else
    // The emulated device's stand-in for cuBLASLt's 16-bit GEMM: it reads the 16-bit
    // operands as they are, so memory behaves as on a GPU (no float32 copies).
    if (variant <= 0) return gemm_plain(p, bias, relu, stream);
#endif
    return gemm_through_float(p, bias, relu, device, stream);
  }
  if (p.k == 0) return gemm_plain(p, bias, relu, stream);  // C (+ bias): no product to compute
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
#if !defined(EMBER_CUDA_EMULATED)
    if (variant <= 0 || std::is_same_v<T, double>) return gemm_cublaslt(p, bias, relu, device, stream);
#endif
    if constexpr (std::is_same_v<T, float>) {
      sgemm(variant > 0 ? SgemmVersion(variant) : kSgemmDefault, p, stream);
      return bias_relu(p, bias, relu, stream);
    }
  }
  (void)device;
  gemm_plain(p, bias, relu, stream);
}

template void gemm<float>(const GemmProblem<float, float>&, const float*, bool, int, cudaStream_t);
template void gemm<double>(const GemmProblem<double, double>&, const double*, bool, int, cudaStream_t);
template void gemm<__half>(const GemmProblem<__half, __half>&, const __half*, bool, int, cudaStream_t);
template void gemm<__nv_bfloat16>(const GemmProblem<__nv_bfloat16, __nv_bfloat16>&, const __nv_bfloat16*, bool, int,
                                  cudaStream_t);
template void gemm<uint8_t>(const GemmProblem<uint8_t, uint8_t>&, const uint8_t*, bool, int, cudaStream_t);
template void gemm<int32_t>(const GemmProblem<int32_t, int32_t>&, const int32_t*, bool, int, cudaStream_t);
template void gemm<int64_t>(const GemmProblem<int64_t, int64_t>&, const int64_t*, bool, int, cudaStream_t);

void set_gemm_variant(std::string_view name) { g_gemm = parse_gemm(name); }

std::string gemm_variant() {
  const int v = g_gemm.load();
  if (v == kAuto) return "auto";
  if (v == kCublasLt) return "cublaslt";
  return std::string("sgemm-") + sgemm_version_name(SgemmVersion(v));
}

}  // namespace ember::kernels::cuda
