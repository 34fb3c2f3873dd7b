// MultiheadAttention: PyTorch's in-projection (packed or separate weights), bias_kv and
// zero-attention rows, its mask conventions turned into scaled_dot_product_attention's,
// the heads split and joined, and the out-projection.
#include "layers/attention.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "base/error.h"
#include "core/autograd.h"
#include "layers/init.h"
#include "memory/site.h"

namespace ember::nn {
namespace {

// A mask as PyTorch's MultiheadAttention reads it, checked: bool, or a float of `dtype`.
void check_mask(const char* what, const Tensor& m, DType dtype, const Shape& want, const Shape& or_want = {}) {
  if (!m.defined()) return;
  EMBER_CHECK(m.dtype() == kBool || m.dtype() == dtype, "MultiheadAttention: ", what,
              " must be bool or a float mask of the query's dtype ", dtype_name(dtype), ", got ",
              dtype_name(m.dtype()));
  EMBER_CHECK(m.shape() == want || (!or_want.empty() && m.shape() == or_want), "MultiheadAttention: ", what, " is ",
              shape_str(m.shape()), ", expected ", shape_str(want),
              or_want.empty() ? std::string() : " or " + shape_str(or_want));
}

// One more key position, which no mask excludes (bias_kv, add_zero_attn).
Tensor pad_key(const Tensor& m) {
  if (!m.defined()) return m;
  Shape s = m.shape();
  s.back() = 1;
  return cat({m, zeros(s, {m.dtype(), m.device()})}, -1);
}

// PyTorch's bool mask (true: excluded) as an additive one of `dtype`.
Tensor additive(const Tensor& m, DType dtype) {
  if (!m.defined() || m.dtype() != kBool) return m;
  return where(m, scalar_tensor(-std::numeric_limits<double>::infinity(), {dtype, m.device()}),
               scalar_tensor(0.0, {dtype, m.device()}));
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  const int64_t E = embed_dim;
  EMBER_CHECK(E > 0 && num_heads > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ", E, " and ",
              num_heads);
  EMBER_CHECK(E % num_heads == 0, "MultiheadAttention: embed_dim ", E, " is not divisible by num_heads ", num_heads);
  EMBER_CHECK(options.dropout >= 0 && options.dropout <= 1, "MultiheadAttention: dropout must be in [0, 1], got ",
              options.dropout);
  EMBER_CHECK(options.kdim >= 0 && options.vdim >= 0, "MultiheadAttention: kdim and vdim must be positive (0: ",
              "embed_dim), got ", options.kdim, " and ", options.vdim);
  if (options_.kdim == 0) options_.kdim = E;
  if (options_.vdim == 0) options_.vdim = E;
  if (options_.kdim == E && options_.vdim == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
    init::xavier_uniform_(in_proj_weight);
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, options_.kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, options_.vdim}));
    for (const Tensor& w : {q_proj_weight, k_proj_weight, v_proj_weight}) init::xavier_uniform_(w);
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * E}));
  if (options.add_bias_kv) {
    bias_k = register_parameter("bias_k", empty({1, 1, E}));
    bias_v = register_parameter("bias_v", empty({1, 1, E}));
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, options.bias));
  if (options.bias) {
    NoGradGuard no_grad;
    out_proj->bias.zero_();
  }
}

std::string MultiheadAttention::name() const {
  return "MultiheadAttention(embed_dim=" + std::to_string(embed_dim_) + ", num_heads=" + std::to_string(num_heads_) +
         ", dropout=" + std::to_string(options_.dropout) + ", batch_first=" + (options_.batch_first ? "true" : "false") +
         ")";
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights) {
  EMBER_OP_SITE("MultiheadAttention");
  for (const Tensor* t : {&query, &key, &value})
    EMBER_CHECK(t->defined(), "MultiheadAttention: query, key and value must be defined");
  const bool batched = query.dim() == 3;
  EMBER_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(),
              "MultiheadAttention: query, key and value must be 3-D ([L, N, E]; [N, L, E] with batch_first) or ",
              "2-D (unbatched [L, E]), got ", shape_str(query.shape()), ", ", shape_str(key.shape()), " and ",
              shape_str(value.shape()));
  // Batch-first inside: [N, L, E].
  auto batch_first = [&](const Tensor& t) {
    return !batched ? t.unsqueeze(0) : (options_.batch_first ? t : t.transpose(0, 1));
  };
  const Tensor q = batch_first(query), k = batch_first(key), v = batch_first(value);
  const int64_t E = embed_dim_, H = num_heads_, N = q.size(0), L = q.size(1), S = k.size(1);
  EMBER_CHECK(q.size(2) == E && k.size(2) == options_.kdim && v.size(2) == options_.vdim,
              "MultiheadAttention: query, key and value must end in ", E, ", ", options_.kdim, " and ", options_.vdim,
              " features, got ", shape_str(query.shape()), ", ", shape_str(key.shape()), " and ",
              shape_str(value.shape()));
  EMBER_CHECK(k.size(0) == N && v.size(0) == N && v.size(1) == S, "MultiheadAttention: key ", shape_str(key.shape()),
              " and value ", shape_str(value.shape()), " must match each other and the query ",
              shape_str(query.shape()), " in batch size and key and value in length");
  check_mask("key_padding_mask", key_padding_mask, q.dtype(), batched ? Shape{N, S} : Shape{S});
  check_mask("attn_mask", attn_mask, q.dtype(), {L, S}, {N * H, L, S});

  // In-projection: one GEMM for self-attention, as PyTorch's packed weight gives.
  const auto part = [E](const Tensor& w, int64_t i) { return w.defined() ? w.narrow(0, i * E, E) : Tensor(); };
  Tensor qp, kp, vp;
  if (in_proj_weight.defined() && query.impl_ptr() == key.impl_ptr() && key.impl_ptr() == value.impl_ptr()) {
    const Tensor qkv = linear(q, in_proj_weight, in_proj_bias);
    qp = qkv.narrow(-1, 0, E);
    kp = qkv.narrow(-1, E, E);
    vp = qkv.narrow(-1, 2 * E, E);
  } else {
    qp = linear(q, in_proj_weight.defined() ? part(in_proj_weight, 0) : q_proj_weight, part(in_proj_bias, 0));
    kp = linear(k, in_proj_weight.defined() ? part(in_proj_weight, 1) : k_proj_weight, part(in_proj_bias, 1));
    vp = linear(v, in_proj_weight.defined() ? part(in_proj_weight, 2) : v_proj_weight, part(in_proj_bias, 2));
  }
  // [N, L] masks with the key positions last: [N * H, L, S] -> [N, H, L, S], [N, S] -> [N, 1, 1, S].
  Tensor am = attn_mask.defined() && attn_mask.dim() == 3 ? attn_mask.view({N, H, L, S}) : attn_mask;
  Tensor km = key_padding_mask.defined() ? key_padding_mask.reshape({N, 1, 1, S}) : Tensor();
  if (bias_k.defined()) {
    kp = cat({kp, bias_k.expand({N, 1, E})}, 1);
    vp = cat({vp, bias_v.expand({N, 1, E})}, 1);
    am = pad_key(am);
    km = pad_key(km);
  }
  const auto heads = [N, H, E](const Tensor& t) { return t.reshape({N, t.size(1), H, E / H}).transpose(1, 2); };
  Tensor qh = heads(qp), kh = heads(kp), vh = heads(vp);  // [N, H, L or S, E / H]
  if (options_.add_zero_attn) {
    const Tensor z = zeros({N, H, 1, E / H}, {kh.dtype(), kh.device()});
    kh = cat({kh, z}, 2);
    vh = cat({vh, z}, 2);
    am = pad_key(am);
    km = pad_key(km);
  }
  // scaled_dot_product_attention's bool mask says which keys take part: the complement.
  AttentionOptions o{.dropout_p = is_training() ? options_.dropout : 0.0};
  if (am.defined() && km.defined())
    o.attn_mask = add(additive(am, q.dtype()), additive(km, q.dtype()));
  else if (const Tensor& m = am.defined() ? am : km; m.defined())
    o.attn_mask = m.dtype() == kBool ? eq(m, Scalar(false)) : m;
  Tensor out, weights;
  if (need_weights)
    std::tie(out, weights) = scaled_dot_product_attention_math(qh, kh, vh, o);
  else
    out = scaled_dot_product_attention(qh, kh, vh, o);
  out = (*out_proj)(out.transpose(1, 2).reshape({N, L, E}));
  out = !batched ? out.squeeze(0) : (options_.batch_first ? out : out.transpose(0, 1));
  if (need_weights) {
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = weights.squeeze(0);
  }
  return {out, weights};
}

}  // namespace ember::nn
