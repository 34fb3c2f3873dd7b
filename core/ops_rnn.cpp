// The recurrent cells: PyTorch's lstm_cell, gru_cell, rnn_tanh_cell and rnn_relu_cell,
// each its linear projections (core's linear, one GEMM each) and, for LSTM and GRU, one
// fused pointwise op (lstm_cell_pointwise, gru_cell_pointwise) whose forward and backward
// are a kernel each (the *_backward stubs of core/dispatch.h). The pointwise ops are
// once differentiable: their backward is a kernel with no derivative of its own.
//
// lstm_cell_pointwise returns two tensors that both take gradients. It records one
// output, h and c stacked as [2, B, H], and returns its two halves (views), so that one
// node receives both gradients (zero for the half that was not used).
//
// Below them, rnn_layer (core/rnn_sequence.h): a whole layer and direction per call of
// the rnn_layer stub, what nn::RNN, nn::LSTM and nn::GRU run (Note [RNN layer stub]).
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"
#include "core/rnn_sequence.h"

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

// ----- one layer over a whole sequence (core/rnn_sequence.h, Note [RNN layer stub]) -----
namespace ember {
namespace {

int64_t gates_of(kernels::RnnCell cell) {
  return cell == kernels::RnnCell::kLstm ? 4 : cell == kernels::RnnCell::kGru ? 3 : 1;
}

void check_layer(const char* op, kernels::RnnCell cell, const Tensor& x, const Tensor& h0, const Tensor& c0,
                 const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  detail::check_defined(op, x);
  detail::check_defined(op, h0, "h0");
  detail::check_defined(op, w_ih, "w_ih");
  detail::check_defined(op, w_hh, "w_hh");
  detail::check_same_device(op, {&x, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh});
  const int64_t G = gates_of(cell);
  EMBER_CHECK(x.dim() == 3, op, ": input must be [T, B, input_size], got ", shape_str(x.shape()));
  EMBER_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat64, op, ": expects float32 or float64, got ",
              dtype_name(x.dtype()));
  EMBER_CHECK(h0.dim() == 2 && h0.size(0) == x.size(1), op, ": h0 must be [", x.size(1), ", hidden_size] for input ",
              shape_str(x.shape()), ", got ", shape_str(h0.shape()));
  const int64_t H = h0.size(1), I = x.size(2);
  EMBER_CHECK(H > 0 && I > 0, op, ": input_size and hidden_size must be positive, got ", I, " and ", H);
  EMBER_CHECK(w_ih.dim() == 2 && w_ih.size(0) == G * H && w_ih.size(1) == I, op, ": w_ih must be [", G * H, ", ", I,
              "] (", G, " gates of hidden size ", H, ", input size ", I, "), got ", shape_str(w_ih.shape()));
  EMBER_CHECK(w_hh.dim() == 2 && w_hh.size(0) == G * H && w_hh.size(1) == H, op, ": w_hh must be [", G * H, ", ", H,
              "] (", G, " gates of hidden size ", H, "), got ", shape_str(w_hh.shape()));
  EMBER_CHECK(b_ih.defined() == b_hh.defined(), op, ": b_ih and b_hh go together");
  for (const Tensor* b : {&b_ih, &b_hh})
    if (b->defined())
      EMBER_CHECK(b->dim() == 1 && b->size(0) == G * H, op, ": biases must be [", G * H, "], got ",
                  shape_str(b->shape()));
  if (cell == kernels::RnnCell::kLstm) {
    detail::check_defined(op, c0, "c0");
    EMBER_CHECK(c0.shape() == h0.shape(), op, ": c0 ", shape_str(c0.shape()), " must match h0 ",
                shape_str(h0.shape()));
  } else {
    EMBER_CHECK(!c0.defined(), op, ": c0 is the LSTM's only");
  }
  for (const Tensor* t : {&h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh})
    if (t->defined())
      EMBER_CHECK(t->dtype() == x.dtype(), op, ": expected one dtype, got input ", dtype_name(x.dtype()), " and ",
                  dtype_name(t->dtype()));
}

Tensor contiguous_or_none(const Tensor& t) { return t.defined() ? t.contiguous() : t; }
Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : t; }

// The bytes of the backend's reserve. A meta tensor has the CPU's figure (the hand-written
// loops' activations): cuDNN's size would need a device to ask.
int64_t reserve_bytes(const Tensor& x, int64_t H, const kernels::RnnLayerParams& p) {
  const DeviceType d = x.device().is_meta() ? DeviceType::CPU : x.device().type;
  return kernels::rnn_layer_reserve_stub.get(d)(x, H, p);
}

}  // namespace

RnnLayerOutput rnn_layer(const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in, const Tensor& w_ih_in,
                         const Tensor& w_hh_in, const Tensor& b_ih_in, const Tensor& b_hh_in, kernels::RnnCell cell,
                         bool reverse) {
  EMBER_OP_SITE("rnn_layer");
  const char* op = "rnn_layer";
  check_layer(op, cell, x_in, h0_in, c0_in, w_ih_in, w_hh_in, b_ih_in, b_hh_in);
  const int64_t T = x_in.size(0), B = x_in.size(1), H = h0_in.size(1);
  if (T == 0) return {empty({0, B, H}, {x_in.dtype(), x_in.device()}), h0_in, c0_in};
  const Tensor x = x_in.contiguous(), h0 = h0_in.contiguous(), c0 = contiguous_or_none(c0_in);
  const Tensor w_ih = w_ih_in.contiguous(), w_hh = w_hh_in.contiguous();
  const Tensor b_ih = contiguous_or_none(b_ih_in), b_hh = contiguous_or_none(b_hh_in);
  const bool lstm = cell == kernels::RnnCell::kLstm;
  const kernels::RnnLayerParams p{cell, reverse, autograd::needs_grad({&x, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh})};
  const Device dev = x.device();
  // y in rows 0 .. T-1, h_n in row T, c_n in row T + 1.
  const Tensor out = empty({T + (lstm ? 2 : 1), B, H}, {x.dtype(), dev});
  const Tensor reserve =
      p.training ? empty({reserve_bytes(x, H, p)}, {kUInt8, dev}) : Tensor();
  if (B > 0)
    kernels::rnn_layer_stub(dev, out.narrow(0, 0, T), out.select(0, T), lstm ? out.select(0, T + 1) : Tensor(),
                                      reserve, x.detach(), h0.detach(), detached(c0), w_ih.detach(), w_hh.detach(),
                                      detached(b_ih), detached(b_hh), p);
  if (!p.training) return {out.narrow(0, 0, T), out.select(0, T), lstm ? out.select(0, T + 1) : Tensor()};
  const Tensor rec = autograd::record_once_differentiable(
      "rnn_layer", {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, out,
      [x = x.detach(), h0 = h0.detach(), c0 = detached(c0), w_ih = w_ih.detach(), w_hh = w_hh.detach(),
       b_ih = detached(b_ih), b_hh = detached(b_hh), y = out.narrow(0, 0, T).detach(), reserve, p](const Tensor& g_in) {
        const int64_t T = x.size(0), B = x.size(1);
        const Tensor g = g_in.contiguous();
        const bool lstm = p.cell == kernels::RnnCell::kLstm;
        auto grad_like = [](size_t i, const Tensor& t) {
          return t.defined() && autograd::needs_input_grad(i) ? empty_like(t) : Tensor();
        };
        const Tensor dx = grad_like(0, x), dh0 = grad_like(1, h0), dc0 = grad_like(2, c0);
        const Tensor dw_ih = grad_like(3, w_ih), dw_hh = grad_like(4, w_hh);
        const Tensor db_ih = grad_like(5, b_ih), db_hh = grad_like(6, b_hh);
        if (B > 0) {
          kernels::rnn_layer_backward_stub(x.device(), dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, g.narrow(0, 0, T),
                                                            g.select(0, T), lstm ? g.select(0, T + 1) : Tensor(), x, h0,
                                                            c0, w_ih, w_hh, b_ih, b_hh, y, reserve, p);
        } else {  // no batch rows: the weights' gradients are zero, the states' empty
          for (const Tensor& t : {dw_ih, dw_hh, db_ih, db_hh})
            if (t.defined()) t.zero_();
        }
        return std::vector<Tensor>{dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh};
      });
  return {rec.narrow(0, 0, T), rec.select(0, T), lstm ? rec.select(0, T + 1) : Tensor()};
}

}  // namespace ember
