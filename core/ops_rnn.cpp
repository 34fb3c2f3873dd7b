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

// ----- whole-sequence recurrences (core/rnn_sequence.h) -----
namespace ember {
namespace {

void check_sequence(const char* op, int64_t G, const Tensor& gi, const Tensor& h0, const Tensor& w_hh) {
  detail::check_defined(op, gi, "gi");
  detail::check_defined(op, h0, "h0");
  detail::check_defined(op, w_hh, "w_hh");
  EMBER_CHECK(gi.dim() == 3 && h0.dim() == 2 && gi.size(1) == h0.size(0) && gi.size(2) == G * h0.size(1), op,
              ": gi must be [T, B, ", G, " H] for h0 [B, H], got gi ", shape_str(gi.shape()), " and h0 ",
              shape_str(h0.shape()));
  const int64_t H = h0.size(1);
  EMBER_CHECK(w_hh.dim() == 2 && w_hh.size(0) == G * H && w_hh.size(1) == H, op, ": w_hh must be [", G * H, ", ", H,
              "], got ", shape_str(w_hh.shape()));
  EMBER_CHECK(gi.dtype() == kFloat32 || gi.dtype() == kFloat64, op, ": expects float32 or float64, got ",
              dtype_name(gi.dtype()));
  EMBER_CHECK(h0.dtype() == gi.dtype() && w_hh.dtype() == gi.dtype(), op, ": expected one dtype, got gi ",
              dtype_name(gi.dtype()), ", h0 ", dtype_name(h0.dtype()), ", w_hh ", dtype_name(w_hh.dtype()));
}

// The state each step started from, in time order: [T, B, H] from hs (time order) and
// h0: h0 then hs[0 .. T-2] forward; hs[1 .. T-1] then h0 reversed.
Tensor previous_states(const Tensor& hs, const Tensor& h0, bool reverse) {
  const int64_t T = hs.size(0);
  if (T == 1) return h0.unsqueeze(0);
  return reverse ? cat({hs.narrow(0, 1, T - 1), h0.unsqueeze(0)}, 0) : cat({h0.unsqueeze(0), hs.narrow(0, 0, T - 1)}, 0);
}

}  // namespace

std::pair<Tensor, Tensor> lstm_sequence(const Tensor& gi_in, const Tensor& h0_in, const Tensor& c0_in,
                                        const Tensor& w_hh, bool reverse) {
  EMBER_OP_SITE("lstm_sequence");
  const char* op = "lstm_sequence";
  check_sequence(op, 4, gi_in, h0_in, w_hh);
  detail::check_same_device(op, {&gi_in, &h0_in, &c0_in, &w_hh});
  check_state(op, c0_in, "c0", h0_in.size(0), h0_in.size(1), gi_in.dtype());
  const int64_t T = gi_in.size(0), B = h0_in.size(0), H = h0_in.size(1);
  EMBER_CHECK(T > 0, op, ": needs at least one step");
  const Tensor gi = gi_in.contiguous(), h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const TensorOptions opts{gi.dtype(), gi.device()};
  // out: hs in rows 0 .. T-1, c_T in row T. cs: the cell state before step i at row i.
  const Tensor out = empty({T + 1, B, H}, opts), cs = empty({T + 1, B, H}, opts), act = empty({T, B, 4 * H}, opts);
  {
    NoGradGuard no_grad;
    cs.select(0, 0).copy_(c0.detach());
    Tensor h = h0.detach();
    const Tensor w = w_hh.detach();
    for (int64_t i = 0; i < T; ++i) {
      const int64_t t = reverse ? T - 1 - i : i;
      const Tensor gates = add(gi.detach().select(0, t), linear(h, w));
      h = out.select(0, t);
      if (B * H > 0) kernels::lstm_cell_stub(gi.device(), h, cs.select(0, i + 1), act.select(0, i), gates, cs.select(0, i));
    }
    out.select(0, T).copy_(cs.select(0, T));
  }
  const Tensor rec = autograd::record_once_differentiable(
      "lstm_sequence", {gi, h0, c0, w_hh}, out,
      [act, cs, hs = out.narrow(0, 0, T).detach(), h0 = h0.detach(), w = w_hh.detach(), reverse](const Tensor& g_in) {
        const int64_t T = act.size(0);
        const Tensor g = g_in.contiguous();
        Tensor dgates = empty_like(act), dh = zeros_like(h0), dc = g.select(0, T).contiguous();
        for (int64_t i = T - 1; i >= 0; --i) {
          const int64_t t = reverse ? T - 1 - i : i;
          const Tensor dht = add(g.select(0, t), dh), dc_prev = empty_like(dc);
          if (dc.numel() > 0)
            kernels::lstm_cell_backward_stub(act.device(), dgates.select(0, t), dc_prev, dht, dc, act.select(0, i),
                                             cs.select(0, i), cs.select(0, i + 1));
          dc = dc_prev;
          dh = matmul(dgates.select(0, t), w);
        }
        const int64_t H = h0.size(1);
        const Tensor dw = autograd::needs_input_grad(3)
                              ? matmul(dgates.reshape({-1, 4 * H}).t(), previous_states(hs, h0, reverse).reshape({-1, H}))
                              : Tensor();
        return std::vector<Tensor>{dgates, dh, dc, dw};
      });
  return {rec.narrow(0, 0, T), rec.select(0, T)};
}

Tensor gru_sequence(const Tensor& gi_in, const Tensor& h0_in, const Tensor& w_hh, const Tensor& b_hh, bool reverse) {
  EMBER_OP_SITE("gru_sequence");
  const char* op = "gru_sequence";
  check_sequence(op, 3, gi_in, h0_in, w_hh);
  detail::check_same_device(op, {&gi_in, &h0_in, &w_hh, &b_hh});
  const int64_t T = gi_in.size(0), B = h0_in.size(0), H = h0_in.size(1);
  EMBER_CHECK(T > 0, op, ": needs at least one step");
  EMBER_CHECK(!b_hh.defined() || (b_hh.dim() == 1 && b_hh.size(0) == 3 * H && b_hh.dtype() == gi_in.dtype()), op,
              ": b_hh must be ", dtype_name(gi_in.dtype()), " [", 3 * H, "], got ", dtype_name(b_hh.dtype()), " ",
              shape_str(b_hh.shape()));
  const Tensor gi = gi_in.contiguous(), h0 = h0_in.contiguous();
  const TensorOptions opts{gi.dtype(), gi.device()};
  const Tensor hs = empty({T, B, H}, opts), saved = empty({T, B, 4 * H}, opts);
  {
    NoGradGuard no_grad;
    Tensor h = h0.detach();
    const Tensor w = w_hh.detach(), b = b_hh.defined() ? b_hh.detach() : Tensor();
    for (int64_t i = 0; i < T; ++i) {
      const int64_t t = reverse ? T - 1 - i : i;
      const Tensor gh = linear(h, w, b);
      if (B * H > 0) kernels::gru_cell_stub(gi.device(), hs.select(0, t), saved.select(0, i), gi.detach().select(0, t), gh, h);
      h = hs.select(0, t);
    }
  }
  return autograd::record_once_differentiable(
      "gru_sequence", {gi, h0, w_hh, b_hh}, hs,
      [saved, hs = hs.detach(), h0 = h0.detach(), w = w_hh.detach(), has_b = b_hh.defined(),
       reverse](const Tensor& g_in) {
        const int64_t T = saved.size(0), H = h0.size(1);
        const Tensor g = g_in.contiguous();
        const Tensor dgi = empty({T, h0.size(0), 3 * H}, {saved.dtype(), saved.device()}), dgh = empty_like(dgi);
        Tensor dh = zeros_like(h0);
        for (int64_t i = T - 1; i >= 0; --i) {
          const int64_t t = reverse ? T - 1 - i : i;
          const Tensor h_prev = i == 0 ? h0 : hs.select(0, reverse ? t + 1 : t - 1);
          const Tensor dht = add(g.select(0, t), dh), dh_prev = empty_like(h0);
          if (h0.numel() > 0)
            kernels::gru_cell_backward_stub(saved.device(), dgi.select(0, t), dgh.select(0, t), dh_prev, dht,
                                            saved.select(0, i), h_prev);
          dh = add(dh_prev, matmul(dgh.select(0, t), w));
        }
        const Tensor rows = dgh.reshape({-1, 3 * H});
        const Tensor dw = autograd::needs_input_grad(2)
                              ? matmul(rows.t(), previous_states(hs, h0, reverse).reshape({-1, H}))
                              : Tensor();
        return std::vector<Tensor>{dgi, dh, dw, has_b ? sum(rows, {0}) : Tensor()};
      });
}

Tensor rnn_sequence(const Tensor& gi_in, const Tensor& h0_in, const Tensor& w_hh, bool relu_act, bool reverse) {
  EMBER_OP_SITE("rnn_sequence");
  const char* op = "rnn_sequence";
  check_sequence(op, 1, gi_in, h0_in, w_hh);
  detail::check_same_device(op, {&gi_in, &h0_in, &w_hh});
  const int64_t T = gi_in.size(0);
  EMBER_CHECK(T > 0, op, ": needs at least one step");
  const Tensor gi = gi_in.contiguous(), h0 = h0_in.contiguous();
  const Tensor hs = empty(gi.shape(), {gi.dtype(), gi.device()});
  {
    NoGradGuard no_grad;
    Tensor h = h0.detach();
    const Tensor w = w_hh.detach();
    for (int64_t i = 0; i < T; ++i) {
      const int64_t t = reverse ? T - 1 - i : i;
      const Tensor a = add(gi.detach().select(0, t), linear(h, w));
      h = hs.select(0, t);
      h.copy_(relu_act ? relu(a) : tanh(a));
    }
  }
  return autograd::record_once_differentiable(
      "rnn_sequence", {gi, h0, w_hh}, hs,
      [hs = hs.detach(), h0 = h0.detach(), w = w_hh.detach(), relu_act, reverse](const Tensor& g_in) {
        const int64_t T = hs.size(0), H = h0.size(1);
        const Tensor g = g_in.contiguous(), dpre = empty_like(hs);
        Tensor dh = zeros_like(h0);
        for (int64_t i = T - 1; i >= 0; --i) {
          const int64_t t = reverse ? T - 1 - i : i;
          const Tensor dht = add(g.select(0, t), dh), h = hs.select(0, t);
          // Through the activation, from its output: relu's (h > 0), tanh's 1 - h^2.
          dpre.select(0, t).copy_(relu_act ? detail::relu_backward(dht, h) : sub(dht, mul(dht, mul(h, h))));
          dh = matmul(dpre.select(0, t), w);
        }
        const Tensor dw = autograd::needs_input_grad(2)
                              ? matmul(dpre.reshape({-1, H}).t(), previous_states(hs, h0, reverse).reshape({-1, H}))
                              : Tensor();
        return std::vector<Tensor>{dpre, dh, dw};
      });
}

}  // namespace ember
