// nanoGPT's model (model.h) on ember's layers.
#include "examples/gpt/model.h"

#include <cmath>

#include "base/error.h"
#include "core/autograd.h"

namespace ember::examples::gpt {
namespace {

// nanoGPT's LayerNorm(ndim, bias=False): a weight, no bias.
std::shared_ptr<nn::LayerNorm> layer_norm(int64_t n) {
  auto ln = std::make_shared<nn::LayerNorm>(Shape{n});
  ln->replace_parameter("bias", Tensor());
  return ln;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : c_attn(register_module("c_attn", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd, false))),
      c_proj(register_module("c_proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd, false))),
      n_head_(c.n_head),
      n_embd_(c.n_embd),
      dropout_(c.dropout),
      resid_dropout(register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout))) {}

std::vector<Tensor> CausalSelfAttention::heads(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  // One copy into [3, B, n_head, T, head dim]: q, k and v are then contiguous views, as the
  // fused attention takes them (nanoGPT's split, view and transpose copy each of them).
  const Tensor qkv =
      (*c_attn)(x).reshape({B, T, 3, n_head_, n_embd_ / n_head_}).permute({2, 0, 3, 1, 4}).contiguous();
  return {qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2)};
}

Tensor CausalSelfAttention::project(const Tensor& y) {
  const int64_t B = y.size(0), T = y.size(2);
  return (*resid_dropout)((*c_proj)(y.transpose(1, 2).reshape({B, T, n_embd_})));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const std::vector<Tensor> qkv = heads(x);
  return project(scaled_dot_product_attention(
      qkv[0], qkv[1], qkv[2], {.is_causal = true, .dropout_p = is_training() ? dropout_ : 0.0}));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache) {
  const std::vector<Tensor> qkv = heads(x);
  const bool first = !k_cache.defined();
  EMBER_CHECK(first || x.size(1) == 1, "GPT::forward_cached: after the prompt, one token per call, got ", x.size(1));
  k_cache = first ? qkv[1] : cat({k_cache, qkv[1]}, 2);
  v_cache = first ? qkv[2] : cat({v_cache, qkv[2]}, 2);
  // The prompt attends causally; a later token's one query sees every cached key.
  return project(scaled_dot_product_attention(qkv[0], k_cache, v_cache, {.is_causal = first}));
}

MLP::MLP(const GPTConfig& c)
    : c_fc(register_module("c_fc", std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd, false))),
      c_proj(register_module("c_proj", std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd, false))),
      dropout(register_module("dropout", std::make_shared<nn::Dropout>(c.dropout))) {}

Tensor MLP::forward(const Tensor& x) { return (*dropout)((*c_proj)(gelu((*c_fc)(x)))); }

Block::Block(const GPTConfig& c)
    : ln_1(register_module("ln_1", layer_norm(c.n_embd))),
      attn(register_module("attn", std::make_shared<CausalSelfAttention>(c))),
      ln_2(register_module("ln_2", layer_norm(c.n_embd))),
      mlp(register_module("mlp", std::make_shared<MLP>(c))) {}

Tensor Block::forward(const Tensor& x) {
  const Tensor y = add(x, (*attn)((*ln_1)(x)));
  return add(y, (*mlp)((*ln_2)(y)));
}

Tensor Block::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache) {
  const Tensor y = add(x, attn->forward_cached((*ln_1)(x), k_cache, v_cache));
  return add(y, (*mlp)((*ln_2)(y)));
}

GPT::GPT(const GPTConfig& c) : config_(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
              "GPT: vocab_size, block_size, n_layer, n_head and n_embd must be positive, got ", c.vocab_size, ", ",
              c.block_size, ", ", c.n_layer, ", ", c.n_head, ", ", c.n_embd);
  EMBER_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd ", c.n_embd, " is not a multiple of n_head ", c.n_head);
  EMBER_CHECK(c.dropout >= 0 && c.dropout < 1, "GPT: dropout must be in [0, 1), got ", c.dropout);
  auto transformer = register_module("transformer", std::make_shared<nn::ModuleDict>());
  wte = std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd);
  wpe = std::make_shared<nn::Embedding>(c.block_size, c.n_embd);
  drop = std::make_shared<nn::Dropout>(c.dropout);
  h = std::make_shared<nn::ModuleList>();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
  ln_f = layer_norm(c.n_embd);
  transformer->insert("wte", wte);
  transformer->insert("wpe", wpe);
  transformer->insert("drop", drop);
  transformer->insert("h", h);
  transformer->insert("ln_f", ln_f);
  lm_head = register_module("lm_head", std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, false));
  lm_head->weight = wte->weight;  // Note [One place per parameter] (layers/module.h)

  NoGradGuard no_grad;
  for (const Tensor& w : {wte->weight, wpe->weight}) nn::init::normal_(w, 0, 0.02);
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (const auto& m : *h) {
    const auto& block = static_cast<const Block&>(*m);
    nn::init::normal_(block.attn->c_attn->weight, 0, 0.02);
    nn::init::normal_(block.attn->c_proj->weight, 0, proj_std);
    nn::init::normal_(block.mlp->c_fc->weight, 0, 0.02);
    nn::init::normal_(block.mlp->c_proj->weight, 0, proj_std);
    if (c.checkpoint) checkpointed_.push_back(std::make_shared<nn::Checkpoint>(m));
  }
}

Tensor GPT::embed(const Tensor& idx, int64_t first) {
  EMBER_CHECK(idx.dim() == 2, "GPT: the token ids must be [B, T], got ", shape_str(idx.shape()));
  const int64_t T = idx.size(1);
  EMBER_CHECK(first + T <= config_.block_size, "GPT: cannot forward a sequence of length ", first + T,
              ", the block size is only ", config_.block_size);
  const Tensor pos = arange(static_cast<double>(first), static_cast<double>(first + T), 1, {kInt64, idx.device()});
  return (*drop)(add((*wte)(idx), (*wpe)(pos)));
}

Tensor GPT::forward(const Tensor& idx) {
  Tensor x = embed(idx, 0);
  for (size_t i = 0; i < h->size(); ++i) x = checkpointed_.empty() ? (*(*h)[i])(x) : (*checkpointed_[i])(x);
  return (*lm_head)((*ln_f)(x));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  const Tensor logits = (*this)(idx);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) {
  Tensor x = embed(idx, cache.length);
  cache.k.resize(h->size());
  cache.v.resize(h->size());
  for (size_t i = 0; i < h->size(); ++i) x = h->at<Block>(i)->forward_cached(x, cache.k[i], cache.v[i]);
  cache.length += idx.size(1);
  return (*lm_head)((*ln_f)(x));
}

std::string GPT::name() const {
  return detail::str("GPT(vocab_size=", config_.vocab_size, ", block_size=", config_.block_size,
                     ", n_layer=", config_.n_layer, ", n_head=", config_.n_head, ", n_embd=", config_.n_embd, ")");
}

int64_t GPT::num_params() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n - wpe->weight.numel();
}

std::vector<optim::ParamGroup> gpt_param_groups(const GPT& model, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) {
    const bool embedding = &p.impl() == &model.wte->weight.impl() || &p.impl() == &model.wpe->weight.impl();
    (p.dim() >= 2 && !embedding ? decay : no_decay).push_back(p);
  }
  return {{.params = decay, .weight_decay = weight_decay}, {.params = no_decay, .weight_decay = 0.0}};
}

}  // namespace ember::examples::gpt
