// Attention: MultiheadAttention, with PyTorch's parameter names, shapes, initialisation
// and mask conventions, on core's scaled_dot_product_attention (core/ops.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/ops.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace ember::nn {

// MultiheadAttention's arguments after embed_dim and num_heads, PyTorch's defaults.
struct MultiheadAttentionOptions {
  double dropout = 0;          // on the attention weights, in training mode only
  bool bias = true;            // in_proj_bias and out_proj.bias
  bool add_bias_kv = false;    // bias_k, bias_v [1, 1, embed_dim]: one more key and value
  bool add_zero_attn = false;  // one more key and value of zeros (after the projections)
  int64_t kdim = 0;            // features of key (0: embed_dim)
  int64_t vdim = 0;            // features of value (0: embed_dim)
  bool batch_first = false;    // [N, L, E] rather than [L, N, E]
};

// torch.nn.MultiheadAttention. Parameters: in_proj_weight [3E, E] (or, when kdim or vdim
// differ from E, q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]),
// in_proj_bias [3E], bias_k and bias_v [1, 1, E] with add_bias_kv, out_proj.weight [E, E],
// out_proj.bias [E]: a PyTorch state dict loads as it is. Initialised as PyTorch does
// (Xavier-uniform projections, zero biases, Xavier-normal bias_k / bias_v).
class MultiheadAttention : public Callable<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // query [L, N, E] (batch_first: [N, L, E]; unbatched: [L, E]), key [S, N, kdim] and
  // value [S, N, vdim] likewise. Masks, as PyTorch's MultiheadAttention takes them:
  //   key_padding_mask [N, S] (unbatched [S]): bool, true = ignore that key; or a float
  //     mask of the query's dtype, added;
  //   attn_mask [L, S] or [N * num_heads, L, S]: bool, true = may NOT attend (the
  //     opposite of scaled_dot_product_attention's bool mask); or a float mask, added.
  // Returns the output [L, N, E] (as query) and, when need_weights, the attention weights
  // [N, L, S] averaged over the heads ([N, num_heads, L, S] without averaging; no N when
  // unbatched), after dropout; undefined otherwise. A query whose keys are all masked
  // gets a zero output and zero weights (PyTorch's scaled_dot_product_attention; PyTorch's
  // MultiheadAttention gives NaN there).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = {}, bool need_weights = true,
                                    const Tensor& attn_mask = {}, bool average_attn_weights = true);
  std::string name() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return options_; }

  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias, bias_k, bias_v;
  Child<Linear> out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
};

}  // namespace ember::nn
