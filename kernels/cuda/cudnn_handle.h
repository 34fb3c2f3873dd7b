// What every cuDNN caller of the CUDA backend shares (conv_cudnn.cu, rnn_cudnn.cu): the
// EMBER_CUDA_CHECK overload for cuDNN's status, and one cuDNN handle per device and thread.
// CUDA-only: included by .cu files alone (DESIGN.md: no public header includes cuDNN).
#pragma once

#include <map>

#include <cudnn.h>

#include "base/cuda_check.h"

namespace ember::detail {
// EMBER_CUDA_CHECK's overload for cuDNN's status (base/cuda_check.h).
inline void check_cuda(cudnnStatus_t st, const char* call, const char* file, int line) {
  if (st != CUDNN_STATUS_SUCCESS)
    EMBER_FAIL("cuDNN call ", call, " failed at ", file, ":", line, ": ", cudnnGetErrorString(st));
}
}  // namespace ember::detail

namespace ember::kernels::cuda {

// This thread's handle for `device`, bound to `stream` (a handle must not be used by two
// threads at once). Never destroyed: at exit the CUDA runtime may be torn down before
// thread_local destructors run (PyTorch leaks its handles for the same reason).
inline cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  thread_local std::map<int, cudnnHandle_t> handles;
  cudnnHandle_t& h = handles[device];
  if (!h) EMBER_CUDA_CHECK(cudnnCreate(&h));
  EMBER_CUDA_CHECK(cudnnSetStream(h, stream));
  return h;
}

}  // namespace ember::kernels::cuda
