// csr_linear through cuSPARSE's SpMM (csr_cusparse.h): out^T [N, M] = A [N, K] @ x^T
// [K, M], where the row-major x [M, K] and out [M, N] are, unchanged, the column-major
// x^T and out^T that cuSPARSE takes. Bias: out is first filled with it, then beta = 1.
#include "kernels/cuda/csr_cusparse.h"

#include <cusparse.h>

#include <map>
#include <type_traits>

#include "kernels/cuda/csr.cuh"

namespace ember::detail {
// EMBER_CUDA_CHECK's overload for cuSPARSE's status (base/cuda_check.h).
inline void check_cuda(cusparseStatus_t st, const char* call, const char* file, int line) {
  if (st != CUSPARSE_STATUS_SUCCESS)
    EMBER_FAIL("cuSPARSE call ", call, " failed at ", file, ":", line, ": ", cusparseGetErrorString(st), " (", int(st),
               ")");
}
}  // namespace ember::detail

namespace ember::kernels::cuda {

namespace {

// One handle per device and thread, bound to the call's stream: cuSPARSE's thread-safety
// rules forbid two threads using one handle at once, and each call sets its stream on it.
// Never destroyed (as conv_cudnn.cu's cuDNN handles: the runtime may be gone at exit).
cusparseHandle_t sparse_handle(int device, cudaStream_t stream) {
  thread_local std::map<int, cusparseHandle_t> handles;
  cusparseHandle_t& h = handles[device];
  if (!h) EMBER_CUDA_CHECK(cusparseCreate(&h));
  EMBER_CUDA_CHECK(cusparseSetStream(h, stream));
  return h;
}

// Owns the descriptors of one call.
struct SpmmCall {
  cusparseSpMatDescr_t a = nullptr;
  cusparseDnMatDescr_t b = nullptr, c = nullptr;
  ~SpmmCall() {
    if (c) cusparseDestroyDnMat(c);
    if (b) cusparseDestroyDnMat(b);
    if (a) cusparseDestroySpMat(a);
  }
};

}  // namespace

template <class T>
void cusparse_csr_linear(T* out, const T* x, const int32_t* row_ptr, const int32_t* col_idx, const T* values,
                         const T* bias, int64_t M, int64_t K, int64_t N, int64_t nnz,
                         const std::function<Tensor(size_t)>& workspace, int device, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  constexpr cudaDataType_t type = std::is_same_v<T, double> ? CUDA_R_64F : CUDA_R_32F;
  cusparseHandle_t h = sparse_handle(device, stream);
  const T alpha = T(1), beta = bias ? T(1) : T(0);
  if (bias) launch<csr_bias_rows_kernel<T>>(csr_bias_rows_config(M * N), stream, out, bias, M, N);
  SpmmCall call;
  EMBER_CUDA_CHECK(cusparseCreateCsr(&call.a, N, K, nnz, const_cast<int32_t*>(row_ptr), const_cast<int32_t*>(col_idx),
                                     const_cast<T*>(values), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                     CUSPARSE_INDEX_BASE_ZERO, type));
  EMBER_CUDA_CHECK(cusparseCreateDnMat(&call.b, K, M, K, const_cast<T*>(x), type, CUSPARSE_ORDER_COL));
  EMBER_CUDA_CHECK(cusparseCreateDnMat(&call.c, N, M, N, out, type, CUSPARSE_ORDER_COL));
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t bytes = 0;
  EMBER_CUDA_CHECK(cusparseSpMM_bufferSize(h, op, op, &alpha, call.a, call.b, &beta, call.c, type,
                                           CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
  const Tensor ws = workspace(bytes);
  EMBER_CUDA_CHECK(cusparseSpMM(h, op, op, &alpha, call.a, call.b, &beta, call.c, type, CUSPARSE_SPMM_ALG_DEFAULT,
                                ws.data_ptr()));
}

template void cusparse_csr_linear<float>(float*, const float*, const int32_t*, const int32_t*, const float*,
                                         const float*, int64_t, int64_t, int64_t, int64_t,
                                         const std::function<Tensor(size_t)>&, int, cudaStream_t);
template void cusparse_csr_linear<double>(double*, const double*, const int32_t*, const int32_t*, const double*,
                                          const double*, int64_t, int64_t, int64_t, int64_t,
                                          const std::function<Tensor(size_t)>&, int, cudaStream_t);

}  // namespace ember::kernels::cuda
