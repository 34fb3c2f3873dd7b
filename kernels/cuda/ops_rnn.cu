// The CUDA slots of the recurrent cells' pointwise halves: host launchers of the
// hand-written kernels in rnn.cuh (tested through the emulator). Core has checked the
// shapes and dtypes (core/ops_rnn.cpp) and made every tensor contiguous.
#include "kernels/cuda/device.h"
#include "kernels/cuda/rnn.cuh"

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

}  // namespace

void register_rnn() {
  lstm_cell_stub.set(DeviceType::CUDA, lstm_cell_slot);
  lstm_cell_backward_stub.set(DeviceType::CUDA, lstm_cell_backward_slot);
  gru_cell_stub.set(DeviceType::CUDA, gru_cell_slot);
  gru_cell_backward_stub.set(DeviceType::CUDA, gru_cell_backward_slot);
}

}  // namespace ember::kernels::cuda
