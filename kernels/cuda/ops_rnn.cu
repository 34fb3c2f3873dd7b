// The CUDA slots of the recurrent cells' pointwise halves (host launchers of the
// hand-written kernels in rnn.cuh) and of whole layers (rnn_layer, rnn_layer_backward;
// Note [RNN layer stub] in core/rnn_sequence.h) in two variants (variants.h, EMBER_RNN):
// cuDNN's RNN API (rnn_cudnn.h; GPU builds with cuDNN) and the hand-written loop here,
// the CPU's loop on the backend's GEMM (blas.h: cuBLASLt on a GPU, the hand-written SGEMM
// in emulation) and rnn.cuh's fused cell kernels, which the emulator runs in CI. Core has
// checked the shapes and dtypes (core/ops_rnn.cpp) and made every tensor contiguous.
#include <atomic>
#include <string_view>
#include <utility>

#include "kernels/common/rnn_ops.h"
#include "kernels/cpu/variant.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/rnn.cuh"
#include "kernels/cuda/rnn_cudnn.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/variants.h"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// f(Tag<T>{}) for float32 and float64, the dtypes core lets through.
template <class F>
void visit_wide(DType t, const char* op, F&& f) {
  EMBER_CHECK(t == kFloat32 || t == kFloat64, op, " (cuda): dtype ", dtype_name(t), " is not supported");
  if (t == kFloat32) f(Tag<float>{});
  else f(Tag<double>{});
}

void lstm_cell_slot(const Tensor& h, const Tensor& c, const Tensor& act, const Tensor& gates, const Tensor& c_prev) {
  const OpScope scope(gates);
  visit_wide(gates.dtype(), "lstm_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    lstm_cell<T>(ptr<T>(h), ptr<T>(c), ptr<T>(act), ptr<const T>(gates), ptr<const T>(c_prev), c_prev.size(0),
                 c_prev.size(1), scope.stream());
  });
}

void lstm_cell_backward_slot(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc,
                             const Tensor& act, const Tensor& c_prev, const Tensor& c) {
  const OpScope scope(act);
  visit_wide(act.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    lstm_cell_backward<T>(ptr<T>(dgates), ptr<T>(dc_prev), ptr<const T>(dh), ptr<const T>(dc), ptr<const T>(act),
                          ptr<const T>(c_prev), ptr<const T>(c), c_prev.size(0), c_prev.size(1), scope.stream());
  });
}

void gru_cell_slot(const Tensor& h, const Tensor& saved, const Tensor& gi, const Tensor& gh, const Tensor& h_prev) {
  const OpScope scope(gi);
  visit_wide(gi.dtype(), "gru_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gru_cell<T>(ptr<T>(h), ptr<T>(saved), ptr<const T>(gi), ptr<const T>(gh), ptr<const T>(h_prev), h_prev.size(0),
                h_prev.size(1), scope.stream());
  });
}

void gru_cell_backward_slot(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh,
                            const Tensor& saved, const Tensor& h_prev) {
  const OpScope scope(saved);
  visit_wide(saved.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gru_cell_backward<T>(ptr<T>(dgi), ptr<T>(dgh), ptr<T>(dh_prev), ptr<const T>(dh), ptr<const T>(saved),
                         ptr<const T>(h_prev), h_prev.size(0), h_prev.size(1), scope.stream());
  });
}


// ----- whole layers -----

constexpr int kAuto = 0, kCudnn = 1, kHandwritten = 2;

int parse_rnn(std::string_view name) {
  if (name == "auto") return kAuto;
  if (name == "handwritten") return kHandwritten;
  if (name == "cudnn") {
#if !defined(EMBER_WITH_CUDNN)
    EMBER_FAIL("rnn_layer variant 'cudnn' is not in this build (the emulated device and builds without cuDNN have "
               "the hand-written loop only)");
#endif
    return kCudnn;
  }
  EMBER_FAIL("rnn_layer: unknown cuda variant '", name, "' (expected auto, cudnn or handwritten)");
}

std::atomic<int> g_rnn{cpu::variant_from_env("EMBER_RNN", kAuto, +[](std::string_view s) { return parse_rnn(s); })};

#if defined(EMBER_WITH_CUDNN)
// cuDNN when asked for by name; under auto for float32 (what training runs in), while
// float64 takes the hand-written loop, which computes in float64 with PyTorch's formulas
// (the float64 references and gradchecks).
bool use_cudnn(const Tensor& x) {
  const int v = g_rnn.load();
  return v == kCudnn || (v == kAuto && x.dtype() == DType::Float32);
}
#endif

int64_t gates_of(RnnCell cell) { return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1; }

int64_t handwritten_reserve(const Tensor& x, int64_t hidden, const RnnLayerParams& lp) {
  return x.size(0) * x.size(1) * ops::rnn_reserve_row(gates_of(lp.cell), hidden) * element_size(x.dtype());
}

// C [m, n] = op(A) op(B) (+ C when accumulate) (+ bias[n]), row-major, on the backend's GEMM.
template <class T>
void mm(int dev, cudaStream_t s, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
        const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate, const T* bias = nullptr) {
  GemmProblem<T, T> q;
  q.m = m, q.n = n, q.k = k;
  q.a = a, q.lda = lda, q.trans_a = ta;
  q.b = b, q.ldb = ldb, q.trans_b = tb;
  q.c = c, q.ldc = ldc, q.beta = accumulate ? 1.0f : 0.0f;
  gemm<T>(q, bias, false, dev, s);
}

template <class T>
void copy_rows(T* dst, const T* src, int64_t n, cudaStream_t s) {
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s));
}

// The CPU's forward loop (kernels/cpu/rnn.cpp): gates [T B, G H] = x W_ih^T + b_ih in one
// GEMM; per step one GEMM h W_hh^T + b_hh, accumulated into the step's gates (the GRU's
// into gh, where r multiplies it), and the fused cell kernel; the reserve as the CPU's.
template <class T>
void handwritten_forward(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve,
                         const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                         const Tensor& b_ih, const Tensor& b_hh, const RnnLayerParams& lp) {
  const OpScope scope(x);
  const cudaStream_t s = scope.stream();
  const int dev = x.device().index;
  const int64_t S = x.size(0), B = x.size(1), I = x.size(2), H = h0.size(1), G = gates_of(lp.cell), GH = G * H;
  const int64_t R = ops::rnn_reserve_row(G, H) * B;
  const bool gru = lp.cell == RnnCell::kGru, lstm = lp.cell == RnnCell::kLstm;
  const DeviceScratch own(dev, s, reserve.defined() ? 0 : S * R * sizeof(T));  // inference: thrown away
  T* saved = reserve.defined() ? ptr<T>(reserve) : own.get<T>();
  const DeviceScratch gates_mem(dev, s, S * B * GH * sizeof(T)), gh_mem(dev, s, gru ? B * GH * sizeof(T) : 0);
  T* gates = gates_mem.get<T>();
  T* gh = gh_mem.get<T>();
  mm<T>(dev, s, false, true, S * B, GH, I, ptr<const T>(x), I, ptr<const T>(w_ih), I, gates, GH, false,
        ptr<const T>(b_ih));
  const T* h_prev = ptr<const T>(h0);
  const T* c_prev = ptr<const T>(c0);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t t = lp.reverse ? S - 1 - i : i;
    T* g = gates + t * B * GH;
    T* h = ptr<T>(y) + t * B * H;
    T* r = saved + i * R;
    if (gru) {
      mm<T>(dev, s, false, true, B, GH, H, h_prev, H, ptr<const T>(w_hh), H, gh, GH, false, ptr<const T>(b_hh));
      gru_cell<T>(h, r, g, gh, h_prev, B, H, s);
    } else {
      mm<T>(dev, s, false, true, B, GH, H, h_prev, H, ptr<const T>(w_hh), H, g, GH, true, ptr<const T>(b_hh));
      if (lstm) {
        T* c = r + B * 4 * H;
        lstm_cell<T>(h, c, r, g, c_prev, B, H, s);
        c_prev = c;
      } else {
        const Layout l = contiguous_layout(B * H);
        if (lp.cell == RnnCell::kRnnRelu) unary<ops::Relu>(g, l, h, l, {}, s);
        else unary<ops::Tanh>(g, l, h, l, {}, s);
      }
    }
    h_prev = h;
  }
  copy_rows<T>(ptr<T>(h_n), h_prev, B * H, s);
  if (lstm) copy_rows<T>(ptr<T>(c_n), c_prev, B * H, s);
}

// The CPU's backward loop: steps in reverse through the cells' backward kernels, then
// dW_hh, dW_ih and dx as one GEMM each over all steps and the biases' gradients as
// column sums.
template <class T>
void handwritten_backward(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                          const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy,
                          const Tensor& dh_n, const Tensor& dc_n, const Tensor& x, const Tensor& h0, const Tensor& c0,
                          const Tensor& w_ih, const Tensor& w_hh, const Tensor& y, const Tensor& reserve,
                          const RnnLayerParams& lp) {
  const OpScope scope(x);
  const cudaStream_t s = scope.stream();
  const int dev = x.device().index;
  const int64_t S = x.size(0), B = x.size(1), I = x.size(2), H = h0.size(1), G = gates_of(lp.cell), GH = G * H;
  const int64_t R = ops::rnn_reserve_row(G, H) * B, BH = B * H;
  const bool gru = lp.cell == RnnCell::kGru, lstm = lp.cell == RnnCell::kLstm;
  const T* saved = ptr<const T>(reserve);
  const T* yp = ptr<const T>(y);
  const T* dyp = ptr<const T>(dy);
  const DeviceScratch dgi_mem(dev, s, S * B * GH * sizeof(T)), dgh_mem(dev, s, gru ? S * B * GH * sizeof(T) : 0);
  const DeviceScratch dh_mem(dev, s, 2 * BH * sizeof(T)), dc_mem(dev, s, lstm ? 2 * BH * sizeof(T) : 0);
  T* dh_cur = dh_mem.get<T>();
  T* dh_prev = dh_cur + BH;
  T* dc_prev = lstm ? dc_mem.get<T>() : nullptr;
  T* dc_spare = lstm ? dc_prev + BH : nullptr;
  if (dh_n.defined()) copy_rows<T>(dh_cur, ptr<const T>(dh_n), BH, s);
  else EMBER_CUDA_CHECK(cudaMemsetAsync(dh_cur, 0, BH * sizeof(T), s));
  const T* dc_in = lstm && dc_n.defined() ? ptr<const T>(dc_n) : nullptr;  // null: zero
  const Layout l = contiguous_layout(BH);
  for (int64_t i = S - 1; i >= 0; --i) {
    const int64_t t = lp.reverse ? S - 1 - i : i;
    binary<ops::Add, T, T>(dh_cur, l, dyp + t * BH, l, dh_cur, l, {}, s);  // the gradient from y and from step t+1
    const T* h_prev = i == 0 ? ptr<const T>(h0) : yp + (lp.reverse ? t + 1 : t - 1) * BH;
    const T* r = saved + i * R;
    T* dg = dgi_mem.get<T>() + t * B * GH;
    if (lstm) {
      const T* c_prev = i == 0 ? ptr<const T>(c0) : saved + (i - 1) * R + B * 4 * H;
      lstm_cell_backward<T>(dg, dc_prev, dh_cur, dc_in, r, c_prev, r + B * 4 * H, B, H, s);
      dc_in = dc_prev;
      std::swap(dc_prev, dc_spare);
      mm<T>(dev, s, false, false, B, H, GH, dg, GH, ptr<const T>(w_hh), H, dh_cur, H, false);
    } else if (gru) {
      T* dghh = dgh_mem.get<T>() + t * B * GH;
      gru_cell_backward<T>(dg, dghh, dh_prev, dh_cur, r, h_prev, B, H, s);
      mm<T>(dev, s, false, false, B, H, GH, dghh, GH, ptr<const T>(w_hh), H, dh_prev, H, true);
      std::swap(dh_cur, dh_prev);
    } else {
      if (lp.cell == RnnCell::kRnnRelu) binary<ops::ReluBackward, T, T>(dh_cur, l, yp + t * BH, l, dg, l, {}, s);
      else binary<ops::TanhBackward, T, T>(dh_cur, l, yp + t * BH, l, dg, l, {}, s);
      mm<T>(dev, s, false, false, B, H, GH, dg, GH, ptr<const T>(w_hh), H, dh_cur, H, false);
    }
  }
  if (dh0.defined()) copy_rows<T>(ptr<T>(dh0), dh_cur, BH, s);
  if (dc0.defined()) {
    if (dc_in) copy_rows<T>(ptr<T>(dc0), dc_in, BH, s);
    else EMBER_CUDA_CHECK(cudaMemsetAsync(ptr<T>(dc0), 0, BH * sizeof(T), s));
  }
  const T* dg_ih = dgi_mem.get<T>();
  const T* dg_hh = gru ? dgh_mem.get<T>() : dg_ih;
  if (dw_hh.defined()) {
    // h_prev of the steps in time order: forward h0, y[0 .. S-2]; reverse y[1 .. S-1], h0.
    const int64_t first_h0 = lp.reverse ? S - 1 : 0;
    mm<T>(dev, s, true, false, GH, H, B, dg_hh + first_h0 * B * GH, GH, ptr<const T>(h0), H, ptr<T>(dw_hh), H, false);
    if (S > 1)
      mm<T>(dev, s, true, false, GH, H, (S - 1) * B, dg_hh + (lp.reverse ? 0 : B * GH), GH,
            yp + (lp.reverse ? BH : 0), H, ptr<T>(dw_hh), H, true);
  }
  if (dw_ih.defined())
    mm<T>(dev, s, true, false, GH, I, S * B, dg_ih, GH, ptr<const T>(x), I, ptr<T>(dw_ih), I, false);
  if (dx.defined()) mm<T>(dev, s, false, false, S * B, I, GH, dg_ih, GH, ptr<const T>(w_ih), I, ptr<T>(dx), I, false);
  if (db_ih.defined()) rnn_column_sum<T>(ptr<T>(db_ih), dg_ih, S * B, GH, s);
  if (db_hh.defined()) rnn_column_sum<T>(ptr<T>(db_hh), dg_hh, S * B, GH, s);
}

int64_t layer_reserve_slot(const Tensor& x, int64_t hidden, const RnnLayerParams& lp) {
#if defined(EMBER_WITH_CUDNN)
  if (use_cudnn(x)) return cudnn_rnn_reserve_bytes(x, hidden, lp);
#endif
  return handwritten_reserve(x, hidden, lp);
}

void layer_slot(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve, const Tensor& x,
                const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh, const RnnLayerParams& lp) {
#if defined(EMBER_WITH_CUDNN)
  if (use_cudnn(x)) return cudnn_rnn_layer(y, h_n, c_n, reserve, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lp);
#endif
  visit_wide(x.dtype(), "rnn_layer", [&](auto tag) {
    handwritten_forward<typename decltype(tag)::type>(y, h_n, c_n, reserve, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lp);
  });
}

void layer_backward_slot(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                         const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy,
                         const Tensor& dh_n, const Tensor& dc_n, const Tensor& x, const Tensor& h0, const Tensor& c0,
                         const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                         const Tensor& y, const Tensor& reserve, const RnnLayerParams& lp) {
#if defined(EMBER_WITH_CUDNN)
  if (use_cudnn(x))
    return cudnn_rnn_layer_backward(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, dy, dh_n, dc_n, x, h0, c0, w_ih, w_hh,
                                    b_ih, b_hh, y, reserve, lp);
#endif
  (void)b_ih, (void)b_hh;
  EMBER_CHECK(reserve.numel() == handwritten_reserve(x, h0.size(1), lp), "rnn_layer_backward (cuda): the reserve has ",
              reserve.numel(), " bytes, the hand-written loop keeps ", handwritten_reserve(x, h0.size(1), lp),
              ": was EMBER_RNN's variant changed between forward and backward?");
  visit_wide(x.dtype(), "rnn_layer_backward", [&](auto tag) {
    handwritten_backward<typename decltype(tag)::type>(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, dy, dh_n, dc_n, x, h0,
                                                       c0, w_ih, w_hh, y, reserve, lp);
  });
}
}  // namespace

void register_rnn() {
  lstm_cell_stub.set(DeviceType::CUDA, lstm_cell_slot);
  lstm_cell_backward_stub.set(DeviceType::CUDA, lstm_cell_backward_slot);
  gru_cell_stub.set(DeviceType::CUDA, gru_cell_slot);
  gru_cell_backward_stub.set(DeviceType::CUDA, gru_cell_backward_slot);
  rnn_layer_reserve_stub.set(DeviceType::CUDA, layer_reserve_slot);
  rnn_layer_stub.set(DeviceType::CUDA, layer_slot);
  rnn_layer_backward_stub.set(DeviceType::CUDA, layer_backward_slot);
}

void set_rnn_variant(std::string_view name) { g_rnn = parse_rnn(name); }

std::string rnn_variant() {
  const int v = g_rnn.load();
  return v == kAuto ? "auto" : v == kCudnn ? "cudnn" : "handwritten";
}

}  // namespace ember::kernels::cuda
