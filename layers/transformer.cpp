// The Transformer layers: PyTorch's blocks (post- or pre-LayerNorm residual blocks of
// attention and a feed-forward network), the stacks of copies, and the full model.
#include "layers/transformer.h"

#include <limits>

#include "base/error.h"
#include "core/autograd.h"
#include "layers/init.h"

namespace ember::nn {
namespace {

void check_layer(const char* layer, int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  EMBER_CHECK(d_model > 0 && nhead > 0, layer, ": d_model and nhead must be positive, got ", d_model, " and ", nhead);
  EMBER_CHECK(o.dim_feedforward > 0, layer, ": dim_feedforward must be positive, got ", o.dim_feedforward);
  EMBER_CHECK(o.dropout >= 0 && o.dropout <= 1, layer, ": dropout must be in [0, 1], got ", o.dropout);
  EMBER_CHECK(o.layer_norm_eps >= 0, layer, ": layer_norm_eps must be >= 0, got ", o.layer_norm_eps);
}

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return {.dropout = o.dropout, .batch_first = o.batch_first};
}

Tensor activate(TransformerActivation a, const Tensor& x) {
  return a == TransformerActivation::kGELU ? gelu(x) : relu(x);
}

std::string layer_name(const char* cls, int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  return std::string(cls) + "(d_model=" + std::to_string(d_model) + ", nhead=" + std::to_string(nhead) +
         ", dim_feedforward=" + std::to_string(o.dim_feedforward) + ", dropout=" + std::to_string(o.dropout) +
         ", activation=" + (o.activation == TransformerActivation::kGELU ? "gelu" : "relu") +
         ", batch_first=" + (o.batch_first ? "true" : "false") + ", norm_first=" + (o.norm_first ? "true" : "false") +
         ")";
}

// Makes `to` what copy.deepcopy(from) is: the same dtype, device, values and mode.
void copy_module(const Module& from, Module& to) {
  const std::vector<Tensor> params = from.parameters();
  if (!params.empty()) {
    to.to(params.front().dtype());
    to.to(params.front().device());
  }
  to.load_state_dict(from.state_dict());
  to.train(from.is_training());
}

template <class Layer>
std::shared_ptr<ModuleList> clones(const char* stack, const Layer& layer, int64_t n) {
  EMBER_CHECK(n >= 1, stack, ": num_layers must be >= 1, got ", n);
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < n; ++i) list->push_back(layer.clone());
  return list;
}

}  // namespace

// ----- TransformerEncoderLayer -----

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options)
    : d_model_(d_model), nhead_(nhead), options_(options) {
  check_layer("TransformerEncoderLayer", d_model, nhead, options);
  self_attn = register_module("self_attn",
                              std::make_shared<MultiheadAttention>(d_model, nhead, attention_options(options)));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask) {
  const auto sa = [&](const Tensor& x) {
    return (*dropout1)((*self_attn)(x, x, x, src_key_padding_mask, false, src_mask).first);
  };
  const auto ff = [&](const Tensor& x) {
    return (*dropout2)((*linear2)((*dropout)(activate(options_.activation, (*linear1)(x)))));
  };
  Tensor x = src;
  if (options_.norm_first) {
    x = add(x, sa((*norm1)(x)));
    return add(x, ff((*norm2)(x)));
  }
  x = (*norm1)(add(x, sa(x)));
  return (*norm2)(add(x, ff(x)));
}

std::string TransformerEncoderLayer::name() const {
  return layer_name("TransformerEncoderLayer", d_model_, nhead_, options_);
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  auto c = std::make_shared<TransformerEncoderLayer>(d_model_, nhead_, options_);
  copy_module(*this, *c);
  return c;
}

// ----- TransformerDecoderLayer -----

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options)
    : d_model_(d_model), nhead_(nhead), options_(options) {
  check_layer("TransformerDecoderLayer", d_model, nhead, options);
  self_attn = register_module("self_attn",
                              std::make_shared<MultiheadAttention>(d_model, nhead, attention_options(options)));
  multihead_attn = register_module("multihead_attn",
                                   std::make_shared<MultiheadAttention>(d_model, nhead, attention_options(options)));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask) {
  const auto sa = [&](const Tensor& x) {
    return (*dropout1)((*self_attn)(x, x, x, tgt_key_padding_mask, false, tgt_mask).first);
  };
  const auto mha = [&](const Tensor& x) {
    return (*dropout2)((*multihead_attn)(x, memory, memory, memory_key_padding_mask, false, memory_mask).first);
  };
  const auto ff = [&](const Tensor& x) {
    return (*dropout3)((*linear2)((*dropout)(activate(options_.activation, (*linear1)(x)))));
  };
  Tensor x = tgt;
  if (options_.norm_first) {
    x = add(x, sa((*norm1)(x)));
    x = add(x, mha((*norm2)(x)));
    return add(x, ff((*norm3)(x)));
  }
  x = (*norm1)(add(x, sa(x)));
  x = (*norm2)(add(x, mha(x)));
  return (*norm3)(add(x, ff(x)));
}

std::string TransformerDecoderLayer::name() const {
  return layer_name("TransformerDecoderLayer", d_model_, nhead_, options_);
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const {
  auto c = std::make_shared<TransformerDecoderLayer>(d_model_, nhead_, options_);
  copy_module(*this, *c);
  return c;
}

// ----- the stacks -----

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm_)
    : layers(register_module("layers", clones("TransformerEncoder", layer, num_layers))) {
  if (norm_) norm = register_module("norm", std::move(norm_));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (const auto& m : *layers)
    x = (*std::static_pointer_cast<TransformerEncoderLayer>(m))(x, mask, src_key_padding_mask);
  return norm ? (*norm)(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm_)
    : layers(register_module("layers", clones("TransformerDecoder", layer, num_layers))) {
  if (norm_) norm = register_module("norm", std::move(norm_));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (const auto& m : *layers)
    x = (*std::static_pointer_cast<TransformerDecoderLayer>(m))(x, memory, tgt_mask, memory_mask,
                                                                  tgt_key_padding_mask, memory_key_padding_mask);
  return norm ? (*norm)(x) : x;
}

// ----- Transformer -----

Transformer::Transformer(TransformerOptions options) : options_(options) {
  const int64_t d = options.d_model;
  const double eps = options.layer.layer_norm_eps;
  encoder = register_module(
      "encoder", std::make_shared<TransformerEncoder>(TransformerEncoderLayer(d, options.nhead, options.layer),
                                                      options.num_encoder_layers,
                                                      std::make_shared<LayerNorm>(Shape{d}, eps)));
  decoder = register_module(
      "decoder", std::make_shared<TransformerDecoder>(TransformerDecoderLayer(d, options.nhead, options.layer),
                                                      options.num_decoder_layers,
                                                      std::make_shared<LayerNorm>(Shape{d}, eps)));
  for (const Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask) {
  EMBER_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt must be defined");
  EMBER_CHECK(src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3), "Transformer: src ",
              shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()), " must both be 3-D (or both 2-D, unbatched)");
  const int64_t batch_dim = options_.layer.batch_first ? 0 : 1;
  EMBER_CHECK(src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim), "Transformer: the batch sizes of src ",
              shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()), " differ");
  EMBER_CHECK(src.size(-1) == options_.d_model && tgt.size(-1) == options_.d_model, "Transformer: src ",
              shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()), " must end in d_model = ", options_.d_model,
              " features");
  const Tensor memory = (*encoder)(src, src_mask, src_key_padding_mask);
  return (*decoder)(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, TensorOptions options) {
  EMBER_CHECK(sz >= 0, "generate_square_subsequent_mask: size must be >= 0, got ", sz);
  EMBER_CHECK(is_floating(options.dtype), "generate_square_subsequent_mask: the mask is a float mask, not ",
              dtype_name(options.dtype));
  const TensorOptions idx{kInt64, options.device};
  const Tensor above = gt(arange(0, static_cast<double>(sz), 1, idx).unsqueeze(0),
                          arange(0, static_cast<double>(sz), 1, idx).unsqueeze(1));
  return where(above, scalar_tensor(-std::numeric_limits<double>::infinity(), options),
               scalar_tensor(0.0, options));
}

}  // namespace ember::nn
