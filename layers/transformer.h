// Transformer layers: TransformerEncoderLayer / TransformerDecoderLayer, the stacks
// TransformerEncoder / TransformerDecoder, and Transformer, with PyTorch's submodule and
// parameter names (self_attn, multihead_attn, linear1, linear2, norm1..3, layers.N,
// encoder.norm, ...), defaults and forward arguments, so a PyTorch state dict loads one to
// one. Masks are MultiheadAttention's (layers/attention.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "layers/activation.h"
#include "layers/attention.h"
#include "layers/containers.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/normalization.h"

namespace ember::nn {

// The feed-forward block's activation (PyTorch's activation="relu" or "gelu").
enum class TransformerActivation { kReLU, kGELU };

// The arguments of the Transformer layers after d_model and nhead, PyTorch's defaults.
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;  // after attention, inside and after the feed-forward block, on the attention weights
  TransformerActivation activation = TransformerActivation::kReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // [N, S, E] rather than [S, N, E]
  bool norm_first = false;   // pre-LayerNorm blocks (x + f(norm(x))) rather than post (norm(x + f(x)))
};

// Self-attention and a feed-forward block, each with a residual connection and LayerNorm.
class TransformerEncoderLayer : public Callable<TransformerEncoderLayer> {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  Tensor forward(const Tensor& src) { return forward(src, Tensor()); }
  // src [S, N, E] ([N, S, E] with batch_first; unbatched [S, E]); src_mask and
  // src_key_padding_mask as MultiheadAttention's attn_mask and key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {});
  std::string name() const override;
  // A new layer with this one's configuration, parameter values, device and mode.
  std::shared_ptr<TransformerEncoderLayer> clone() const;

  Child<MultiheadAttention> self_attn;
  Child<Linear> linear1, linear2;
  Child<Dropout> dropout, dropout1, dropout2;
  Child<LayerNorm> norm1, norm2;

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
};

// Self-attention, attention over the encoder's output (memory), and a feed-forward block.
class TransformerDecoderLayer : public Callable<TransformerDecoderLayer> {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  // tgt [T, N, E] and memory [S, N, E] (batch_first: [N, T, E], [N, S, E]); the masks as
  // MultiheadAttention's, tgt_* for the self-attention, memory_* for the attention over memory.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});
  std::string name() const override;
  std::shared_ptr<TransformerDecoderLayer> clone() const;

  Child<MultiheadAttention> self_attn, multihead_attn;
  Child<Linear> linear1, linear2;
  Child<Dropout> dropout, dropout1, dropout2, dropout3;
  Child<LayerNorm> norm1, norm2, norm3;

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
};

// num_layers copies of `layer` (same configuration and starting values, as PyTorch's
// deep copies), then the optional final norm ("layers.0...", "norm.weight").
class TransformerEncoder : public Callable<TransformerEncoder> {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& src) { return forward(src, Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {});

  Child<ModuleList> layers;
  Child<LayerNorm> norm;  // empty when not given
};

class TransformerDecoder : public Callable<TransformerDecoder> {
 public:
  TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});

  Child<ModuleList> layers;
  Child<LayerNorm> norm;
};

// torch.nn.Transformer's arguments, its defaults.
struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  TransformerLayerOptions layer{};  // dim_feedforward, dropout, activation, eps, batch_first, norm_first
};

// An encoder and a decoder with final LayerNorms; every parameter of more than one dim
// starts Xavier-uniform, as in PyTorch.
class Transformer : public Callable<Transformer> {
 public:
  explicit Transformer(TransformerOptions options = {});
  // src [S, N, E], tgt [T, N, E] ([N, ., E] with batch_first) -> [T, N, E].
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  // The causal mask [sz, sz] for tgt_mask: 0 on and below the diagonal, -inf above.
  static Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options = {});

  Child<TransformerEncoder> encoder;
  Child<TransformerDecoder> decoder;

 private:
  TransformerOptions options_;
};

}  // namespace ember::nn
