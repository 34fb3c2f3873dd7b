// The recurrent cells: PyTorch's lstm_cell, gru_cell, rnn_tanh_cell and rnn_relu_cell,
// each its linear projections (core's linear, one GEMM each) and, for LSTM and GRU, one
// fused pointwise op (lstm_cell_pointwise, gru_cell_pointwise) whose forward and backward
// are a kernel each (the *_backward stubs of core/dispatch.h). The pointwise ops are
// once differentiable: their backward is a kernel with no derivative of its own.
//
// lstm_cell_pointwise returns two tensors that both take gradients. It records one
// output, h and c stacked as [2, B, H], and returns its two halves (views), so that one
// node receives both gradients (zero for the half that was not used).
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

void check_state(const char* op, const Tensor& t, const char* what, int64_t rows, int64_t cols, DType dtype) {
  detail::check_defined(op, t, what);
  EMBER_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": ", what, " must be [", rows, ", ",
              cols, "], got ", shape_str(t.shape()));
  EMBER_CHECK(t.dtype() == dtype, op, ": ", what, " is ", dtype_name(t.dtype()), " but the gates are ",
              dtype_name(dtype));
}

void check_gates(const char* op, const Tensor& t, const char* what, int64_t gates) {
  detail::check_defined(op, t, what);
  EMBER_CHECK(t.dim() == 2 && t.size(1) % gates == 0, op, ": ", what, " must be [B, ", gates,
              " H] (the gates side by side), got ", shape_str(t.shape()));
  EMBER_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64, op, ": expects float32 or float64, got ",
              dtype_name(t.dtype()));
}

// The checks every cell makes: x [B, I] or [I] (unbatched, as PyTorch allows), h [B, H]
// (or [H]), w_ih [G H, I], w_hh [G H, H], biases [G H] or undefined, one dtype and device.
void check_cell(const char* op, int64_t G, const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih, const Tensor& b_hh) {
  detail::check_defined(op, x);
  detail::check_defined(op, h, "hx");
  detail::check_defined(op, w_ih, "w_ih");
  detail::check_defined(op, w_hh, "w_hh");
  detail::check_same_device(op, {&x, &h, &w_ih, &w_hh, &b_ih, &b_hh});
  EMBER_CHECK(x.dim() == 1 || x.dim() == 2, op, ": input must be [B, input_size] or [input_size], got ",
              shape_str(x.shape()));
  EMBER_CHECK(h.dim() == x.dim(), op, ": hx must be ", x.dim() == 2 ? "[B, hidden_size]" : "[hidden_size]",
              " like the input ", shape_str(x.shape()), ", got ", shape_str(h.shape()));
  EMBER_CHECK(x.dim() == 1 || h.size(0) == x.size(0), op, ": input batch ", x.size(0), " != hx batch ", h.size(0));
  const int64_t H = h.size(-1), I = x.size(-1);
  EMBER_CHECK(w_hh.dim() == 2 && w_hh.size(0) == G * H && w_hh.size(1) == H, op, ": w_hh must be [", G * H, ", ", H,
              "] (", G, " gates of hidden size ", H, "), got ", shape_str(w_hh.shape()));
  EMBER_CHECK(w_ih.dim() == 2 && w_ih.size(0) == G * H && w_ih.size(1) == I, op, ": w_ih must be [", G * H, ", ", I,
              "] (", G, " gates of hidden size ", H, ", input size ", I, "), got ", shape_str(w_ih.shape()));
  for (const Tensor* b : {&b_ih, &b_hh})
    if (b->defined())
      EMBER_CHECK(b->dim() == 1 && b->size(0) == G * H, op, ": biases must be [", G * H, "], got ",
                  shape_str(b->shape()));
  EMBER_CHECK(b_ih.defined() == b_hh.defined(), op, ": b_ih and b_hh go together");
  for (const Tensor* t : {&h, &w_ih, &w_hh, &b_ih, &b_hh})
    if (t->defined())
      EMBER_CHECK(t->dtype() == x.dtype(), op, ": expected one dtype, got input ", dtype_name(x.dtype()), " and ",
                  dtype_name(t->dtype()));
}

Tensor batched(const Tensor& t) { return t.dim() == 1 ? t.unsqueeze(0) : t; }
Tensor unbatched_like(const Tensor& t, const Tensor& x) { return x.dim() == 1 ? t.squeeze(0) : t; }

}  // namespace

std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gates_in, const Tensor& c_in) {
  EMBER_OP_SITE("lstm_cell_pointwise");
  const char* op = "lstm_cell_pointwise";
  check_gates(op, gates_in, "gates", 4);
  detail::check_same_device(op, {&gates_in, &c_in});
  const int64_t B = gates_in.size(0), H = gates_in.size(1) / 4;
  check_state(op, c_in, "c", B, H, gates_in.dtype());
  const Tensor gates = gates_in.contiguous(), c_prev = c_in.contiguous();
  const TensorOptions opts{gates.dtype(), gates.device()};
  const Tensor hc = empty({2, B, H}, opts), act = empty({B, 4 * H}, opts);
  if (B * H > 0) kernels::lstm_cell_stub(gates.device(), hc.select(0, 0), hc.select(0, 1), act, gates.detach(),
                                         c_prev.detach());
  const Tensor out = autograd::record_once_differentiable(
      "lstm_cell_pointwise", {gates, c_prev}, hc,
      [act, c_prev = c_prev.detach(), c = hc.select(0, 1).detach()](const Tensor& g) {
        const Tensor gg = g.contiguous();
        Tensor dgates = empty_like(act), dc_prev = empty_like(c_prev);
        if (c.numel() > 0)
          kernels::lstm_cell_backward_stub(act.device(), dgates, dc_prev, gg.select(0, 0), gg.select(0, 1), act,
                                           c_prev, c);
        return std::vector<Tensor>{dgates, dc_prev};
      });
  return {out.select(0, 0), out.select(0, 1)};
}

Tensor gru_cell_pointwise(const Tensor& gi_in, const Tensor& gh_in, const Tensor& h_in) {
  EMBER_OP_SITE("gru_cell_pointwise");
  const char* op = "gru_cell_pointwise";
  check_gates(op, gi_in, "gi", 3);
  check_gates(op, gh_in, "gh", 3);
  detail::check_same_device(op, {&gi_in, &gh_in, &h_in});
  EMBER_CHECK(gi_in.shape() == gh_in.shape() && gi_in.dtype() == gh_in.dtype(), op, ": gi and gh must match, got ",
              dtype_name(gi_in.dtype()), " ", shape_str(gi_in.shape()), " and ", dtype_name(gh_in.dtype()), " ",
              shape_str(gh_in.shape()));
  const int64_t B = gi_in.size(0), H = gi_in.size(1) / 3;
  check_state(op, h_in, "h", B, H, gi_in.dtype());
  const Tensor gi = gi_in.contiguous(), gh = gh_in.contiguous(), h_prev = h_in.contiguous();
  const TensorOptions opts{gi.dtype(), gi.device()};
  const Tensor h = empty({B, H}, opts), saved = empty({B, 4 * H}, opts);
  if (B * H > 0) kernels::gru_cell_stub(gi.device(), h, saved, gi.detach(), gh.detach(), h_prev.detach());
  return autograd::record_once_differentiable("gru_cell_pointwise", {gi, gh, h_prev}, h,
                                              [saved, h_prev = h_prev.detach(), gi_shape = gi.shape()](const Tensor& g) {
    const TensorOptions o{saved.dtype(), saved.device()};
    Tensor dgi = empty(gi_shape, o), dgh = empty(gi_shape, o), dh_prev = empty_like(h_prev);
    if (h_prev.numel() > 0)
      kernels::gru_cell_backward_stub(saved.device(), dgi, dgh, dh_prev, g.contiguous(), saved, h_prev);
    return std::vector<Tensor>{dgi, dgh, dh_prev};
  });
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  EMBER_OP_SITE("lstm_cell");
  check_cell("lstm_cell", 4, x, h, w_ih, w_hh, b_ih, b_hh);
  detail::check_defined("lstm_cell", c, "cx");
  EMBER_CHECK(c.shape() == h.shape(), "lstm_cell: cx ", shape_str(c.shape()), " must match hx ",
              shape_str(h.shape()));
  const Tensor gates = add(linear(batched(x), w_ih, b_ih), linear(batched(h), w_hh, b_hh));
  auto [h1, c1] = lstm_cell_pointwise(gates, batched(c));
  return {unbatched_like(h1, x), unbatched_like(c1, x)};
}

Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh) {
  EMBER_OP_SITE("gru_cell");
  check_cell("gru_cell", 3, x, h, w_ih, w_hh, b_ih, b_hh);
  return unbatched_like(
      gru_cell_pointwise(linear(batched(x), w_ih, b_ih), linear(batched(h), w_hh, b_hh), batched(h)), x);
}

Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  EMBER_OP_SITE("rnn_tanh_cell");
  check_cell("rnn_tanh_cell", 1, x, h, w_ih, w_hh, b_ih, b_hh);
  return unbatched_like(tanh(add(linear(batched(x), w_ih, b_ih), linear(batched(h), w_hh, b_hh))), x);
}

Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  EMBER_OP_SITE("rnn_relu_cell");
  check_cell("rnn_relu_cell", 1, x, h, w_ih, w_hh, b_ih, b_hh);
  return unbatched_like(relu(add(linear(batched(x), w_ih, b_ih), linear(batched(h), w_hh, b_hh))), x);
}

}  // namespace ember
