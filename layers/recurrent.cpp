#include "layers/recurrent.h"

#include <cmath>

#include "base/error.h"
#include "core/rnn_sequence.h"
#include "layers/init.h"

namespace ember::nn {
namespace {

using Kind = detail::RecurrentStack::Kind;

int64_t gates_of(Kind k) { return k == Kind::kLSTM ? 4 : (k == Kind::kGRU ? 3 : 1); }
const char* class_of(Kind k) { return k == Kind::kLSTM ? "LSTM" : (k == Kind::kGRU ? "GRU" : "RNN"); }

void check_sizes(const char* cls, int64_t input_size, int64_t hidden_size) {
  EMBER_CHECK(input_size > 0 && hidden_size > 0, cls, ": input_size and hidden_size must be positive, got ",
              input_size, " and ", hidden_size);
}

// Every parameter of PyTorch's recurrent layers and cells: uniform in +-1/sqrt(hidden).
Tensor init_param(Shape shape, int64_t hidden_size) {
  Tensor t = empty(std::move(shape));
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  init::uniform_(t, -k, k);
  return t;
}

kernels::RnnCell cell_of(Kind k) {
  switch (k) {
    case Kind::kLSTM: return kernels::RnnCell::kLstm;
    case Kind::kGRU: return kernels::RnnCell::kGru;
    case Kind::kRNNReLU: return kernels::RnnCell::kRnnRelu;
    default: return kernels::RnnCell::kRnnTanh;
  }
}

// A state argument: [L D, B, H] (unbatched [L D, H]), of the input's dtype and device, or
// zeros when undefined. Returned batched.
Tensor state(const char* cls, const char* what, const Tensor& s, bool unbatched, int64_t layers, int64_t B,
             int64_t H, const Tensor& input) {
  if (!s.defined()) return zeros({layers, B, H}, {input.dtype(), input.device()});
  const Shape want = unbatched ? Shape{layers, H} : Shape{layers, B, H};
  EMBER_CHECK(s.shape() == want, cls, ": ", what, " must be ", shape_str(want),
              " (num_layers * num_directions, batch, hidden_size), got ", shape_str(s.shape()));
  EMBER_CHECK(s.dtype() == input.dtype() && s.device() == input.device(), cls, ": ", what, " is ",
              dtype_name(s.dtype()), " on ", s.device().str(), " but the input is ", dtype_name(input.dtype()), " on ",
              input.device().str());
  return unbatched ? s.unsqueeze(1) : s;
}

}  // namespace

namespace detail {

RecurrentStack::RecurrentStack(Module& owner, Kind kind, int64_t input_size, int64_t hidden_size,
                               const RNNOptions& options)
    : kind_(kind), input_size_(input_size), hidden_size_(hidden_size), options_(options) {
  const char* cls = class_of(kind);
  check_sizes(cls, input_size, hidden_size);
  EMBER_CHECK(options.num_layers >= 1, cls, ": num_layers must be at least 1, got ", options.num_layers);
  EMBER_CHECK(options.dropout >= 0 && options.dropout <= 1, cls, ": dropout must be in [0, 1], got ",
              options.dropout);
  EMBER_CHECK(options.proj_size == 0, cls, ": proj_size (LSTM projections) is not implemented in ember, got ",
              options.proj_size);
  EMBER_CHECK(kind == Kind::kRNNTanh || kind == Kind::kRNNReLU || options.nonlinearity == RNNNonlinearity::kTanh,
              cls, ": nonlinearity is RNN's option only");
  const int64_t G = gates_of(kind), D = options.bidirectional ? 2 : 1;
  for (int64_t l = 0; l < options.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
      const int64_t in = l == 0 ? input_size : D * hidden_size;
      std::vector<Tensor*> s{&owner.register_parameter("weight_ih" + sfx, init_param({G * hidden_size, in}, hidden_size)),
                             &owner.register_parameter("weight_hh" + sfx,
                                                       init_param({G * hidden_size, hidden_size}, hidden_size))};
      if (options.bias) {
        s.push_back(&owner.register_parameter("bias_ih" + sfx, init_param({G * hidden_size}, hidden_size)));
        s.push_back(&owner.register_parameter("bias_hh" + sfx, init_param({G * hidden_size}, hidden_size)));
      }
      slots_.push_back(std::move(s));
    }
}

std::vector<std::vector<Tensor>> RecurrentStack::all_weights() const {
  std::vector<std::vector<Tensor>> out;
  for (const auto& s : slots_) {
    std::vector<Tensor> w;
    for (const Tensor* t : s) w.push_back(*t);
    out.push_back(std::move(w));
  }
  return out;
}

std::string RecurrentStack::describe(const char* cls) const {
  std::string s = std::string(cls) + "(" + std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (options_.num_layers != 1) s += ", num_layers=" + std::to_string(options_.num_layers);
  if (options_.nonlinearity == RNNNonlinearity::kReLU) s += ", nonlinearity='relu'";
  if (!options_.bias) s += ", bias=false";
  if (options_.batch_first) s += ", batch_first=true";
  if (options_.dropout != 0) s += ", dropout=" + std::to_string(options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=true";
  return s + ")";
}

std::tuple<Tensor, Tensor, Tensor> RecurrentStack::forward(const Module& owner, const Tensor& input,
                                                           const Tensor& h0, const Tensor& c0) const {
  const char* cls = class_of(kind_);
  EMBER_CHECK(input.defined(), cls, ": input is an undefined tensor");
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, cls, ": input must be [T, B, ", input_size_,
              "] (batch_first: [B, T, ", input_size_, "]; unbatched [T, ", input_size_, "]), got ",
              shape_str(input.shape()));
  EMBER_CHECK(input.size(-1) == input_size_, cls, ": input has ", input.size(-1), " features, expected input_size ",
              input_size_);
  const Tensor& w0 = *slots_[0][0];
  EMBER_CHECK(input.dtype() == w0.dtype() && input.device() == w0.device(), cls, ": input is ",
              dtype_name(input.dtype()), " on ", input.device().str(), " but the weights are ", dtype_name(w0.dtype()),
              " on ", w0.device().str());
  const bool unbatched = input.dim() == 2;
  Tensor x = unbatched ? input.unsqueeze(1) : (options_.batch_first ? input.transpose(0, 1) : input);
  x = x.contiguous();
  const int64_t B = x.size(1), H = hidden_size_;
  const int64_t D = options_.bidirectional ? 2 : 1, L = options_.num_layers;
  const Tensor h_init = state(cls, "h0", h0, unbatched, L * D, B, H, input);
  const Tensor c_init = kind_ == Kind::kLSTM ? state(cls, "c0", c0, unbatched, L * D, B, H, input) : Tensor();
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> dir_out;
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<Tensor*>& w = slots_[static_cast<size_t>(l * D + d)];
      const Tensor b_ih = options_.bias ? *w[2] : Tensor(), b_hh = options_.bias ? *w[3] : Tensor();
      const Tensor c0 = c_init.defined() ? c_init.select(0, l * D + d) : Tensor();
      const RnnLayerOutput r =
          rnn_layer(x, h_init.select(0, l * D + d), c0, *w[0], *w[1], b_ih, b_hh, cell_of(kind_), d == 1);
      dir_out.push_back(r.y);
      h_n.push_back(r.h_n);
      if (r.c_n.defined()) c_n.push_back(r.c_n);
    }
    x = D == 2 ? cat(dir_out, 2) : dir_out[0];
    if (options_.dropout > 0 && owner.is_training() && l + 1 < L) x = dropout(x, options_.dropout, true);
  }
  Tensor out = unbatched ? x.squeeze(1) : (options_.batch_first ? x.transpose(0, 1) : x);
  Tensor hn = stack(h_n, 0), cn = c_n.empty() ? Tensor() : stack(c_n, 0);
  if (unbatched) {
    hn = hn.squeeze(1);
    if (cn.defined()) cn = cn.squeeze(1);
  }
  return {out, hn, cn};
}

}  // namespace detail

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : stack_(*this, options.nonlinearity == RNNNonlinearity::kReLU ? Kind::kRNNReLU : Kind::kRNNTanh, input_size,
             hidden_size, options) {}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& hx) {
  auto [out, hn, cn] = stack_.forward(*this, input, hx, {});
  return {out, hn};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : stack_(*this, Kind::kLSTM, input_size, hidden_size, options) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input,
                                                             std::optional<std::tuple<Tensor, Tensor>> hx) {
  auto [out, hn, cn] = hx ? stack_.forward(*this, input, std::get<0>(*hx), std::get<1>(*hx))
                          : stack_.forward(*this, input, {}, {});
  return {out, {hn, cn}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : stack_(*this, Kind::kGRU, input_size, hidden_size, options) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  auto [out, hn, cn] = stack_.forward(*this, input, hx, {});
  return {out, hn};
}

// ----- cells -----
namespace {

std::string cell_name(const char* cls, int64_t in, int64_t hidden, bool bias, const char* extra = "") {
  return std::string(cls) + "(" + std::to_string(in) + ", " + std::to_string(hidden) + (bias ? "" : ", bias=false") +
         extra + ")";
}

// The cells' hx when none is given: zeros [B, H] ([H] for an unbatched input).
Tensor zero_state(const Tensor& input, int64_t hidden) {
  EMBER_CHECK(input.defined(), "recurrent cell: input is an undefined tensor");
  return input.dim() == 1 ? zeros({hidden}, {input.dtype(), input.device()})
                          : zeros({input.size(0), hidden}, {input.dtype(), input.device()});
}

Tensor& cell_weight(Module& m, const char* name, const char* cls, int64_t rows, int64_t cols, int64_t hidden) {
  check_sizes(cls, cols, hidden);
  return m.register_parameter(name, init_param({rows, cols}, hidden));
}
Tensor& cell_bias(Module& m, const char* name, bool bias, int64_t rows, int64_t hidden) {
  return m.register_parameter(name, bias ? init_param({rows}, hidden) : Tensor());
}

}  // namespace

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, RNNNonlinearity nonlinearity)
    : weight_ih(cell_weight(*this, "weight_ih", "RNNCell", hidden_size, input_size, hidden_size)),
      weight_hh(cell_weight(*this, "weight_hh", "RNNCell", hidden_size, hidden_size, hidden_size)),
      bias_ih(cell_bias(*this, "bias_ih", bias, hidden_size, hidden_size)),
      bias_hh(cell_bias(*this, "bias_hh", bias, hidden_size, hidden_size)),
      input_size_(input_size),
      hidden_size_(hidden_size),
      nonlinearity_(nonlinearity) {}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(input, hidden_size_);
  return nonlinearity_ == RNNNonlinearity::kTanh ? rnn_tanh_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh)
                                                 : rnn_relu_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

std::string RNNCell::name() const {
  return cell_name("RNNCell", input_size_, hidden_size_, bias_ih.defined(),
                   nonlinearity_ == RNNNonlinearity::kReLU ? ", nonlinearity='relu'" : "");
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : weight_ih(cell_weight(*this, "weight_ih", "LSTMCell", 4 * hidden_size, input_size, hidden_size)),
      weight_hh(cell_weight(*this, "weight_hh", "LSTMCell", 4 * hidden_size, hidden_size, hidden_size)),
      bias_ih(cell_bias(*this, "bias_ih", bias, 4 * hidden_size, hidden_size)),
      bias_hh(cell_bias(*this, "bias_hh", bias, 4 * hidden_size, hidden_size)),
      input_size_(input_size),
      hidden_size_(hidden_size) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  const Tensor h = hx ? std::get<0>(*hx) : zero_state(input, hidden_size_);
  const Tensor c = hx ? std::get<1>(*hx) : zero_state(input, hidden_size_);
  auto [h1, c1] = lstm_cell(input, h, c, weight_ih, weight_hh, bias_ih, bias_hh);
  return {h1, c1};
}

std::string LSTMCell::name() const { return cell_name("LSTMCell", input_size_, hidden_size_, bias_ih.defined()); }

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias)
    : weight_ih(cell_weight(*this, "weight_ih", "GRUCell", 3 * hidden_size, input_size, hidden_size)),
      weight_hh(cell_weight(*this, "weight_hh", "GRUCell", 3 * hidden_size, hidden_size, hidden_size)),
      bias_ih(cell_bias(*this, "bias_ih", bias, 3 * hidden_size, hidden_size)),
      bias_hh(cell_bias(*this, "bias_hh", bias, 3 * hidden_size, hidden_size)),
      input_size_(input_size),
      hidden_size_(hidden_size) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(input, hidden_size_);
  return gru_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

std::string GRUCell::name() const { return cell_name("GRUCell", input_size_, hidden_size_, bias_ih.defined()); }

}  // namespace ember::nn
