// The recurrence of one recurrent layer and direction over a whole sequence, as one
// autograd op each (what nn::LSTM and nn::GRU run, layers/recurrent.cpp). The input
// projections x W_ih^T + b are computed beforehand for all steps in one GEMM; here each
// step is one GEMM h W_hh^T and the cell's fused pointwise kernel. The backward runs the
// steps in reverse with the cells' backward kernels into one [T, B, G H] gradient, then
// gives W_hh's gradient as ONE GEMM over all steps (and b_hh's as one sum), where a graph
// of per-step ops would run T small GEMMs, T accumulations into W_hh's gradient and T
// zero-filled [T, B, G H] gradients of the projection's step slices. Once differentiable:
// a second derivative through it is an error naming it.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace ember {

// gi [T, B, 4H] (x W_ih^T + b_ih + b_hh, gates i, f, g, o), h0 and c0 [B, H], w_hh [4H, H];
// steps in order t = 0 .. T-1, or T-1 .. 0 when reverse. Returns hs [T, B, H] (h after the
// step at t, at t) and c after the last step [B, H].
std::pair<Tensor, Tensor> lstm_sequence(const Tensor& gi, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                                        bool reverse);
// gi [T, B, 3H] (x W_ih^T + b_ih, gates r, z, n), h0 [B, H], w_hh [3H, H], b_hh [3H] or
// undefined. Returns hs [T, B, H].
Tensor gru_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse);
// gi [T, B, H] (x W_ih^T + b_ih + b_hh), h0 [B, H], w_hh [H, H]: h = tanh(gi_t + h W_hh^T),
// or relu. Composed from core's ops (no kernel of its own). Returns hs [T, B, H].
Tensor rnn_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, bool relu, bool reverse);

}  // namespace ember
