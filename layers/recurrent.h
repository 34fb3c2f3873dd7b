// Recurrent layers: RNN (tanh or ReLU), LSTM and GRU, multi-layer and bidirectional, and
// their cells RNNCell, LSTMCell and GRUCell, as PyTorch's torch.nn has them: the same
// parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse;
// weight_ih, ... for the cells), shapes, gate orders (LSTM i, f, g, o; GRU r, z, n) and
// initialisation (every parameter uniform in +-1/sqrt(hidden_size)), so state dicts map
// one to one. They take and return several tensors, so they are nn::Callable modules.
//
// Each layer and direction is one op, core's rnn_layer (core/rnn_sequence.h): cuDNN's RNN
// API on a GPU; elsewhere the input projection for the whole sequence in one GEMM, then
// one GEMM (h W_hh^T) and one fused cell kernel per step (Note [RNN layer stub]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops.h"
#include "layers/module.h"

namespace ember::nn {

enum class RNNNonlinearity { kTanh, kReLU };

// The arguments of RNN, LSTM and GRU after input_size and hidden_size, PyTorch's defaults.
struct RNNOptions {
  int64_t num_layers = 1;
  RNNNonlinearity nonlinearity = RNNNonlinearity::kTanh;  // RNN only
  bool bias = true;           // the b_ih and b_hh of every layer
  bool batch_first = false;   // input and output [B, T, F] rather than [T, B, F] (not h_n, c_n)
  double dropout = 0;         // on each layer's output but the last, in training mode only
  bool bidirectional = false;
  int64_t proj_size = 0;      // LSTM's projections: not implemented, anything but 0 is refused
};

namespace detail {
// The parameters of a recurrent layer, registered in PyTorch's order, and the forward
// that RNN, LSTM and GRU share. G: gates per layer (1, 4 or 3).
class RecurrentStack {
 public:
  enum class Kind { kRNNTanh, kRNNReLU, kLSTM, kGRU };
  RecurrentStack(Module& owner, Kind kind, int64_t input_size, int64_t hidden_size, const RNNOptions& options);
  // input [T, B, I] ([B, T, I] batch_first; [T, I] unbatched); h0 and c0 [L D, B, H]
  // ([L D, H] unbatched) or undefined (zeros). Returns output [T, B, D H] and h_n, c_n
  // (c_n undefined but for LSTM).
  std::tuple<Tensor, Tensor, Tensor> forward(const Module& owner, const Tensor& input, const Tensor& h0,
                                             const Tensor& c0) const;
  // Per layer and direction, [w_ih, w_hh, b_ih, b_hh] (no biases without bias).
  std::vector<std::vector<Tensor>> all_weights() const;
  std::string describe(const char* cls) const;

 private:
  Kind kind_;
  int64_t input_size_, hidden_size_;
  RNNOptions options_;
  std::vector<std::vector<Tensor*>> slots_;  // registry slots (Note [One place per parameter])
};
}  // namespace detail

// torch.nn.RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or ReLU).
class RNN : public Callable<RNN> {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // Returns (output [T, B, D H] (batch_first: [B, T, D H]), h_n [L D, B, H]).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override { return stack_.describe("RNN"); }
  std::vector<std::vector<Tensor>> all_weights() const { return stack_.all_weights(); }

 private:
  detail::RecurrentStack stack_;
};

// torch.nn.LSTM: gates i, f, g, o; c_t = f c_{t-1} + i g, h_t = o tanh(c_t).
class LSTM : public Callable<LSTM> {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // hx: (h0, c0), each [L D, B, H], or none (zeros). Returns (output, (h_n, c_n)) as libtorch.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx = {});
  std::string name() const override { return stack_.describe("LSTM"); }
  std::vector<std::vector<Tensor>> all_weights() const { return stack_.all_weights(); }

 private:
  detail::RecurrentStack stack_;
};

// torch.nn.GRU: gates r, z, n; n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)),
// h_t = (1 - z) n + z h_{t-1}.
class GRU : public Callable<GRU> {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override { return stack_.describe("GRU"); }
  std::vector<std::vector<Tensor>> all_weights() const { return stack_.all_weights(); }

 private:
  detail::RecurrentStack stack_;
};

// The cells: one step. Parameters weight_ih [G H, I], weight_hh [G H, H], bias_ih and
// bias_hh [G H] (undefined without bias). input [B, I] or [I]; hx as h, or undefined (zeros).
class RNNCell : public Callable<RNNCell> {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          RNNNonlinearity nonlinearity = RNNNonlinearity::kTanh);
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override;
  Tensor& weight_ih;
  Tensor& weight_hh;
  Tensor& bias_ih;
  Tensor& bias_hh;

 private:
  int64_t input_size_, hidden_size_;
  RNNNonlinearity nonlinearity_;
};

class LSTMCell : public Callable<LSTMCell> {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // hx: (h, c), or none (zeros). Returns (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
  std::string name() const override;
  Tensor& weight_ih;
  Tensor& weight_hh;
  Tensor& bias_ih;
  Tensor& bias_hh;

 private:
  int64_t input_size_, hidden_size_;
};

class GRUCell : public Callable<GRUCell> {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override;
  Tensor& weight_ih;
  Tensor& weight_hh;
  Tensor& bias_ih;
  Tensor& bias_hh;

 private:
  int64_t input_size_, hidden_size_;
};

}  // namespace ember::nn
