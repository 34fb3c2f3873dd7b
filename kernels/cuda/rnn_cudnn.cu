// One recurrent layer and direction through cuDNN's RNN API (cudnn_adv.h: cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), as PyTorch's cuDNN path calls it
// (aten/src/ATen/native/cudnn/RNN.cpp): a one-layer unidirectional RNN descriptor
// (ALGO_STANDARD, LINEAR_INPUT, DOUBLE_BIAS, projSize = hiddenSize, a dropout descriptor of
// 0), sequence-major unpacked data of T steps for every batch row, whose lengths cuDNN also
// reads from device memory (devSeqLengths: every published caller passes them, and cuDNN's
// backward calls document no null). float32 runs on the FMA units (no TF32) unless set_allow_tf32(true).
//
// Note [cuDNN RNN weights]. cuDNN takes a layer's parameters in one opaque weight space;
// cudnnGetRNNWeightParams gives each gate's matrix and bias there. Its gate orders are
// PyTorch's (LSTM linLayerID 0-3: W_i, W_f, W_c, W_o on x, 4-7: the same on h; GRU 0-2:
// W_r, W_z, W_h on x, 3-5 on h; RNN 0: W, 1: R), each matrix [H, I] or [H, H] row-major, so
// w_ih [G H, I] is gates k H .. (k + 1) H - 1 of linLayerIDs 0 .. G-1 and w_hh those of
// G .. 2G-1. Biases: DOUBLE_BIAS has b_W (linLayerID k) and b_R (G + k) for each gate, and
// cuDNN's GRU puts b_R inside r's product, h' = tanh(W_h x + b_Wh + r (R_h h + b_Rh)),
// which is PyTorch's n = tanh(W_in x + b_in + r (W_hn h + b_hn)): b_ih is b_W and b_hh b_R
// for every cell. Each forward and backward packs the parameters into a weight space from
// the caching allocator (a copy per matrix, merged where cuDNN's places are contiguous,
// as they are in practice: one copy per parameter tensor), and the backward unpacks the
// gradients' space the same way. Without biases the bias places stay zero.
//
// The reverse direction runs cuDNN forward over a time-reversed copy of x (y, dy and dx
// reversed likewise): ember's stub is one direction per call, and a bidirectional
// descriptor would run both directions from one call with the same input, which the
// stub's contract does not have.
//
// Descriptors and the weight places are cached per configuration (device, dtype, cell,
// sizes, T, B, math type) for the process, as cuDNN handles are.
#include "kernels/cuda/rnn_cudnn.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <cudnn.h>

#include "core/runtime.h"
#include "kernels/cuda/cudnn_handle.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/rnn.cuh"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

int64_t gates_of(RnnCell cell) { return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1; }

cudnnRNNMode_t mode_of(RnnCell cell) {
  switch (cell) {
    case RnnCell::kLstm: return CUDNN_LSTM;
    case RnnCell::kGru: return CUDNN_GRU;
    case RnnCell::kRnnRelu: return CUDNN_RNN_RELU;
    default: return CUDNN_RNN_TANH;
  }
}

int as_int(int64_t v, const char* what) {
  EMBER_CHECK(v > 0 && v <= INT32_MAX, "rnn_layer (cudnn): ", what, " ", v, " must be in [1, 2^31 - 1]");
  return int(v);
}

// A contiguous run of one parameter tensor in the weight space: `count` elements of
// parameter `param` (0 w_ih, 1 w_hh, 2 b_ih, 3 b_hh) from element `first`, at byte
// `offset` of the space.
struct Piece {
  int param;
  int64_t first, count;
  std::size_t offset;
};

// The cached descriptors of one configuration.
struct Config {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;  // [1, B, H], for h and c alike
  int32_t* lengths = nullptr;  // [B] on the device, each T: B int32s for the process, as a handle
  std::size_t weight_bytes = 0, train_work = 0, train_reserve = 0, infer_work = 0;
  std::vector<Piece> pieces;  // filled on first use (Note [cuDNN RNN weights])
};

using Key = std::array<int64_t, 8>;

// The configuration of x [T, B, I] with `hidden` and the cell, made on first use.
Config& config_for(cudnnHandle_t handle, const Tensor& x, int64_t hidden, RnnCell cell) {
  static std::mutex mu;
  static std::map<Key, Config> cache;
  const DType dt = x.dtype();
  EMBER_CHECK(dt == DType::Float32 || dt == DType::Float64, "rnn_layer (cudnn): dtype ", dtype_name(dt),
              " is not supported");
  const cudnnDataType_t type = dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnMathType_t math = dt == DType::Float32 && !allow_tf32() ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  const Key key{x.device().index, int64_t(dt), int64_t(cell), x.size(0), x.size(1), x.size(2), hidden,
                int64_t(math)};
  std::lock_guard lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const int T = as_int(x.size(0), "sequence length"), B = as_int(x.size(1), "batch"),
            I = as_int(x.size(2), "input size"), H = as_int(hidden, "hidden size");
  Config c;
  EMBER_CUDA_CHECK(cudnnCreateDropoutDescriptor(&c.dropout));
  EMBER_CUDA_CHECK(cudnnSetDropoutDescriptor(c.dropout, handle, 0.0f, nullptr, 0, 0));
  EMBER_CUDA_CHECK(cudnnCreateRNNDescriptor(&c.rnn));
  EMBER_CUDA_CHECK(cudnnSetRNNDescriptor_v8(c.rnn, CUDNN_RNN_ALGO_STANDARD, mode_of(cell), CUDNN_RNN_DOUBLE_BIAS,
                                            CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, type, math, I, H, H, 1,
                                            c.dropout, CUDNN_RNN_PADDED_IO_ENABLED));
  const std::vector<int> lengths(static_cast<std::size_t>(B), T);
  EMBER_CUDA_CHECK(cudnnCreateRNNDataDescriptor(&c.x));
  EMBER_CUDA_CHECK(cudnnSetRNNDataDescriptor(c.x, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, I,
                                             lengths.data(), nullptr));
  EMBER_CUDA_CHECK(cudnnCreateRNNDataDescriptor(&c.y));
  EMBER_CUDA_CHECK(cudnnSetRNNDataDescriptor(c.y, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, H,
                                             lengths.data(), nullptr));
  EMBER_CUDA_CHECK(cudaMalloc(&c.lengths, lengths.size() * sizeof(int32_t)));
  EMBER_CUDA_CHECK(cudaMemcpy(c.lengths, lengths.data(), lengths.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  EMBER_CUDA_CHECK(cudnnCreateTensorDescriptor(&c.h));
  const int dims[3] = {1, B, H}, strides[3] = {B * H, H, 1};
  EMBER_CUDA_CHECK(cudnnSetTensorNdDescriptor(c.h, type, 3, dims, strides));
  EMBER_CUDA_CHECK(cudnnGetRNNWeightSpaceSize(handle, c.rnn, &c.weight_bytes));
  EMBER_CUDA_CHECK(
      cudnnGetRNNTempSpaceSizes(handle, c.rnn, CUDNN_FWD_MODE_TRAINING, c.x, &c.train_work, &c.train_reserve));
  EMBER_CUDA_CHECK(cudnnGetRNNTempSpaceSizes(handle, c.rnn, CUDNN_FWD_MODE_INFERENCE, c.x, &c.infer_work, nullptr));
  return cache.emplace(key, c).first->second;
}

// The element count of a descriptor cudnnGetRNNWeightParams filled (at most 3 dims).
int64_t numel_of(cudnnTensorDescriptor_t d) {
  cudnnDataType_t type;
  int nb = 0, dims[3] = {0, 0, 0}, strides[3] = {0, 0, 0};
  EMBER_CUDA_CHECK(cudnnGetTensorNdDescriptor(d, 3, &type, &nb, dims, strides));
  int64_t n = 1;
  for (int i = 0; i < std::min(nb, 3); ++i) n *= dims[i];
  return n;
}

// Where cuDNN keeps each gate's matrix and bias (Note [cuDNN RNN weights]), asked once per
// configuration with a real weight space and kept as offsets; each place's size is checked
// against PyTorch's layout, and neighbouring places are merged into one copy.
const std::vector<Piece>& pieces_of(cudnnHandle_t handle, Config& c, int64_t G, int64_t H, int64_t I,
                                    std::size_t esize, const void* space) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (!c.pieces.empty()) return c.pieces;
  cudnnTensorDescriptor_t m, b;
  EMBER_CUDA_CHECK(cudnnCreateTensorDescriptor(&m));
  EMBER_CUDA_CHECK(cudnnCreateTensorDescriptor(&b));
  std::vector<Piece> found;
  for (int64_t id = 0; id < 2 * G; ++id) {
    void* m_addr = nullptr;
    void* b_addr = nullptr;
    EMBER_CUDA_CHECK(cudnnGetRNNWeightParams(handle, c.rnn, 0, c.weight_bytes, space, int32_t(id), m, &m_addr, b,
                                             &b_addr));
    const bool recurrent = id >= G;
    const int64_t gate = id % G, cols = recurrent ? H : I;
    EMBER_CHECK(m_addr && b_addr && numel_of(m) == H * cols && numel_of(b) == H, "rnn_layer (cudnn): linLayerID ", id,
                " has a matrix of ", m_addr ? numel_of(m) : 0, " and a bias of ", b_addr ? numel_of(b) : 0,
                " elements, expected [", H, ", ", cols, "] and [", H, "] (Note [cuDNN RNN weights])");
    auto offset = [&](const void* a) {
      return std::size_t(static_cast<const char*>(a) - static_cast<const char*>(space));
    };
    found.push_back({recurrent ? 1 : 0, gate * H * cols, H * cols, offset(m_addr)});
    found.push_back({recurrent ? 3 : 2, gate * H, H, offset(b_addr)});
  }
  cudnnDestroyTensorDescriptor(m);
  cudnnDestroyTensorDescriptor(b);
  std::sort(found.begin(), found.end(), [](const Piece& l, const Piece& r) {
    return l.param != r.param ? l.param < r.param : l.first < r.first;
  });
  std::vector<Piece> merged;
  for (const Piece& piece : found) {
    Piece* last = merged.empty() ? nullptr : &merged.back();
    if (last && last->param == piece.param && last->first + last->count == piece.first &&
        last->offset + std::size_t(last->count) * esize == piece.offset)
      last->count += piece.count;
    else
      merged.push_back(piece);
  }
  c.pieces = merged;
  return c.pieces;
}

// The four parameter tensors (or their gradients) in Piece::param's order.
struct Params {
  const Tensor* t[4];
};

// Copies the parameters into the weight space (to_space) or the space into the gradients;
// an undefined tensor's places are zeroed (to_space) or skipped.
void transfer(const std::vector<Piece>& pieces, const Params& params, char* space, std::size_t esize, bool to_space,
              cudaStream_t s) {
  for (const Piece& p : pieces) {
    const Tensor& t = *params.t[p.param];
    char* place = space + p.offset;
    const std::size_t bytes = std::size_t(p.count) * esize;
    if (!t.defined()) {
      if (to_space) EMBER_CUDA_CHECK(cudaMemsetAsync(place, 0, bytes, s));
      continue;
    }
    char* data = static_cast<char*>(t.data_ptr()) + std::size_t(p.first) * esize;
    EMBER_CUDA_CHECK(cudaMemcpyAsync(to_space ? place : data, to_space ? data : place, bytes,
                                     cudaMemcpyDeviceToDevice, s));
  }
}

// The weight space of one call, filled from w_ih, w_hh, b_ih, b_hh.
struct WeightSpace {
  DeviceScratch space;
  const std::vector<Piece>& pieces;
  WeightSpace(cudnnHandle_t handle, Config& c, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
              const Tensor& b_hh, int64_t G, cudaStream_t s)
      : space(w_ih.device().index, s, c.weight_bytes),
        pieces(pieces_of(handle, c, G, w_hh.size(1), w_ih.size(1), element_size(w_ih.dtype()), space.get())) {
    transfer(pieces, Params{{&w_ih, &w_hh, &b_ih, &b_hh}}, space.get<char>(), element_size(w_ih.dtype()), true, s);
  }
};

// t [T, B, N] in reversed step order, into scratch.
void reverse_into(const DeviceScratch& dst, const Tensor& t, cudaStream_t s) {
  const int64_t steps = t.size(0), N = t.numel() / std::max<int64_t>(steps, 1);
  if (t.dtype() == DType::Float64)
    rnn_reverse_steps<double>(dst.get<double>(), static_cast<const double*>(t.data_ptr()), steps, N, s);
  else
    rnn_reverse_steps<float>(dst.get<float>(), static_cast<const float*>(t.data_ptr()), steps, N, s);
}

void reverse_from(const Tensor& t, const DeviceScratch& src, cudaStream_t s) {
  const int64_t steps = t.size(0), N = t.numel() / std::max<int64_t>(steps, 1);
  if (t.dtype() == DType::Float64)
    rnn_reverse_steps<double>(static_cast<double*>(t.data_ptr()), src.get<double>(), steps, N, s);
  else
    rnn_reverse_steps<float>(static_cast<float*>(t.data_ptr()), src.get<float>(), steps, N, s);
}

std::size_t bytes_of(const Tensor& t) { return std::size_t(t.numel()) * std::size_t(element_size(t.dtype())); }

// A tensor's data, or scratch of `bytes` (zeroed when `zero`) where it is undefined.
struct OrScratch {
  std::optional<DeviceScratch> scratch;
  void* ptr;
  OrScratch(const Tensor& t, std::size_t bytes, bool zero, int dev, cudaStream_t s) {
    if (t.defined()) {
      ptr = t.data_ptr();
      return;
    }
    scratch.emplace(dev, s, bytes);
    ptr = scratch->get();
    if (zero) EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, s));
  }
};

}  // namespace

int64_t cudnn_rnn_reserve_bytes(const Tensor& x, int64_t hidden, const RnnLayerParams& p) {
  const OpScope scope(x);
  const cudnnHandle_t h = cudnn_handle(x.device().index, scope.stream());
  return int64_t(config_for(h, x, hidden, p.cell).train_reserve);
}

void cudnn_rnn_layer(const Tensor& y, const Tensor& h_n, const Tensor& c_n, const Tensor& reserve, const Tensor& x,
                     const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh, const RnnLayerParams& p) {
  const OpScope scope(x);
  const cudaStream_t s = scope.stream();
  const int dev = x.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, s);
  Config& c = config_for(h, x, h0.size(1), p.cell);
  const bool training = reserve.defined();
  EMBER_CHECK(!training || std::size_t(reserve.numel()) == c.train_reserve, "rnn_layer (cudnn): the reserve has ",
              reserve.numel(), " bytes, cuDNN asks for ", c.train_reserve);
  const WeightSpace w(h, c, w_ih, w_hh, b_ih, b_hh, gates_of(p.cell), s);
  std::optional<DeviceScratch> x_rev, y_rev;
  if (p.reverse) {
    x_rev.emplace(dev, s, bytes_of(x));
    y_rev.emplace(dev, s, bytes_of(y));
    reverse_into(*x_rev, x, s);
  }
  const std::size_t work_bytes = training ? c.train_work : c.infer_work;
  const DeviceScratch work(dev, s, work_bytes);
  EMBER_CUDA_CHECK(cudnnRNNForward(
      h, c.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, c.lengths, c.x,
      p.reverse ? x_rev->get() : x.data_ptr(), c.y, p.reverse ? y_rev->get() : y.data_ptr(), c.h, h0.data_ptr(),
      h_n.data_ptr(), c.h, c0.defined() ? c0.data_ptr() : nullptr, c_n.defined() ? c_n.data_ptr() : nullptr,
      c.weight_bytes, w.space.get(), work_bytes, work.get(), training ? c.train_reserve : 0,
      training ? reserve.data_ptr() : nullptr));
  if (p.reverse) reverse_from(y, *y_rev, s);
}

void cudnn_rnn_layer_backward(const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const Tensor& dw_ih,
                              const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const Tensor& dy,
                              const Tensor& dh_n, const Tensor& dc_n, const Tensor& x, const Tensor& h0,
                              const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                              const Tensor& b_hh, const Tensor& y, const Tensor& reserve, const RnnLayerParams& p) {
  const OpScope scope(x);
  const cudaStream_t s = scope.stream();
  const int dev = x.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, s);
  Config& c = config_for(h, x, h0.size(1), p.cell);
  EMBER_CHECK(reserve.defined() && std::size_t(reserve.numel()) == c.train_reserve,
              "rnn_layer_backward (cudnn): the reserve has ", reserve.defined() ? reserve.numel() : 0,
              " bytes, cuDNN's is ", c.train_reserve,
              ": was EMBER_RNN's variant changed between forward and backward?");
  const bool lstm = p.cell == RnnCell::kLstm;
  const WeightSpace w(h, c, w_ih, w_hh, b_ih, b_hh, gates_of(p.cell), s);
  // The reverse direction's x, y, dy and dx in the order cuDNN ran the steps.
  std::optional<DeviceScratch> x_rev, y_rev, dy_rev, dx_rev;
  if (p.reverse) {
    x_rev.emplace(dev, s, bytes_of(x));
    y_rev.emplace(dev, s, bytes_of(y));
    dy_rev.emplace(dev, s, bytes_of(y));
    dx_rev.emplace(dev, s, bytes_of(x));
    reverse_into(*x_rev, x, s);
    reverse_into(*y_rev, y, s);
    reverse_into(*dy_rev, dy, s);
  }
  const void* xp = p.reverse ? x_rev->get() : x.data_ptr();
  const void* yp = p.reverse ? y_rev->get() : y.data_ptr();
  const std::size_t state = bytes_of(h0);
  std::optional<OrScratch> dx_out;  // dx itself, or scratch when it is not wanted
  if (!p.reverse) dx_out.emplace(dx, bytes_of(x), false, dev, s);
  const OrScratch dhy(dh_n, state, true, dev, s), dhx(dh0, state, false, dev, s);
  std::optional<OrScratch> dcy, dcx;
  if (lstm) dcy.emplace(dc_n, state, true, dev, s), dcx.emplace(dc0, state, false, dev, s);
  const DeviceScratch work(dev, s, c.train_work);
  EMBER_CUDA_CHECK(cudnnRNNBackwardData_v8(
      h, c.rnn, c.lengths, c.y, yp, p.reverse ? dy_rev->get() : dy.data_ptr(), c.x,
      p.reverse ? dx_rev->get() : dx_out->ptr, c.h, h0.data_ptr(), dhy.ptr, dhx.ptr, c.h,
      lstm ? c0.data_ptr() : nullptr, lstm ? dcy->ptr : nullptr, lstm ? dcx->ptr : nullptr, c.weight_bytes,
      w.space.get(), c.train_work, work.get(), c.train_reserve, reserve.data_ptr()));
  if (p.reverse && dx.defined()) reverse_from(dx, *dx_rev, s);
  if (!(dw_ih.defined() || dw_hh.defined() || db_ih.defined() || db_hh.defined())) return;
  // BackwardWeights adds into its space (CUDNN_WGRAD_MODE_ADD, the mode cuDNN documents).
  const DeviceScratch dw(dev, s, c.weight_bytes);
  EMBER_CUDA_CHECK(cudaMemsetAsync(dw.get(), 0, c.weight_bytes, s));
  EMBER_CUDA_CHECK(cudnnRNNBackwardWeights_v8(h, c.rnn, CUDNN_WGRAD_MODE_ADD, c.lengths, c.x, xp, c.h, h0.data_ptr(),
                                              c.y, yp, c.weight_bytes, dw.get(), c.train_work, work.get(),
                                              c.train_reserve, reserve.data_ptr()));
  transfer(w.pieces, Params{{&dw_ih, &dw_hh, &db_ih, &db_hh}}, dw.get<char>(), element_size(x.dtype()), false, s);
}

}  // namespace ember::kernels::cuda
