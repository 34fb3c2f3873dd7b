// The one check for CUDA calls, shared by the folders that make them: memory/'s device and
// pinned sources and the CUDA backend (kernels/cuda/). CUDA-only: included by .cu files
// and CUDA-only sources, never by a public header. Under the host compiler (the emulated
// device) include it after kernels/emu/emu.h, whose qualifiers the toolkit's headers keep.
//
//   EMBER_CUDA_CHECK(cudaMalloc(&p, bytes));   raises ember::Error on failure
//   EMBER_CUDA_WARN(cudaFree(p));              in destructors and noexcept paths
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>

#include "base/error.h"

namespace ember::detail {

// Raises ember::Error naming the call, where it was made and the runtime's own message.
[[noreturn]] inline void cuda_failed(cudaError_t err, const char* call, const char* file, int line) {
  const char* name = cudaGetErrorName(err);
  const char* message = cudaGetErrorString(err);
  cudaGetLastError();  // clear a non-sticky error, so the next call does not report it again
  EMBER_FAIL(call, " failed at ", file, ":", line, ": ", name, ": ", message);
}

// EMBER_CUDA_CHECK's target. Each CUDA library's status type has its overload here, in
// ember::detail, beside that library's header (cuBLASLt's in kernels/cuda/blas.cu, cuDNN's
// in conv_cudnn.cu, cuSPARSE's in csr_cusparse.cu).
inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) [[unlikely]]
    cuda_failed(err, call, file, line);
}

// Where throwing is not an option (a destructor, a noexcept path), the same message as a
// warning on stderr, as ember's other destructors report; returns whether the call succeeded.
inline bool warn_cuda(cudaError_t err, const char* call, const char* file, int line) noexcept {
  if (err == cudaSuccess) [[likely]]
    return true;
  std::fprintf(stderr, "ember: warning: %s failed at %s:%d: %s: %s\n", call, file, line, cudaGetErrorName(err),
               cudaGetErrorString(err));
  cudaGetLastError();
  return false;
}

}  // namespace ember::detail

#define EMBER_CUDA_CHECK(call) ::ember::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define EMBER_CUDA_WARN(call) ::ember::detail::warn_cuda((call), #call, __FILE__, __LINE__)
