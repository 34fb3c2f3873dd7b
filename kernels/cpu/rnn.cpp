// The CPU slots of the recurrent cells' pointwise halves (core/dispatch.h: lstm_cell,
// lstm_cell_backward, gru_cell, gru_cell_backward) and of whole layers (rnn_layer,
// rnn_layer_backward: the step loop around kernels/cpu/gemm.h's GEMM and those cell
// kernels, Note [RNN layer stub] in core/rnn_sequence.h). A cell is one pass over
// [B, G H] gates per step, parallel over batch rows. float32 runs kLanes columns at a time on
// kernels/cpu/vec_math.h's vectors, float64 (and a build without vectors) the scalar
// loop; both apply the formulas of kernels/common/rnn_ops.h, as the CUDA kernels do.
// Per element an LSTM step evaluates three sigmoids and two tanh, hence the vectors: the
// scalar libm calls would cost more than the step's GEMM at the examples' sizes.
#include <algorithm>
#include <functional>

#include "base/error.h"
#include "kernels/common/rnn_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vec_math.h"

#if EMBER_CPU_VEC
namespace ember::kernels::ops {
template <>
struct Splat<cpu::simd::Vec> {
  static cpu::simd::Vec of(double c) { return cpu::simd::set1(static_cast<float>(c)); }
};
}  // namespace ember::kernels::ops
#endif

namespace ember::kernels::cpu {
namespace {

// Rows [b, e) of B rows per chunk: about 8k elements of transcendental-heavy work each.
int64_t row_grain(int64_t h) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(h, 1)); }

// Calls f(j, n) over columns [0, H) of a row: on float32 vectors chunk by chunk (the
// last one overlapping, or one partial chunk for a row shorter than a vector), n the
// count it may write; otherwise per element (n = 1) with scalars.
template <class T, class VecF, class ScalarF>
void for_columns(int64_t H, VecF&& vf, ScalarF&& sf) {
#if EMBER_CPU_VEC
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t c = 0; c < H; c += simd::kLanes) vf(simd::chunk_start(c, H), std::min<int64_t>(simd::kLanes, H));
    return;
  }
#endif
  (void)vf;
  for (int64_t j = 0; j < H; ++j) sf(j);
}

template <class T>
void lstm_rows(T* h, T* c, T* act, const T* gates, const T* c_prev, int64_t H, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const T* gr = gates + b * 4 * H;
    T* ar = act + b * 4 * H;
    const int64_t o = b * H;
    for_columns<T>(
        H,
        [&](int64_t j, int64_t n) {
#if EMBER_CPU_VEC
          if constexpr (std::is_same_v<T, float>) {
            using simd::load_n, simd::store_n;
            simd::Vec i, f, g, og, cn, hn;
            ops::LstmForward<simd::VecAct>{}(load_n(gr + j, n), load_n(gr + H + j, n), load_n(gr + 2 * H + j, n),
                                             load_n(gr + 3 * H + j, n), load_n(c_prev + o + j, n), i, f, g, og, cn,
                                             hn);
            store_n(ar + j, i, n), store_n(ar + H + j, f, n), store_n(ar + 2 * H + j, g, n);
            store_n(ar + 3 * H + j, og, n), store_n(c + o + j, cn, n), store_n(h + o + j, hn, n);
          }
#endif
          (void)j, (void)n;
        },
        [&](int64_t j) {
          ops::LstmForward<ops::ScalarAct>{}(gr[j], gr[H + j], gr[2 * H + j], gr[3 * H + j], c_prev[o + j], ar[j],
                                             ar[H + j], ar[2 * H + j], ar[3 * H + j], c[o + j], h[o + j]);
        });
  }
}

// dh or dc may be null (zero).
template <class T>
void lstm_backward_rows(T* dgates, T* dc_prev, const T* dh, const T* dc, const T* act, const T* c_prev, const T* c,
                        int64_t H, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    T* dg = dgates + b * 4 * H;
    const T* ar = act + b * 4 * H;
    const int64_t o = b * H;
    for_columns<T>(
        H,
        [&](int64_t j, int64_t n) {
#if EMBER_CPU_VEC
          if constexpr (std::is_same_v<T, float>) {
            using simd::load_n, simd::store_n;
            const simd::Vec vdh = dh ? load_n(dh + o + j, n) : simd::zero();
            const simd::Vec vdc = dc ? load_n(dc + o + j, n) : simd::zero();
            simd::Vec di, df, dgg, dgo, dcp;
            ops::LstmBackward<simd::VecAct>{}(vdh, vdc, load_n(ar + j, n), load_n(ar + H + j, n),
                                              load_n(ar + 2 * H + j, n), load_n(ar + 3 * H + j, n),
                                              load_n(c_prev + o + j, n), load_n(c + o + j, n), di, df, dgg, dgo, dcp);
            store_n(dg + j, di, n), store_n(dg + H + j, df, n), store_n(dg + 2 * H + j, dgg, n);
            store_n(dg + 3 * H + j, dgo, n), store_n(dc_prev + o + j, dcp, n);
          }
#endif
          (void)j, (void)n;
        },
        [&](int64_t j) {
          ops::LstmBackward<ops::ScalarAct>{}(dh ? dh[o + j] : T(0), dc ? dc[o + j] : T(0), ar[j], ar[H + j],
                                              ar[2 * H + j], ar[3 * H + j], c_prev[o + j], c[o + j], dg[j],
                                              dg[H + j], dg[2 * H + j], dg[3 * H + j], dc_prev[o + j]);
        });
  }
}

template <class T>
void gru_rows(T* h, T* saved, const T* gi, const T* gh, const T* h_prev, int64_t H, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const T* ir = gi + b * 3 * H;
    const T* hr = gh + b * 3 * H;
    T* sr = saved + b * 4 * H;
    const int64_t o = b * H;
    for_columns<T>(
        H,
        [&](int64_t j, int64_t n) {
#if EMBER_CPU_VEC
          if constexpr (std::is_same_v<T, float>) {
            using simd::load_n, simd::store_n;
            const simd::Vec ghn = load_n(hr + 2 * H + j, n);
            simd::Vec r, z, nn, hn;
            ops::GruForward<simd::VecAct>{}(load_n(ir + j, n), load_n(ir + H + j, n), load_n(ir + 2 * H + j, n),
                                            load_n(hr + j, n), load_n(hr + H + j, n), ghn, load_n(h_prev + o + j, n),
                                            r, z, nn, hn);
            store_n(sr + j, r, n), store_n(sr + H + j, z, n), store_n(sr + 2 * H + j, nn, n);
            store_n(sr + 3 * H + j, ghn, n), store_n(h + o + j, hn, n);
          }
#endif
          (void)j, (void)n;
        },
        [&](int64_t j) {
          sr[3 * H + j] = hr[2 * H + j];
          ops::GruForward<ops::ScalarAct>{}(ir[j], ir[H + j], ir[2 * H + j], hr[j], hr[H + j], hr[2 * H + j],
                                            h_prev[o + j], sr[j], sr[H + j], sr[2 * H + j], h[o + j]);
        });
  }
}

template <class T>
void gru_backward_rows(T* dgi, T* dgh, T* dh_prev, const T* dh, const T* saved, const T* h_prev, int64_t H, int64_t b0,
                       int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    T* di = dgi + b * 3 * H;
    T* dhh = dgh + b * 3 * H;
    const T* sr = saved + b * 4 * H;
    const int64_t o = b * H;
    for_columns<T>(
        H,
        [&](int64_t j, int64_t n) {
#if EMBER_CPU_VEC
          if constexpr (std::is_same_v<T, float>) {
            using simd::load_n, simd::store_n;
            simd::Vec dr, dz, dgin, dghn, dhp;
            ops::GruBackward{}(load_n(dh + o + j, n), load_n(sr + j, n), load_n(sr + H + j, n),
                               load_n(sr + 2 * H + j, n), load_n(sr + 3 * H + j, n), load_n(h_prev + o + j, n), dr, dz,
                               dgin, dghn, dhp);
            store_n(di + j, dr, n), store_n(di + H + j, dz, n), store_n(di + 2 * H + j, dgin, n);
            store_n(dhh + j, dr, n), store_n(dhh + H + j, dz, n), store_n(dhh + 2 * H + j, dghn, n);
            store_n(dh_prev + o + j, dhp, n);
          }
#endif
          (void)j, (void)n;
        },
        [&](int64_t j) {
          ops::GruBackward{}(dh[o + j], sr[j], sr[H + j], sr[2 * H + j], sr[3 * H + j], h_prev[o + j], di[j],
                             di[H + j], di[2 * H + j], dhh[2 * H + j], dh_prev[o + j]);
          dhh[j] = di[j];
          dhh[H + j] = di[H + j];
        });
  }
}

// f(Tag<T>{}) for float32 and float64 (core refuses other dtypes).
template <class F>
void visit_wide(DType t, const char* op, F&& f) {
  EMBER_CHECK(t == kFloat32 || t == kFloat64, op, " kernel: expects float32 or float64, got ", dtype_name(t));
  if (t == kFloat32) f(Tag<float>{});
  else f(Tag<double>{});
}

template <class T>
T* p(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

void lstm_cell_kernel(const Tensor& h, const Tensor& c, const Tensor& act, const Tensor& gates, const Tensor& c_prev) {
  visit_wide(gates.dtype(), "lstm_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t H = c_prev.size(1);
    parallel_for(0, c_prev.size(0), row_grain(H), [&](int64_t b0, int64_t b1) {
      lstm_rows<T>(p<T>(h), p<T>(c), p<T>(act), p<const T>(gates), p<const T>(c_prev), H, b0, b1);
    });
  });
}

void lstm_cell_backward_kernel(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc,
                               const Tensor& act, const Tensor& c_prev, const Tensor& c) {
  visit_wide(act.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t H = c_prev.size(1);
    parallel_for(0, c_prev.size(0), row_grain(H), [&](int64_t b0, int64_t b1) {
      lstm_backward_rows<T>(p<T>(dgates), p<T>(dc_prev), p<const T>(dh), p<const T>(dc), p<const T>(act),
                            p<const T>(c_prev), p<const T>(c), H, b0, b1);
    });
  });
}

void gru_cell_kernel(const Tensor& h, const Tensor& saved, const Tensor& gi, const Tensor& gh, const Tensor& h_prev) {
  visit_wide(gi.dtype(), "gru_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t H = h_prev.size(1);
    parallel_for(0, h_prev.size(0), row_grain(H), [&](int64_t b0, int64_t b1) {
      gru_rows<T>(p<T>(h), p<T>(saved), p<const T>(gi), p<const T>(gh), p<const T>(h_prev), H, b0, b1);
    });
  });
}

void gru_cell_backward_kernel(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh,
                              const Tensor& saved, const Tensor& h_prev) {
  visit_wide(saved.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t H = h_prev.size(1);
    parallel_for(0, h_prev.size(0), row_grain(H), [&](int64_t b0, int64_t b1) {
      gru_backward_rows<T>(p<T>(dgi), p<T>(dgh), p<T>(dh_prev), p<const T>(dh), p<const T>(saved), p<const T>(h_prev),
                           H, b0, b1);
    });
  });
}


// ----- one layer over a whole sequence (rnn_layer, Note [RNN layer stub] in core/rnn_sequence.h) -----

int64_t gates_of(RnnCell cell) { return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1; }

// The simple RNN's activation over rows [b0, b1) of [B, H]: h = tanh(a) or relu(a).
template <class T>
void rnn_act_rows(T* h, const T* a, int64_t H, bool relu, int64_t b0, int64_t b1) {
  if (relu) {
    for (int64_t e = b0 * H; e < b1 * H; ++e) h[e] = a[e] > T(0) ? a[e] : T(0);
    return;
  }
  for (int64_t b = b0; b < b1; ++b)
    for_columns<T>(
        H,
        [&](int64_t j, int64_t n) {
#if EMBER_CPU_VEC
          if constexpr (std::is_same_v<T, float>)
            simd::store_n(h + b * H + j, simd::tanh(simd::load_n(a + b * H + j, n)), n);
#endif
          (void)j, (void)n;
        },
        [&](int64_t j) { h[b * H + j] = ops::Tanh{}(a[b * H + j]); });
}

// Its backward from the output h: da = dh relu'(h) or dh (1 - h^2).
template <class T>
void rnn_act_backward_rows(T* da, const T* dh, const T* h, int64_t H, bool relu, int64_t b0, int64_t b1) {
  for (int64_t e = b0 * H; e < b1 * H; ++e) da[e] = relu ? (h[e] > T(0) ? dh[e] : T(0)) : dh[e] * (T(1) - h[e] * h[e]);
}

// Rows [0, rows) of out [rows, n] = a + b (either may be null: zero).
template <class T>
void fill_rows(T* out, int64_t rows, int64_t n, const T* a, const T* b) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < n; ++j) out[r * n + j] = (a ? a[j] : T(0)) + (b ? b[j] : T(0));
  });
}

// out [n] = the sum of src's rows [rows, n] (parallel over columns).
template <class T>
void column_sums(T* out, const T* src, int64_t rows, int64_t n) {
  parallel_for(0, n, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) out[c] = T(0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) out[c] += src[r * n + c];
  });
}

void rows_parallel(int64_t B, int64_t H, const std::function<void(int64_t, int64_t)>& f) {
  parallel_for(0, B, row_grain(H), f);
}

int64_t layer_reserve_kernel(const Tensor& x, int64_t hidden, const RnnLayerParams& p) {
  return x.size(0) * x.size(1) * ops::rnn_reserve_row(gates_of(p.cell), hidden) * element_size(x.dtype());
}

// The forward loop: gates [T B, G H] = x W_ih^T + b_ih (+ b_hh but for the GRU, whose b_hh
// stays in the step where r multiplies it) in one GEMM; then per step one GEMM h W_hh^T
// (accumulated into the step's gates; the GRU's into gh with b_hh) and the fused cell
// kernel, writing h into y and what backward needs into the reserve (per step i, in the
// order the steps run; rnn_reserve_row's layout).
template <class T>
void layer_forward(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve, const Tensor& x,
                   const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                   const Tensor& b_hh, const RnnLayerParams& lp) {
  const int64_t S = x.size(0), B = x.size(1), I = x.size(2), H = h0.size(1), G = gates_of(lp.cell), GH = G * H;
  const int64_t R = ops::rnn_reserve_row(G, H) * B;  // reserve elements per step
  const bool gru = lp.cell == RnnCell::kGru, lstm = lp.cell == RnnCell::kLstm;
  Scratch<T> own(reserve.defined() ? 1 : std::max<int64_t>(S * R, 1));  // inference: the same, thrown away
  T* saved = reserve.defined() ? static_cast<T*>(reserve.data_ptr()) : own.data();
  Scratch<T> gates(S * B * GH), gh(gru ? B * GH : 1);
  const bool bias = b_ih.defined();
  if (bias) fill_rows<T>(gates.data(), S * B, GH, p<const T>(b_ih), gru ? nullptr : p<const T>(b_hh));
  gemm<T>(false, true, S * B, GH, I, p<const T>(x), I, p<const T>(w_ih), I, gates.data(), GH, bias, true);
  T* yp = p<T>(y);
  const T* h_prev = p<const T>(h0);
  const T* c_prev = p<const T>(c0);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t t = lp.reverse ? S - 1 - i : i;
    T* g = gates.data() + t * B * GH;
    T* h = yp + t * B * H;
    T* r = saved + i * R;
    if (gru) {
      if (bias) fill_rows<T>(gh.data(), B, GH, p<const T>(b_hh), nullptr);
      gemm<T>(false, true, B, GH, H, h_prev, H, p<const T>(w_hh), H, gh.data(), GH, bias, true);
      rows_parallel(B, H, [&](int64_t b0, int64_t b1) { gru_rows<T>(h, r, g, gh.data(), h_prev, H, b0, b1); });
    } else {
      gemm<T>(false, true, B, GH, H, h_prev, H, p<const T>(w_hh), H, g, GH, true, true);
      if (lstm) {
        T* c = r + B * 4 * H;
        rows_parallel(B, H, [&](int64_t b0, int64_t b1) { lstm_rows<T>(h, c, r, g, c_prev, H, b0, b1); });
        c_prev = c;
      } else {
        const bool relu = lp.cell == RnnCell::kRnnRelu;
        rows_parallel(B, H, [&](int64_t b0, int64_t b1) { rnn_act_rows<T>(h, g, H, relu, b0, b1); });
      }
    }
    h_prev = h;
  }
  std::copy(h_prev, h_prev + B * H, p<T>(h_n));
  if (lstm) std::copy(c_prev, c_prev + B * H, p<T>(c_n));
}

// The backward loop, steps in reverse: per step the cell's backward kernel gives the
// gates' gradients dG (the GRU's: dgi and dgh, which differ in the n gate) and one GEMM
// dG W_hh the gradient reaching the previous h. Then one GEMM each over all steps:
// dW_hh = dG_hh^T [h_prev of every step], dW_ih = dG_ih^T x, dx = dG_ih W_ih; the biases'
// gradients are dG's column sums.
template <class T>
void layer_backward(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih, const Tensor& dw_hh,
                    const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy, const Tensor& dh_n, const Tensor& dc_n,
                    const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& y, const Tensor& reserve, const RnnLayerParams& lp) {
  const int64_t S = x.size(0), B = x.size(1), I = x.size(2), H = h0.size(1), G = gates_of(lp.cell), GH = G * H;
  const int64_t R = ops::rnn_reserve_row(G, H) * B;
  const bool gru = lp.cell == RnnCell::kGru, lstm = lp.cell == RnnCell::kLstm;
  const T* saved = p<const T>(reserve);
  const T* yp = p<const T>(y);
  const T* dyp = p<const T>(dy);
  Scratch<T> dgi(S * B * GH), dgh(gru ? S * B * GH : 1);
  Scratch<T> dh(B * H), dh_other(B * H), dc(lstm ? B * H : 1), dc_other(lstm ? B * H : 1);
  if (dh_n.defined()) std::copy(p<const T>(dh_n), p<const T>(dh_n) + B * H, dh.data());
  else std::fill(dh.data(), dh.data() + B * H, T(0));
  const T* dc_in = lstm && dc_n.defined() ? p<const T>(dc_n) : nullptr;  // null: zero
  T* dh_cur = dh.data();
  T* dh_prev = dh_other.data();
  T* dc_prev = dc.data();
  T* dc_spare = dc_other.data();
  for (int64_t i = S - 1; i >= 0; --i) {
    const int64_t t = lp.reverse ? S - 1 - i : i;
    const T* dyt = dyp + t * B * H;
    for (int64_t e = 0; e < B * H; ++e) dh_cur[e] += dyt[e];
    const T* h_prev = i == 0 ? p<const T>(h0) : yp + (lp.reverse ? t + 1 : t - 1) * B * H;
    const T* r = saved + i * R;
    T* dg = dgi.data() + t * B * GH;
    if (lstm) {
      const T* c_prev = i == 0 ? p<const T>(c0) : saved + (i - 1) * R + B * 4 * H;
      rows_parallel(B, H, [&](int64_t b0, int64_t b1) {
        lstm_backward_rows<T>(dg, dc_prev, dh_cur, dc_in, r, c_prev, r + B * 4 * H, H, b0, b1);
      });
      dc_in = dc_prev;
      std::swap(dc_prev, dc_spare);
      gemm<T>(false, false, B, H, GH, dg, GH, p<const T>(w_hh), H, dh_cur, H, false, true);
    } else if (gru) {
      T* dghh = dgh.data() + t * B * GH;
      rows_parallel(B, H, [&](int64_t b0, int64_t b1) {
        gru_backward_rows<T>(dg, dghh, dh_prev, dh_cur, r, h_prev, H, b0, b1);
      });
      gemm<T>(false, false, B, H, GH, dghh, GH, p<const T>(w_hh), H, dh_prev, H, true, true);
      std::swap(dh_cur, dh_prev);
    } else {
      const bool relu = lp.cell == RnnCell::kRnnRelu;
      const T* h = yp + t * B * H;
      rows_parallel(B, H, [&](int64_t b0, int64_t b1) { rnn_act_backward_rows<T>(dg, dh_cur, h, H, relu, b0, b1); });
      gemm<T>(false, false, B, H, GH, dg, GH, p<const T>(w_hh), H, dh_cur, H, false, true);
    }
  }
  if (dh0.defined()) std::copy(dh_cur, dh_cur + B * H, p<T>(dh0));
  if (dc0.defined()) {
    if (dc_in) std::copy(dc_in, dc_in + B * H, p<T>(dc0));
    else std::fill(p<T>(dc0), p<T>(dc0) + B * H, T(0));
  }
  const T* dg_ih = dgi.data();
  const T* dg_hh = gru ? dgh.data() : dgi.data();
  if (dw_hh.defined()) {
    // h_prev of the steps in time order: forward h0, y[0 .. S-2]; reverse y[1 .. S-1], h0.
    const int64_t first_h0 = lp.reverse ? S - 1 : 0;  // the step whose h_prev is h0
    const T* dg_rest = dg_hh + (lp.reverse ? 0 : B * GH);
    const T* y_rest = yp + (lp.reverse ? B * H : 0);
    gemm<T>(true, false, GH, H, B, dg_hh + first_h0 * B * GH, GH, p<const T>(h0), H, p<T>(dw_hh), H, false, true);
    if (S > 1) gemm<T>(true, false, GH, H, (S - 1) * B, dg_rest, GH, y_rest, H, p<T>(dw_hh), H, true, true);
  }
  if (dw_ih.defined()) gemm<T>(true, false, GH, I, S * B, dg_ih, GH, p<const T>(x), I, p<T>(dw_ih), I, false, true);
  if (dx.defined()) gemm<T>(false, false, S * B, I, GH, dg_ih, GH, p<const T>(w_ih), I, p<T>(dx), I, false, true);
  if (db_ih.defined()) column_sums<T>(p<T>(db_ih), dg_ih, S * B, GH);
  if (db_hh.defined()) column_sums<T>(p<T>(db_hh), dg_hh, S * B, GH);
}

void layer_kernel(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve, const Tensor& x,
                  const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                  const Tensor& b_hh, const RnnLayerParams& p) {
  visit_wide(x.dtype(), "rnn_layer", [&](auto tag) {
    layer_forward<typename decltype(tag)::type>(y, h_n, c_n, reserve, x, h0, c0, w_ih, w_hh, b_ih, b_hh, p);
  });
}

void layer_backward_kernel(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                           const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy,
                           const Tensor& dh_n, const Tensor& dc_n, const Tensor& x, const Tensor& h0, const Tensor& c0,
                           const Tensor& w_ih, const Tensor& w_hh, const Tensor&, const Tensor&, const Tensor& y,
                           const Tensor& reserve, const RnnLayerParams& p) {
  visit_wide(x.dtype(), "rnn_layer_backward", [&](auto tag) {
    layer_backward<typename decltype(tag)::type>(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, dy, dh_n, dc_n, x, h0, c0,
                                                 w_ih, w_hh, y, reserve, p);
  });
}
}  // namespace

void register_rnn() {
  lstm_cell_stub.set(DeviceType::CPU, lstm_cell_kernel);
  lstm_cell_backward_stub.set(DeviceType::CPU, lstm_cell_backward_kernel);
  gru_cell_stub.set(DeviceType::CPU, gru_cell_kernel);
  gru_cell_backward_stub.set(DeviceType::CPU, gru_cell_backward_kernel);
  rnn_layer_reserve_stub.set(DeviceType::CPU, layer_reserve_kernel);
  rnn_layer_stub.set(DeviceType::CPU, layer_kernel);
  rnn_layer_backward_stub.set(DeviceType::CPU, layer_backward_kernel);
}

}  // namespace ember::kernels::cpu
