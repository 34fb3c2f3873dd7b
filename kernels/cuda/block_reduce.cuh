// Warp and block reductions shared by the reduction, softmax and normalization kernels.
// Deterministic: the order of the additions depends only on the block's shape, never on
// timing. Every thread of the block must call block_reduce (it has barriers).
#pragma once

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

struct SumOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// max/min that propagate NaN, as the CPU backend's reductions do.
struct MaxOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
};
struct MinOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
};

// Butterfly over the 32 lanes of a full warp: every lane ends with the result.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int m = 16; m > 0; m /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// The reduction of v over the block, returned to every thread. blockDim.x must be a
// multiple of 32 (every launch configuration in kernels/cuda uses whole warps) and
// blockDim.y == blockDim.z == 1. `identity` pads the unused warp slots.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? partial[lane] : identity;
  return warp_reduce(v, op);
}

}  // namespace ember::kernels::cuda
