// MultiheadAttention and the Transformer layers (layers/attention.h, layers/transformer.h):
// step-by-step agreement with PyTorch's modules (attention.safetensors, written by
// tests/refcases/attention_twin.py: PyTorch's own weights loaded through the state dict,
// the forward, and the gradients of inputs and parameters, float64, dropout 0), state-dict
// names, the copies a stack makes, dropout by mode, fully masked queries, the causal mask
// helper, and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember.h"
#include "tests/core/refcase_util.h"
#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

using refcase::json;
using refcase::RefFile;

nn::TransformerLayerOptions layer_options(const json& m) {
  return {.dim_feedforward = 16,
          .dropout = 0,
          .activation = m.value("activation", "relu") == "gelu" ? nn::TransformerActivation::kGELU
                                                               : nn::TransformerActivation::kReLU,
          .batch_first = m.value("batch_first", false),
          .norm_first = m.value("norm_first", false)};
}

// The ember module of a case, in float64 with PyTorch's weights (strict: the names and
// shapes of the state dict map one to one), and the call that runs it.
struct Built {
  std::shared_ptr<nn::Module> module;
  std::function<std::pair<Tensor, Tensor>(const std::function<Tensor(const std::string&)>&)> call;
};

Built build(const RefFile& f, int64_t i, const json& m) {
  const std::string op = m.at("op");
  const int64_t E = m.value("embed_dim", m.value("d_model", int64_t{0}));
  Built b;
  if (op == "mha" || op == "mha_self") {
    auto mha = std::make_shared<nn::MultiheadAttention>(
        E, m.at("num_heads").get<int64_t>(),
        nn::MultiheadAttentionOptions{.bias = m.value("bias", true),
                                      .add_bias_kv = m.value("add_bias_kv", false),
                                      .add_zero_attn = m.value("add_zero_attn", false),
                                      .kdim = m.value("kdim", int64_t{0}),
                                      .vdim = m.value("vdim", int64_t{0}),
                                      .batch_first = m.at("batch_first").get<bool>()});
    const bool weights = m.at("need_weights"), average = m.value("average_attn_weights", true);
    b.call = [mha, self = op == "mha_self", weights, average](const auto& in) {
      const Tensor q = in(self ? "x" : "query");
      return (*mha)(q, self ? q : in("key"), self ? q : in("value"), in("key_padding_mask"), weights,
                    in("attn_mask"), average);
    };
    b.module = mha;
  } else if (op == "encoder_layer") {
    auto l = std::make_shared<nn::TransformerEncoderLayer>(E, m.at("nhead").get<int64_t>(), layer_options(m));
    b.call = [l](const auto& in) {
      return std::pair<Tensor, Tensor>{(*l)(in("src"), in("src_mask"), in("src_key_padding_mask")), {}};
    };
    b.module = l;
  } else if (op == "decoder_layer") {
    auto l = std::make_shared<nn::TransformerDecoderLayer>(E, m.at("nhead").get<int64_t>(), layer_options(m));
    b.call = [l](const auto& in) {
      return std::pair<Tensor, Tensor>{(*l)(in("tgt"), in("memory"), in("tgt_mask"), in("memory_mask"),
                                            in("tgt_key_padding_mask"), in("memory_key_padding_mask")),
                                       {}};
    };
    b.module = l;
  } else if (op == "encoder") {
    auto enc = std::make_shared<nn::TransformerEncoder>(
        nn::TransformerEncoderLayer(E, m.at("nhead").get<int64_t>(), layer_options(m)),
        m.at("num_layers").get<int64_t>(), std::make_shared<nn::LayerNorm>(Shape{E}));
    b.call = [enc](const auto& in) { return std::pair<Tensor, Tensor>{(*enc)(in("src"), in("mask")), {}}; };
    b.module = enc;
  } else {
    EXPECT_EQ(op, "transformer");
    auto t = std::make_shared<nn::Transformer>(nn::TransformerOptions{
        .d_model = E,
        .nhead = m.at("nhead").get<int64_t>(),
        .num_encoder_layers = m.at("num_encoder_layers").get<int64_t>(),
        .num_decoder_layers = m.at("num_decoder_layers").get<int64_t>(),
        .layer = layer_options(m)});
    b.call = [t](const auto& in) {
      return std::pair<Tensor, Tensor>{(*t)(in("src"), in("tgt"), in("src_mask"), in("tgt_mask"), in("memory_mask"),
                                            in("src_key_padding_mask"), in("tgt_key_padding_mask"),
                                            in("memory_key_padding_mask")),
                                       {}};
    };
    b.module = t;
  }
  b.module->to(kFloat64);
  NamedTensors state;
  const std::string prefix = "case" + std::to_string(i) + ".param.";
  for (const auto& [name, t] : f.st.tensors)
    if (name.rfind(prefix, 0) == 0) state.emplace_back(name.substr(prefix.size()), t);
  b.module->load_state_dict(state, /*strict=*/true);
  return b;
}

// Tolerance: float64 throughout. The longest chain (the 2 + 2 layer Transformer) rounds
// each output well under 10^3 times, on values of order 1-10, and its layer norms divide
// by standard deviations above 0.1: a bound of about 10^3 * 10 * 10 * 2^-53 = 1e-11,
// the same for PyTorch's side; atol 1e-10 and rtol 1e-9 leave a margin of ten for both.
constexpr double kRtol = 1e-9, kAtol = 1e-10;

TEST(TransformerRefcases, MatchPyTorchStepByStep) {
  RefFile f = refcase::load("attention.safetensors", 17);
  int checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (m.at("op") == "sdpa") continue;
    SCOPED_TRACE("case " + std::to_string(i) + " " + m.at("op").get<std::string>() + ": " +
                 m.at("what").get<std::string>());
    Built b = build(f, i, m);
    std::map<std::string, Tensor> inputs;
    for (const auto& [name, t] : f.st.tensors) {
      const std::string pre = "case" + std::to_string(i) + ".in.";
      if (name.rfind(pre, 0) != 0) continue;
      Tensor x = f.field(i, "in." + name.substr(pre.size()));
      if (f.has(i, "grad." + name.substr(pre.size()))) x.requires_grad_();
      inputs[name.substr(pre.size())] = x;
    }
    const auto in = [&](const std::string& n) { return inputs.count(n) ? inputs.at(n) : Tensor(); };
    const auto [out, weights] = b.call(in);
    EXPECT_TRUE(all_close(out, f.field(i, "out"), kRtol, kAtol));
    Tensor loss = sum(out * f.field(i, "grad_out"));
    if (f.has(i, "weights")) {
      ASSERT_TRUE(weights.defined());
      EXPECT_TRUE(all_close(weights, f.field(i, "weights"), kRtol, kAtol));
      loss = loss + sum(weights * f.field(i, "grad_weights"));
    }
    loss.backward();
    for (const auto& [name, x] : inputs)
      if (x.requires_grad()) EXPECT_TRUE(all_close(x.grad(), f.field(i, "grad." + name), kRtol, kAtol)) << name;
    for (const auto& [name, p] : b.module->named_parameters())
      EXPECT_TRUE(all_close(p.grad(), f.field(i, "grad.param." + name), kRtol, kAtol)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.state_dict()) out.push_back(n);
  return out;
}

TEST(Transformer, StateDictNamesArePyTorchs) {
  using V = std::vector<std::string>;
  EXPECT_EQ(names_of(nn::MultiheadAttention(8, 2)), V({"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                       "out_proj.bias"}));
  EXPECT_EQ(names_of(nn::MultiheadAttention(8, 2, {.bias = false, .add_bias_kv = true, .kdim = 3})),
            V({"q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v", "out_proj.weight"}));
  const nn::MultiheadAttention mha(8, 2, {.kdim = 3, .vdim = 5});
  EXPECT_EQ(mha.k_proj_weight.shape(), Shape({8, 3}));
  EXPECT_EQ(mha.v_proj_weight.shape(), Shape({8, 5}));
  EXPECT_EQ(names_of(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16})),
            V({"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
               "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
               "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  const V dec = names_of(nn::TransformerDecoderLayer(8, 2, {.dim_feedforward = 16}));
  EXPECT_EQ(dec.size(), 18u);
  EXPECT_EQ(dec[4], "multihead_attn.in_proj_weight");
  EXPECT_EQ(dec.back(), "norm3.bias");
  const V full = names_of(nn::Transformer({.d_model = 8, .nhead = 2, .num_encoder_layers = 2,
                                           .num_decoder_layers = 1, .layer = {.dim_feedforward = 16}}));
  EXPECT_EQ(full.size(), 2u * 12 + 2 + 18 + 2);
  EXPECT_EQ(full[0], "encoder.layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(full[24], "encoder.norm.weight");
  EXPECT_EQ(full.back(), "decoder.norm.bias");
}

TEST(Transformer, InitialisationIsPyTorchs) {
  const nn::MultiheadAttention mha(16, 4, {.add_bias_kv = true});
  // Xavier-uniform in_proj_weight [48, 16]: U(-b, b), b = sqrt(6 / 64); zero biases.
  const double b = std::sqrt(6.0 / 64);
  double most = 0;
  for (double w : values(mha.in_proj_weight)) most = std::max(most, std::fabs(w));
  EXPECT_LE(most, b);
  EXPECT_GT(most, 0.9 * b) << "768 draws reach 90% of the bound";
  for (const Tensor& t : {mha.in_proj_bias, mha.out_proj->bias})
    for (double w : values(t)) EXPECT_EQ(w, 0.0);
  EXPECT_FALSE(allclose(mha.bias_k, mha.bias_v));
}

TEST(Transformer, StacksHoldIndependentCopiesOfTheLayer) {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  layer.to(kFloat64);
  nn::TransformerEncoder enc(layer, 3);
  EXPECT_EQ(enc.layers->size(), 3u);
  EXPECT_FALSE(enc.norm);
  const NamedTensors want = layer.state_dict();
  for (size_t l = 0; l < 3; ++l) {
    const NamedTensors got = enc.layers->at<nn::TransformerEncoderLayer>(l)->state_dict();
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_DTYPE(got[j].second, kFloat64);
      EXPECT_TRUE(allclose(got[j].second, want[j].second, 0, 0)) << got[j].first;
      EXPECT_FALSE(got[j].second.shares_storage_with(want[j].second));
    }
  }
  enc.layers->at<nn::TransformerEncoderLayer>(0)->linear1->weight.detach().fill_(7);
  EXPECT_FALSE(allclose(enc.layers->at<nn::TransformerEncoderLayer>(1)->linear1->weight, full({16, 8}, 7.0, kFloat64)));
}

// A layer called with one tensor (as Sequential calls it) is the layer without masks.
TEST(Transformer, EncoderLayerRunsInsideSequential) {
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(8, 2, nn::TransformerLayerOptions{.dim_feedforward = 16,
                                                                                              .dropout = 0});
  auto head = std::make_shared<nn::Linear>(8, 3);
  nn::Sequential model({layer, head});
  const Tensor x = random_tensor({4, 2, 8}, kFloat32, Layout::Contiguous, 5);
  EXPECT_TRUE(allclose(model(x), (*head)((*layer)(x, Tensor(), Tensor())), 0, 0));
  EXPECT_EQ(names_of(model)[0], "0.self_attn.in_proj_weight");
}

TEST(Transformer, DropoutOnlyInTraining) {
  nn::MultiheadAttention mha(8, 2, {.dropout = 0.5, .batch_first = true});
  const Tensor x = random_tensor({2, 5, 8}, kFloat32, Layout::Contiguous, 1);
  mha.eval();
  const auto [a, wa] = mha(x, x, x);
  const auto [b, wb] = mha(x, x, x);
  EXPECT_TRUE(allclose(a, b, 0, 0));
  for (double w : values(sum(wa, {-1}))) EXPECT_NEAR(w, 1.0, 1e-5);
  mha.train();
  const auto [c, wc] = mha(x, x, x, Tensor(), true, Tensor(), false);
  EXPECT_EQ(wc.shape(), Shape({2, 2, 5, 5}));
  int64_t zeros_seen = 0;
  for (double w : values(wc)) zeros_seen += w == 0;
  EXPECT_GT(zeros_seen, 0);
  EXPECT_FALSE(allclose(a, c));
}

// PyTorch's MultiheadAttention gives NaN for a query whose keys are all padding;
// scaled_dot_product_attention (and so this module) gives zeros, and finite gradients.
TEST(Transformer, AQueryWithEveryKeyPaddedGetsZeros) {
  nn::MultiheadAttention mha(8, 2);
  mha.to(kFloat64);
  const Tensor q = random_tensor({3, 2, 8}, kFloat64, Layout::Contiguous, 2);
  q.requires_grad_();
  const Tensor kv = random_tensor({4, 2, 8}, kFloat64, Layout::Contiguous, 3);
  const Tensor pad = gt(tensor({0, 0, 1, 0, 1, 1, 1, 1}, {2, 4}, kFloat64), 0.5);  // batch 1: all keys padded
  const auto [out, w] = mha(q, kv, kv, pad);
  for (double v : values(w.select(0, 1))) EXPECT_EQ(v, 0.0);
  // The output of batch 1 is out_proj's bias alone (zero attention output), here 0.
  for (double v : values(out.select(1, 1))) EXPECT_EQ(v, 0.0);
  sum(out * out).backward();
  for (double g : values(q.grad())) EXPECT_TRUE(std::isfinite(g));
}

TEST(Transformer, GenerateSquareSubsequentMask) {
  const Tensor m = nn::Transformer::generate_square_subsequent_mask(3, kFloat64);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(values(m), std::vector<double>({0, -inf, -inf, 0, 0, -inf, 0, 0, 0}));
  EXPECT_DTYPE(nn::Transformer::generate_square_subsequent_mask(2), kFloat32);
  EXPECT_EQ(nn::Transformer::generate_square_subsequent_mask(0).shape(), Shape({0, 0}));
  EXPECT_EMBER_ERROR(nn::Transformer::generate_square_subsequent_mask(-1), "generate_square_subsequent_mask", "-1");
}

TEST(Transformer, ArgumentErrors) {
  EXPECT_EMBER_ERROR(nn::MultiheadAttention(10, 3), "MultiheadAttention", "embed_dim 10", "num_heads 3");
  EXPECT_EMBER_ERROR(nn::MultiheadAttention(8, 2, {.dropout = -0.1}), "MultiheadAttention", "dropout", "-0.1");
  EXPECT_EMBER_ERROR(nn::MultiheadAttention(8, 0), "MultiheadAttention", "positive");
  EXPECT_EMBER_ERROR(nn::TransformerEncoderLayer(8, 3), "MultiheadAttention", "not divisible");
  EXPECT_EMBER_ERROR(nn::TransformerEncoderLayer(8, 2, {.dropout = -1}), "TransformerEncoderLayer", "dropout");
  EXPECT_EMBER_ERROR(nn::TransformerDecoderLayer(8, 2, {.dim_feedforward = 0}), "TransformerDecoderLayer",
                     "dim_feedforward");
  EXPECT_EMBER_ERROR(nn::TransformerEncoder(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 4}), 0),
                     "TransformerEncoder", "num_layers");

  nn::MultiheadAttention mha(8, 2);
  const Tensor q = random_tensor({3, 2, 8}, kFloat32), kv = random_tensor({4, 2, 8}, kFloat32);
  const char* op = "MultiheadAttention";
  EXPECT_EMBER_ERROR(mha(q, kv, kv, Tensor(), true, ones({3, 5}, kBool)), op, "attn_mask", "[3, 5]", "[3, 4]", "[4, 3, 4]");
  EXPECT_EMBER_ERROR(mha(q, kv, kv, ones({2, 5}, kBool)), op, "key_padding_mask", "[2, 5]", "[2, 4]");
  EXPECT_EMBER_ERROR(mha(q, kv, kv, Tensor(), true, zeros({3, 4}, kFloat64)), op, "attn_mask", "float32", "float64");
  EXPECT_EMBER_ERROR(mha(q, kv, kv, zeros({2, 4}, kInt64)), op, "key_padding_mask", "int64");
  EXPECT_EMBER_ERROR(mha(q, random_tensor({4, 2, 6}, kFloat32), kv), op, "features");
  EXPECT_EMBER_ERROR(mha(q, random_tensor({4, 3, 8}, kFloat32), kv), op, "batch size");
  EXPECT_EMBER_ERROR(mha(q, kv, random_tensor({5, 2, 8}, kFloat32)), op, "length");
  EXPECT_EMBER_ERROR(mha(random_tensor({8}, kFloat32), kv, kv), op, "3-D");

  nn::Transformer t({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .layer = {.dim_feedforward = 8}});
  EXPECT_EMBER_ERROR(t(random_tensor({5, 2, 8}, kFloat32), random_tensor({4, 3, 8}, kFloat32)), "Transformer",
                     "batch sizes");
  EXPECT_EMBER_ERROR(t(random_tensor({5, 2, 6}, kFloat32), random_tensor({4, 2, 6}, kFloat32)), "Transformer",
                     "d_model = 8");
}

}  // namespace
}  // namespace ember::test
