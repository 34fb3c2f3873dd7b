// The recurrent cells' pointwise kernels (core/dispatch.h: lstm_cell, gru_cell and their
// backwards): one thread per (row, column) of the [B, H] state, grid-stride, applying the
// formulas of kernels/common/rnn_ops.h as the CPU backend does. float and double.
// Memory per element: LSTM forward reads 5 and writes 6 values, backward reads 8 and
// writes 5; GRU forward reads 7 and writes 5, backward reads 6 and writes 7. A step's
// GEMMs dominate; these only replace the ten pointwise launches of the composed cell.
// Below them, the other pointwise pieces of the layer loops (ops_rnn.cu, rnn_cudnn.cu):
// the simple RNN's activation and its backward, a sum, bias-gradient column sums, and a
// copy of a sequence with its steps reversed.
#pragma once

#include <cstdint>

#include "kernels/common/rnn_ops.h"
#include "kernels/cuda/elementwise.cuh"

namespace ember::kernels::cuda {

// h, c [B, H] out; act [B, 4H] out (activated gates); gates [B, 4H]; c_prev [B, H].
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    lstm_cell_kernel(T* h, T* c, T* act, const T* gates, const T* c_prev, int64_t rows, int64_t H) {
  const int64_t n = rows * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const T* g = gates + b * 4 * H + j;
    T* a = act + b * 4 * H + j;
    ops::LstmForward<ops::ScalarAct>{}(g[0], g[H], g[2 * H], g[3 * H], c_prev[e], a[0], a[H], a[2 * H], a[3 * H],
                                       c[e], h[e]);
  }
}
template <class T>
void lstm_cell(T* h, T* c, T* act, const T* gates, const T* c_prev, int64_t rows, int64_t H, cudaStream_t stream) {
  if (rows * H == 0) return;
  launch<lstm_cell_kernel<T>>(map_config(rows * H), stream, h, c, act, gates, c_prev, rows, H);
}

// dgates [B, 4H], dc_prev [B, H] out; dh, dc [B, H] (null: zero); act, c_prev, c as saved.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    lstm_cell_backward_kernel(T* dgates, T* dc_prev, const T* dh, const T* dc, const T* act, const T* c_prev,
                              const T* c, int64_t rows, int64_t H) {
  const int64_t n = rows * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const T* a = act + b * 4 * H + j;
    T* d = dgates + b * 4 * H + j;
    ops::LstmBackward<ops::ScalarAct>{}(dh ? dh[e] : T(0), dc ? dc[e] : T(0), a[0], a[H], a[2 * H], a[3 * H],
                                        c_prev[e], c[e], d[0], d[H], d[2 * H], d[3 * H], dc_prev[e]);
  }
}
template <class T>
void lstm_cell_backward(T* dgates, T* dc_prev, const T* dh, const T* dc, const T* act, const T* c_prev, const T* c,
                        int64_t rows, int64_t H, cudaStream_t stream) {
  if (rows * H == 0) return;
  launch<lstm_cell_backward_kernel<T>>(map_config(rows * H), stream, dgates, dc_prev, dh, dc, act, c_prev, c, rows,
                                       H);
}

// h [B, H], saved [B, 4H] (r, z, n, gh_n) out; gi, gh [B, 3H]; h_prev [B, H].
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    gru_cell_kernel(T* h, T* saved, const T* gi, const T* gh, const T* h_prev, int64_t rows, int64_t H) {
  const int64_t n = rows * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const T* x = gi + b * 3 * H + j;
    const T* y = gh + b * 3 * H + j;
    T* s = saved + b * 4 * H + j;
    s[3 * H] = y[2 * H];
    ops::GruForward<ops::ScalarAct>{}(x[0], x[H], x[2 * H], y[0], y[H], y[2 * H], h_prev[e], s[0], s[H], s[2 * H],
                                      h[e]);
  }
}
template <class T>
void gru_cell(T* h, T* saved, const T* gi, const T* gh, const T* h_prev, int64_t rows, int64_t H, cudaStream_t stream) {
  if (rows * H == 0) return;
  launch<gru_cell_kernel<T>>(map_config(rows * H), stream, h, saved, gi, gh, h_prev, rows, H);
}

// dgi, dgh [B, 3H], dh_prev [B, H] out; dh [B, H]; saved [B, 4H]; h_prev [B, H].
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    gru_cell_backward_kernel(T* dgi, T* dgh, T* dh_prev, const T* dh, const T* saved, const T* h_prev, int64_t rows,
                             int64_t H) {
  const int64_t n = rows * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const T* s = saved + b * 4 * H + j;
    T* x = dgi + b * 3 * H + j;
    T* y = dgh + b * 3 * H + j;
    T dr, dz;
    ops::GruBackward{}(dh[e], s[0], s[H], s[2 * H], s[3 * H], h_prev[e], dr, dz, x[2 * H], y[2 * H], dh_prev[e]);
    x[0] = dr, x[H] = dz, y[0] = dr, y[H] = dz;
  }
}
template <class T>
void gru_cell_backward(T* dgi, T* dgh, T* dh_prev, const T* dh, const T* saved, const T* h_prev, int64_t rows,
                       int64_t H, cudaStream_t stream) {
  if (rows * H == 0) return;
  launch<gru_cell_backward_kernel<T>>(map_config(rows * H), stream, dgi, dgh, dh_prev, dh, saved, h_prev, rows, H);
}

// ----- the pieces of the hand-written layer loop (ops_rnn.cu) beside the cells -----

// out [n] = the sums of src [rows, n]'s columns: one thread per column, rows in order
// (deterministic), neighbouring threads reading neighbouring columns. For the biases'
// gradients: n = G H columns, rows = T B.
template <class T>
__global__ void __launch_bounds__(kBlockThreads) rnn_column_sum_kernel(T* out, const T* src, int64_t rows, int64_t n) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += int64_t(gridDim.x) * blockDim.x) {
    T s = T(0);
    for (int64_t r = 0; r < rows; ++r) s += src[r * n + c];
    out[c] = s;
  }
}
template <class T>
void rnn_column_sum(T* out, const T* src, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch<rnn_column_sum_kernel<T>>(map_config(n), stream, out, src, rows, n);
}

// dst [T, N] = src [T, N] with the steps in reverse order (dst's row t is src's row T-1-t):
// the reverse direction's inputs and outputs for cuDNN, which runs steps forward only.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_reverse_steps_kernel(T* dst, const T* src, int64_t steps, int64_t N) {
  const int64_t n = steps * N;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / N;
    dst[e] = src[(steps - 1 - t) * N + (e - t * N)];
  }
}
template <class T>
void rnn_reverse_steps(T* dst, const T* src, int64_t steps, int64_t N, cudaStream_t stream) {
  if (steps * N == 0) return;
  launch<rnn_reverse_steps_kernel<T>>(map_config(steps * N), stream, dst, src, steps, N);
}

}  // namespace ember::kernels::cuda
