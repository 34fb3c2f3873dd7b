// pytorch/examples' word_language_model/model.py: RNNModel (an embedding, an LSTM, GRU or
// RNN, a Linear to the vocabulary, optionally tied to the embedding) and TransformerModel
// (an nn::Transformer whose decoder is replaced by a Linear to the vocabulary, with a
// sinusoidal PositionalEncoding and a causal mask).
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "ember.h"

namespace pt_word_language_model {

using ember::Tensor;
namespace nn = ember::nn;

// The recurrent state: h [nlayers, N, nhid], and c for an LSTM.
struct Hidden {
  Tensor h, c;
};

// Container module with an encoder, a recurrent module, and a decoder.
class RNNModel : public nn::Callable<RNNModel> {
 public:
  RNNModel(const std::string& rnn_type, int64_t ntoken, int64_t ninp, int64_t nhid, int64_t nlayers, double dropout = 0.5,
           bool tie_weights = false)
      : drop(register_module("drop", std::make_shared<nn::Dropout>(dropout))),
        encoder(register_module("encoder", std::make_shared<nn::Embedding>(ntoken, ninp))),
        rnn(register_module("rnn", make_rnn(rnn_type, ninp, nhid, nlayers, dropout))),
        decoder(register_module("decoder", std::make_shared<nn::Linear>(nhid, ntoken))),
        rnn_type_(rnn_type),
        ntoken_(ntoken),
        nhid_(nhid),
        nlayers_(nlayers) {
    // Optionally tie weights as in "Using the Output Embedding to Improve Language Models"
    // (Press & Wolf 2016) and "Tying Word Vectors and Word Classifiers" (Inan et al. 2016).
    if (tie_weights) {
      EMBER_CHECK(nhid == ninp, "When using the tied flag, nhid must be equal to emsize");
      decoder->weight = encoder->weight;
    }
    init_weights();
  }

  void init_weights() {
    const double initrange = 0.1;
    nn::init::uniform_(encoder->weight, -initrange, initrange);
    nn::init::zeros_(decoder->bias);
    nn::init::uniform_(decoder->weight, -initrange, initrange);
  }

  // input: int64 token ids [S, N]; (log-probabilities [S * N, ntoken], the next state).
  std::pair<Tensor, Hidden> forward(const Tensor& input, const Hidden& hidden) {
    const Tensor emb = (*drop)((*encoder)(input));
    Tensor output;
    Hidden next;
    if (auto lstm = std::dynamic_pointer_cast<nn::LSTM>(rnn)) {
      std::tuple<Tensor, Tensor> hc;
      std::tie(output, hc) = (*lstm)(emb, std::make_tuple(hidden.h, hidden.c));
      std::tie(next.h, next.c) = hc;
    } else if (auto gru = std::dynamic_pointer_cast<nn::GRU>(rnn)) {
      std::tie(output, next.h) = (*gru)(emb, hidden.h);
    } else {
      std::tie(output, next.h) = (*std::dynamic_pointer_cast<nn::RNN>(rnn))(emb, hidden.h);
    }
    output = (*drop)(output);
    Tensor decoded = (*decoder)(output);
    decoded = decoded.view({-1, ntoken_});
    return {ember::log_softmax(decoded, 1), next};
  }

  Hidden init_hidden(int64_t bsz) const {
    const Tensor& weight = encoder->weight;
    const ember::TensorOptions options(weight.dtype(), weight.device());
    Hidden h{ember::zeros({nlayers_, bsz, nhid_}, options), {}};
    if (rnn_type_ == "LSTM") h.c = ember::zeros({nlayers_, bsz, nhid_}, options);
    return h;
  }
  std::string name() const override { return "RNNModel"; }

  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::Module> rnn;  // nn::LSTM, nn::GRU or nn::RNN
  std::shared_ptr<nn::Linear> decoder;

 private:
  static std::shared_ptr<nn::Module> make_rnn(const std::string& rnn_type, int64_t ninp, int64_t nhid, int64_t nlayers,
                                              double dropout) {
    const nn::RNNOptions options{.num_layers = nlayers, .dropout = dropout};
    if (rnn_type == "LSTM") return std::make_shared<nn::LSTM>(ninp, nhid, options);
    if (rnn_type == "GRU") return std::make_shared<nn::GRU>(ninp, nhid, options);
    EMBER_CHECK(rnn_type == "RNN_TANH" || rnn_type == "RNN_RELU",
                "An invalid option for `--model` was supplied, options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']");
    nn::RNNOptions rnn_options = options;
    rnn_options.nonlinearity = rnn_type == "RNN_TANH" ? nn::RNNNonlinearity::kTanh : nn::RNNNonlinearity::kReLU;
    return std::make_shared<nn::RNN>(ninp, nhid, rnn_options);
  }
  std::string rnn_type_;
  int64_t ntoken_, nhid_, nlayers_;
};

class PositionalEncoding : public nn::Callable<PositionalEncoding> {
 public:
  explicit PositionalEncoding(int64_t d_model, double dropout = 0.1, int64_t max_len = 5000)
      : dropout_(register_module("dropout", std::make_shared<nn::Dropout>(dropout))),
        pe(register_buffer("pe", make_pe(d_model, max_len))) {}
  // x [S, N, E]
  Tensor forward(const Tensor& x) { return (*dropout_)(x + pe.slice(0, 0, x.size(0))); }
  std::string name() const override { return "PositionalEncoding"; }

 private:
  // pe[pos, 2i] = sin(pos / 10000^(2i / d_model)), pe[pos, 2i + 1] the cosine; [max_len, 1,
  // d_model], computed in float32 as the original.
  static Tensor make_pe(int64_t d_model, int64_t max_len) {
    const Tensor position = ember::arange(0, static_cast<double>(max_len), 1, ember::kFloat32).unsqueeze(1);
    const Tensor div_term =
        ember::exp(ember::arange(0, static_cast<double>(d_model), 2, ember::kFloat32) * (-std::log(10000.0) / d_model));
    const Tensor angle = position * div_term;
    // Interleaving the sines and cosines is the original's pe[:, 0::2] = sin, pe[:, 1::2] = cos.
    return ember::stack({ember::sin(angle), ember::cos(angle)}, 2).view({max_len, d_model}).unsqueeze(0).transpose(0, 1).contiguous();
  }
  std::shared_ptr<nn::Dropout> dropout_;

 public:
  Tensor& pe;
};

// Container module with an encoder, a transformer module, and a decoder. As in the
// original, nn::Transformer's decoder stack is replaced by the Linear named "decoder" (the
// base's own `decoder` handle now reads that Linear, and using it as a decoder stack is an
// error). Deriving from nn::Callable<TransformerModel, nn::Transformer> makes (*model)(src)
// run this class's forward.
class TransformerModel : public nn::Callable<TransformerModel, nn::Transformer> {
 public:
  TransformerModel(int64_t ntoken, int64_t ninp, int64_t nhead, int64_t nhid, int64_t nlayers, double dropout = 0.5)
      : Callable({.d_model = ninp, .nhead = nhead, .num_encoder_layers = nlayers, .layer = {.dim_feedforward = nhid}}),
        pos_encoder(register_module("pos_encoder", std::make_shared<PositionalEncoding>(ninp, dropout))),
        input_emb(register_module("input_emb", std::make_shared<nn::Embedding>(ntoken, ninp))),
        decoder(replace_module("decoder", std::make_shared<nn::Linear>(ninp, ntoken))),
        ninp_(ninp) {
    init_weights();
  }

  static Tensor generate_square_subsequent_mask(int64_t sz) { return ember::log(ember::tril(ember::ones({sz, sz}))); }

  void init_weights() {
    const double initrange = 0.1;
    nn::init::uniform_(input_emb->weight, -initrange, initrange);
    nn::init::zeros_(decoder->bias);
    nn::init::uniform_(decoder->weight, -initrange, initrange);
  }

  // src: int64 token ids [S, N]; log-probabilities [S, N, ntoken].
  Tensor forward(const Tensor& src, bool has_mask = true) {
    if (has_mask) {
      if (!src_mask.defined() || src_mask.size(0) != src.size(0))
        src_mask = generate_square_subsequent_mask(src.size(0)).to(src.device()).to(model_dtype());
    } else {
      src_mask = Tensor();
    }
    Tensor x = (*input_emb)(src) * std::sqrt(static_cast<double>(ninp_));
    x = (*pos_encoder)(x);
    Tensor output = (*encoder)(x, src_mask);
    output = (*decoder)(output);
    return ember::log_softmax(output, -1);
  }
  std::string name() const override { return "TransformerModel"; }

  nn::Child<PositionalEncoding> pos_encoder;
  nn::Child<nn::Embedding> input_emb;
  nn::Child<nn::Linear> decoder;
  Tensor src_mask;

 private:
  ember::DType model_dtype() const { return input_emb->weight.dtype(); }  // the model's dtype
  int64_t ninp_;
};

}  // namespace pt_word_language_model
