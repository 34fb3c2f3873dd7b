// csr_linear through cuSPARSE's SpMM (csr_cusparse.cu, built only with the real CUDA
// backend; the emulated device has no cuSPARSE). Included by ops_sparse.cu alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/cuda/device.h"

namespace ember::kernels::cuda {

// out [M, N] (overwritten) = x [M, K] @ A^T + bias [N] (bias may be null), A [N, K] in CSR
// form (int32 indices); T float or double. `workspace(bytes)` returns a device tensor of
// at least that many bytes, kept alive until the call returns (stream-ordered reuse).
template <class T>
void cusparse_csr_linear(T* out, const T* x, const int32_t* row_ptr, const int32_t* col_idx, const T* values,
                         const T* bias, int64_t M, int64_t K, int64_t N, int64_t nnz,
                         const std::function<Tensor(size_t)>& workspace, int device, cudaStream_t stream);

}  // namespace ember::kernels::cuda
