// One recurrent layer and direction through cuDNN's RNN API (GPU builds with cuDNN only,
// EMBER_WITH_CUDNN): the rnn_layer stubs' contract (core/dispatch.h), with `reserve` as
// cuDNN's reserve space. The CUDA slots (ops_rnn.cu) call these under the cudnn variant
// (variants.h, EMBER_RNN).
#pragma once

#include <cstdint>

#include "core/dispatch.h"

namespace ember::kernels::cuda {

// cuDNN's reserve space for training on x [T, B, I] (cudnnGetRNNTempSpaceSizes).
int64_t cudnn_rnn_reserve_bytes(const Tensor& x, int64_t hidden, const RnnLayerParams& p);
void cudnn_rnn_layer(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve, const Tensor& x,
                     const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh, const RnnLayerParams& p);
void cudnn_rnn_layer_backward(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                              const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy,
                              const Tensor& dh_n, const Tensor& dc_n, const Tensor& x, const Tensor& h0,
                              const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                              const Tensor& b_hh, const Tensor& y, const Tensor& reserve, const RnnLayerParams& p);

}  // namespace ember::kernels::cuda
