// One recurrent layer in one direction over a whole sequence, as one autograd op (what
// nn::RNN, nn::LSTM and nn::GRU run per layer and direction, layers/recurrent.cpp).
//
// Note [RNN layer stub]. The op is one call of the rnn_layer stub (core/dispatch.h), and
// its backward one call of rnn_layer_backward: a whole layer is the unit cuDNN's RNN API
// runs, so a backend can hand it to cuDNN, and where it runs its own loop (the CPU; the
// hand-written CUDA variant) the loop stays inside the kernel with no per-step graph or
// allocation: the input projection x W_ih^T for all steps in one GEMM, then per step one
// GEMM h W_hh^T and the cell's fused pointwise kernel; the backward runs the steps in
// reverse and gives W_ih's and W_hh's gradients as one GEMM each over all steps (a graph
// of per-step ops would run T small GEMMs, T accumulations into W_hh's gradient and T
// zero-filled gradients of the projection's step slices). What backward needs besides
// the inputs and y is the backend's `reserve`, sized by rnn_layer_reserve. The op records
// one output, y, h_n and c_n stacked as [T + 1 (+ 1 for c_n), B, H], and returns views of
// it, so that one node receives all three gradients. Once differentiable: a second
// derivative through it is an error naming it.
#pragma once

#include "core/dispatch.h"
#include "core/tensor.h"

namespace ember {

struct RnnLayerOutput {
  Tensor y;    // [T, B, H]: h after the step at t, at t
  Tensor h_n;  // [B, H]: h after the last step (t = T-1, or t = 0 when reverse)
  Tensor c_n;  // [B, H]: the LSTM's cell state after the last step; undefined otherwise
};

// x [T, B, I], h0 [B, H], c0 [B, H] (LSTM only; undefined otherwise), w_ih [G H, I], w_hh
// [G H, H], b_ih and b_hh [G H] (both or neither), G = 4 (LSTM: i, f, g, o), 3 (GRU: r,
// z, n) or 1 (RNN), PyTorch's gate orders and formulas. Steps run t = 0 .. T-1, or
// T-1 .. 0 when reverse. float32 or float64, one dtype and device.
RnnLayerOutput rnn_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                         const Tensor& b_ih, const Tensor& b_hh, kernels::RnnCell cell, bool reverse);

}  // namespace ember
