// Group norm of a contiguous x [N, C, S] in G groups of Cg = C / G channels (each group's
// Cg * S values are contiguous), forward and backward; instance norm is G = C.
//
// Forward: one block per (n, g): the mean, then the sum of squared deviations from it
// (block reductions, block_reduce.cuh; two reads of the group, which L2 serves for the
// group sizes of CNNs), then y = x a + b with a = rstd weight[c], b = bias[c] - mean a.
// Bytes per element: 3 sizeof(T) at most (2 reads, 1 write).
// Backward, three kernels and no atomics (Note [Deterministic parameter gradients] in
// norm_backward.cuh): per (n, c) block, ds = sum dy x and db = sum dy over S; per (n, g)
// block, dx = a dy + bx x + c0 from the group's sums of weight ds and weight db; per
// channel thread, dweight = sum over n of rstd (ds - mean db) and dbias = sum over n of
// db, in order of n.
// Statistics and sums are in float (double for float64), as the CPU backend's.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

template <class T>
__global__ void __launch_bounds__(256) group_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                                         const T* __restrict__ bias, T* __restrict__ y,
                                                         compute_t<T>* __restrict__ mean_out,
                                                         compute_t<T>* __restrict__ rstd_out, int64_t C, int64_t S,
                                                         int64_t G, compute_t<T> eps) {
  using A = compute_t<T>;
  const int64_t ng = blockIdx.x, Cg = C / G, M = Cg * S, c0 = (ng % G) * Cg;
  const T* xg = x + ng * M;
  T* yg = y + ng * M;
  A s = 0;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += widen(xg[i]);
  const A mean = block_reduce(s, SumOp{}, A(0)) / A(M);
  A q = 0;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
    const A d = widen(xg[i]) - mean;
    q += d * d;
  }
  using std::sqrt;
  const A rstd = A(1) / sqrt(block_reduce(q, SumOp{}, A(0)) / A(M) + eps);  // exact, as the CPU's
  if (threadIdx.x == 0) {
    mean_out[ng] = mean;
    rstd_out[ng] = rstd;
  }
  for (int64_t c = 0; c < Cg; ++c) {
    const A a = weight != nullptr ? rstd * widen(weight[c0 + c]) : rstd;
    const A b = (bias != nullptr ? widen(bias[c0 + c]) : A(0)) - mean * a;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) yg[c * S + j] = round_to<T>(widen(xg[c * S + j]) * a + b);
  }
}

// ds, db [N * C] (compute type): the sums over S of dy x and dy of each (n, c) plane.
template <class T>
__global__ void __launch_bounds__(256) group_norm_plane_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                                    compute_t<T>* __restrict__ ds,
                                                                    compute_t<T>* __restrict__ db, int64_t S) {
  using A = compute_t<T>;
  const int64_t nc = blockIdx.x;
  A a = 0, b = 0;
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    const A g = widen(dy[nc * S + j]);
    a += g * widen(x[nc * S + j]);
    b += g;
  }
  a = block_reduce(a, SumOp{}, A(0));
  b = block_reduce(b, SumOp{}, A(0));
  if (threadIdx.x == 0) {
    ds[nc] = a;
    db[nc] = b;
  }
}

template <class T>
__global__ void __launch_bounds__(256) group_norm_input_grad_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const compute_t<T>* __restrict__ mean,
    const compute_t<T>* __restrict__ rstd, const T* __restrict__ weight, const compute_t<T>* __restrict__ ds,
    const compute_t<T>* __restrict__ db, T* __restrict__ dx, int64_t C, int64_t S, int64_t G) {
  using A = compute_t<T>;
  const int64_t ng = blockIdx.x, n = ng / G, Cg = C / G, c0 = (ng % G) * Cg;
  A sdb = 0, sds = 0;  // every thread sums the group's Cg channels, in order
  for (int64_t c = c0; c < c0 + Cg; ++c) {
    const A w = weight != nullptr ? widen(weight[c]) : A(1);
    sdb += w * db[n * C + c];
    sds += w * ds[n * C + c];
  }
  const A m = mean[ng], s = rstd[ng], inv = A(1) / A(Cg * S);
  const A mg = sdb * inv, mgx = s * (sds - m * sdb) * inv;
  const A bx = -s * s * mgx, cx = -s * mg + s * s * m * mgx;
  for (int64_t c = c0; c < c0 + Cg; ++c) {
    const A a = weight != nullptr ? s * widen(weight[c]) : s;
    const int64_t off = (n * C + c) * S;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
      dx[off + j] = round_to<T>(a * widen(dy[off + j]) + bx * widen(x[off + j]) + cx);
  }
}

template <class T>
__global__ void __launch_bounds__(256) group_norm_param_grad_kernel(
    const compute_t<T>* __restrict__ mean, const compute_t<T>* __restrict__ rstd, const compute_t<T>* __restrict__ ds,
    const compute_t<T>* __restrict__ db, T* __restrict__ dweight, T* __restrict__ dbias, int64_t N, int64_t C,
    int64_t G) {
  using A = compute_t<T>;
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t g = c / (C / G);
  A aw = 0, ab = 0;
  for (int64_t n = 0; n < N; ++n) {
    aw += rstd[n * G + g] * (ds[n * C + c] - mean[n * G + g] * db[n * C + c]);
    ab += db[n * C + c];
  }
  if (dweight != nullptr) dweight[c] = round_to<T>(aw);
  if (dbias != nullptr) dbias[c] = round_to<T>(ab);
}

// y, mean and rstd [N * G] from x; weight and bias [C] may be null.
template <class T>
void group_norm_forward(const T* x, const T* weight, const T* bias, T* y, compute_t<T>* mean, compute_t<T>* rstd,
                        int64_t N, int64_t C, int64_t S, int64_t G, double eps, cudaStream_t stream) {
  if (N * G == 0) return;
  launch<group_norm_kernel<T>>(LaunchConfig{dim3(unsigned(N * G)), dim3(kBlockThreads), 0}, stream, x, weight, bias,
                               y, mean, rstd, C, S, G, compute_t<T>(eps));
}

// dx [N, C, S] and dweight, dbias [C] (each may be null); ds and db: scratch of N * C
// compute-type values each.
template <class T>
void group_norm_backward(const T* dy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd, const T* weight,
                         T* dx, T* dweight, T* dbias, compute_t<T>* ds, compute_t<T>* db, int64_t N, int64_t C,
                         int64_t S, int64_t G, cudaStream_t stream) {
  if (N * C == 0) return;
  launch<group_norm_plane_sums_kernel<T>>(LaunchConfig{dim3(unsigned(N * C)), dim3(kBlockThreads), 0}, stream, dy, x,
                                          ds, db, S);
  if (dx != nullptr)
    launch<group_norm_input_grad_kernel<T>>(LaunchConfig{dim3(unsigned(N * G)), dim3(kBlockThreads), 0}, stream, dy,
                                            x, mean, rstd, weight, ds, db, dx, C, S, G);
  if (dweight != nullptr || dbias != nullptr)
    launch<group_norm_param_grad_kernel<T>>(
        LaunchConfig{dim3(unsigned((C + kBlockThreads - 1) / kBlockThreads)), dim3(kBlockThreads), 0}, stream, mean,
        rstd, ds, db, dweight, dbias, N, C, G);
}

}  // namespace ember::kernels::cuda
