// pytorch/examples' vision_transformer/main.py (removed upstream in 2025; the last version,
// parent of e8a38cc): patches, a linear projection with a class token and a position
// embedding, pre-norm encoder blocks (one LayerNorm used twice per block) with
// MultiheadAttention and a GELU MLP, and an MLP head on the class token. As in the
// original, the attention gets [batch, patches, latent] while it expects sequence first,
// and the class token and position embedding have one row per sample of --batch-size.
#pragma once

#include <algorithm>
#include <memory>

#include "ember.h"

namespace pt_vit {

using ember::Tensor;
namespace nn = ember::nn;

struct Args {  // the original's command-line arguments the model reads, with its defaults
  int64_t patch_size = 16;
  int64_t latent_size = 768;
  int64_t n_channels = 3;
  int64_t num_heads = 12;
  int64_t num_encoders = 12;
  double dropout = 0.1;
  int64_t num_classes = 10;
  int64_t batch_size = 4;
};

class PatchExtractor : public nn::Callable<PatchExtractor> {
 public:
  explicit PatchExtractor(int64_t patch_size = 16) : patch_size_(patch_size) {}
  Tensor forward(const Tensor& input_data) {
    const int64_t batch_size = input_data.size(0), height = input_data.size(2), width = input_data.size(3);
    EMBER_CHECK(height % patch_size_ == 0 && width % patch_size_ == 0, "Input height (", height, ") and width (", width,
                ") must be divisible by patch size (", patch_size_, ")");
    const int64_t num_patches = (height / patch_size_) * (width / patch_size_);
    return input_data.unfold(2, patch_size_, patch_size_)
        .unfold(3, patch_size_, patch_size_)
        .permute({0, 2, 3, 1, 4, 5})
        .contiguous()
        .view({batch_size, num_patches, -1});
  }
  std::string name() const override { return "PatchExtractor"; }

 private:
  int64_t patch_size_;
};

class InputEmbedding : public nn::Callable<InputEmbedding> {
 public:
  explicit InputEmbedding(const Args& args)
      : patch_size(args.patch_size),
        LinearProjection(register_module(
            "LinearProjection", std::make_shared<nn::Linear>(args.patch_size * args.patch_size * args.n_channels, args.latent_size))),
        class_token(register_parameter("class_token", ember::randn({args.batch_size, 1, args.latent_size}))),
        pos_embedding(register_parameter("pos_embedding", ember::randn({args.batch_size, 1, args.latent_size}))) {}
  Tensor forward(const Tensor& input_data) {
    PatchExtractor patchify(patch_size);
    const Tensor patches = patchify(input_data);
    Tensor linear_projection = (*LinearProjection)(patches);
    const int64_t n = linear_projection.size(1);
    linear_projection = ember::cat({class_token, linear_projection}, 1);
    const Tensor pos_embed = pos_embedding.slice(1, 0, std::min(n + 1, pos_embedding.size(1)));
    return linear_projection + pos_embed;
  }
  std::string name() const override { return "InputEmbedding"; }

  int64_t patch_size;
  std::shared_ptr<nn::Linear> LinearProjection;
  Tensor& class_token;
  Tensor& pos_embedding;
};

class EncoderBlock : public nn::Callable<EncoderBlock> {
 public:
  explicit EncoderBlock(const Args& args)
      : norm(register_module("norm", std::make_shared<nn::LayerNorm>(ember::Shape{args.latent_size}))),
        attention(register_module("attention", std::make_shared<nn::MultiheadAttention>(
                                                   args.latent_size, args.num_heads, nn::MultiheadAttentionOptions{.dropout = args.dropout}))),
        enc_MLP(register_module("enc_MLP", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                               std::make_shared<nn::Linear>(args.latent_size, args.latent_size * 4),
                                               std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(args.dropout),
                                               std::make_shared<nn::Linear>(args.latent_size * 4, args.latent_size),
                                               std::make_shared<nn::Dropout>(args.dropout)}))) {}
  Tensor forward(const Tensor& emb_patches) {
    const Tensor first_norm = (*norm)(emb_patches);
    const Tensor attention_out = (*attention)(first_norm, first_norm, first_norm).first;
    const Tensor first_added = attention_out + emb_patches;
    const Tensor second_norm = (*norm)(first_added);
    const Tensor mlp_out = (*enc_MLP)(second_norm);
    return mlp_out + first_added;
  }
  std::string name() const override { return "EncoderBlock"; }

  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::MultiheadAttention> attention;
  std::shared_ptr<nn::Sequential> enc_MLP;
};

class ViT : public nn::Callable<ViT> {
 public:
  explicit ViT(const Args& args)
      : embedding(register_module("embedding", std::make_shared<InputEmbedding>(args))),
        encoders(register_module("encoders", std::make_shared<nn::ModuleList>())),
        MLPHead(register_module("MLPHead", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                               std::make_shared<nn::LayerNorm>(ember::Shape{args.latent_size}),
                                               std::make_shared<nn::Linear>(args.latent_size, args.latent_size),
                                               std::make_shared<nn::Linear>(args.latent_size, args.num_classes)}))) {
    for (int64_t i = 0; i < args.num_encoders; ++i) encoders->push_back(std::make_shared<EncoderBlock>(args));
  }
  Tensor forward(const Tensor& test_input) {
    Tensor enc_output = (*embedding)(test_input);
    for (const auto& enc_layer : *encoders) enc_output = (*enc_layer)(enc_output);
    const Tensor class_token_embed = enc_output.select(1, 0);
    return (*MLPHead)(class_token_embed);
  }
  std::string name() const override { return "ViT"; }

  std::shared_ptr<InputEmbedding> embedding;
  std::shared_ptr<nn::ModuleList> encoders;
  std::shared_ptr<nn::Sequential> MLPHead;
};

}  // namespace pt_vit
