// A decoder-only transformer, nanoGPT's model.py (karpathy/nanoGPT) on ember's layers:
// token and position embeddings, pre-LayerNorm blocks of causal multi-head self-attention
// and a GELU MLP, a final LayerNorm, and an output layer tied to the token embedding.
// Parameter names are nanoGPT's ("transformer.h.0.attn.c_attn.weight", "lm_head.weight"),
// so a state dict maps one to one; bias = False as nanoGPT's shakespeare_char config
// (the LayerNorms have a weight only, the Linears no bias).
//
// Attention is one call of scaled_dot_product_attention with is_causal, so the fused
// kernels run (docs/attention.md): a step's memory is linear in the context length.
// Generation runs with a KV cache (KVCache): each new token's query attends to the keys
// and values kept from the tokens before it, one position per call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/layers.h"
#include "optim/optimizer.h"

namespace ember::examples::gpt {

struct GPTConfig {
  int64_t vocab_size = 0;
  int64_t block_size = 64;  // the longest context
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0;       // after the embeddings, on the attention weights, after each residual branch
  bool checkpoint = false;  // activation checkpointing: each block keeps only its input (nn::Checkpoint)
};

// The keys and values of the tokens seen so far, per layer: [B, n_head, length, head dim].
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
};

class CausalSelfAttention : public nn::Callable<CausalSelfAttention> {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x);  // x [B, T, C] -> [B, T, C]
  // x [B, t, C], the tokens after the cache's `k`, `v` of this layer, which grow by t. With
  // an empty cache t may be several (the prompt, attending causally); after that, 1.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache);
  std::string name() const override { return "CausalSelfAttention"; }

  std::shared_ptr<nn::Linear> c_attn, c_proj;  // [3C, C], [C, C]

 private:
  // q, k, v [B, n_head, t, head dim] of x [B, t, C].
  std::vector<Tensor> heads(const Tensor& x);
  // y [B, n_head, t, head dim] -> the residual branch's output [B, t, C].
  Tensor project(const Tensor& y);
  int64_t n_head_, n_embd_;
  double dropout_;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

class MLP : public nn::Callable<MLP> {
 public:
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "MLP"; }
  std::shared_ptr<nn::Linear> c_fc, c_proj;  // [4C, C], [C, 4C]

 private:
  std::shared_ptr<nn::Dropout> dropout;
};

class Block : public nn::Callable<Block> {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x);
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache);
  std::string name() const override { return "Block"; }
  // In nanoGPT's order (members are registered as they are initialised).
  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

class GPT : public nn::Callable<GPT> {
 public:
  // Initialised as nanoGPT: every Linear and Embedding weight N(0, 0.02), the residual
  // projections (c_proj) N(0, 0.02 / sqrt(2 n_layer)), LayerNorm weights 1.
  explicit GPT(const GPTConfig& c);
  // idx [B, T] token ids (int64), T <= block_size -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx);
  // The mean cross entropy of forward(idx) against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // Logits [B, t, vocab] of the t tokens idx [B, t] that follow the cache's; the cache
  // takes their keys and values. cache.length + t <= block_size.
  Tensor forward_cached(const Tensor& idx, KVCache& cache);
  std::string name() const override;
  const GPTConfig& config() const { return config_; }
  // Parameters without the position embedding, as nanoGPT's get_num_params counts them.
  int64_t num_params() const;

  // Registered in a ModuleDict "transformer", as nanoGPT's names have them.
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // weight tied to wte's

 private:
  Tensor embed(const Tensor& idx, int64_t first_position);
  GPTConfig config_;
  std::shared_ptr<nn::Dropout> drop;
  std::vector<std::shared_ptr<nn::Checkpoint>> checkpointed_;  // --checkpoint: h[i] wrapped, not registered
};

// The two parameter groups of training: the Linear weights (2-D, matmul weights) with
// `weight_decay`, and everything else (LayerNorm weights, the embeddings, and so the tied
// output weight) without. nanoGPT decays every 2-D tensor, embeddings included; issue 31
// asks for the embeddings undecayed, and the PyTorch peer follows the same rule.
std::vector<optim::ParamGroup> gpt_param_groups(const GPT& model, double weight_decay);

}  // namespace ember::examples::gpt
