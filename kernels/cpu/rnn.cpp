// The CPU slots of the recurrent cells' pointwise halves (core/dispatch.h: lstm_cell,
// lstm_cell_backward, gru_cell, gru_cell_backward): one pass over [B, G H] gates per
// step, parallel over batch rows. float32 runs kLanes columns at a time on
// kernels/cpu/vec_math.h's vectors, float64 (and a build without vectors) the scalar
// loop; both apply the formulas of kernels/common/rnn_ops.h, as the CUDA kernels do.
// Per element an LSTM step evaluates three sigmoids and two tanh, hence the vectors: the
// scalar libm calls would cost more than the step's GEMM at the examples' sizes.
#include <algorithm>

#include "base/error.h"
#include "kernels/common/rnn_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
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

}  // namespace

void register_rnn() {
  lstm_cell_stub.set(DeviceType::CPU, lstm_cell_kernel);
  lstm_cell_backward_stub.set(DeviceType::CPU, lstm_cell_backward_kernel);
  gru_cell_stub.set(DeviceType::CPU, gru_cell_kernel);
  gru_cell_backward_stub.set(DeviceType::CPU, gru_cell_backward_kernel);
}

}  // namespace ember::kernels::cpu
