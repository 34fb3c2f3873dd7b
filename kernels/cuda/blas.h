// The CUDA backend's GEMM, shared by the matmul, linear and conv2d slots: row-major,
// batched, in GemmProblem's terms (gemm_common.cuh), with an optional epilogue
// (+ bias[n] per output column, then ReLU). Which kernel runs is the GEMM variant
// (variants.h): cuBLASLt, with bias and ReLU in its epilogue, or the hand-written SGEMM
// followed by an epilogue pass; types the SGEMM does not cover run a plain kernel.
#pragma once

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm_common.cuh"

namespace ember::kernels::cuda {

// C = op(A) op(B) (+ C when p.beta == 1) (+ bias) (relu), on `stream` of `device` (made
// current by the caller). p.alpha must be 1 and p.beta 0 or 1. T: float, double, uint8_t,
// int32_t or int64_t (bias and relu: floating T only).
template <class T>
void gemm(const GemmProblem<T, T>& p, const T* bias, bool relu, int device, cudaStream_t stream);

}  // namespace ember::kernels::cuda
