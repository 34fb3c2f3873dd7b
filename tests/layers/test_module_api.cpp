// The module API a libtorch user expects: a default name(), registration without
// subclassing, modules whose forward takes several tensors (nn::Callable, in the module's
// memory scope), ModuleList and ModuleDict with PyTorch's dotted names.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

class PlainNet : public nn::Module {};

// Sums q @ k^T and v: a forward of three tensors returning two.
class ThreeInputs : public nn::Callable<ThreeInputs> {
 public:
  std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v) {
    seen_scope = current_memory_scope() == this;
    return {matmul(q, k.t()), add(v, Scalar(1))};
  }
  bool seen_scope = false;
};

TEST(ModuleApi, DefaultNameIsTheClassName) {
  EXPECT_EQ(PlainNet().name(), "PlainNet");
  EXPECT_EQ(nn::ModuleList().name(), "ModuleList");
  EXPECT_EQ(ThreeInputs().name(), "ThreeInputs");
}

TEST(ModuleApi, AssembledWithoutSubclassing) {
  auto m = std::make_shared<PlainNet>();
  m->register_module("fc", std::make_shared<nn::Linear>(3, 2));
  m->register_parameter("scale", ones({2}));
  m->register_buffer("count", zeros({}, kInt64));
  std::vector<std::string> names;
  for (const auto& [n, t] : m->state_dict()) names.push_back(n);
  // PyTorch's state_dict order: the module's own parameters and buffers, then its children's.
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "count", "fc.weight", "fc.bias"}));
}

TEST(ModuleApi, OneTensorForwardOfAModuleWithoutOneIsAnError) {
  PlainNet m;
  try {
    m(ones({2}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PlainNet: has no forward that takes one tensor"), std::string::npos) << e.what();
  }
}

TEST(ModuleApi, CallableForwardsItsArgumentsInItsMemoryScope) {
  ThreeInputs m;
  auto [s, w] = m(ones({2, 3}), ones({4, 3}), zeros({5}));
  EXPECT_TRUE(m.seen_scope);
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.at({1, 3}), 3);
  EXPECT_EQ(w.at({4}), 1);
}

TEST(ModuleApi, ModuleListNamesAndIterates) {
  auto list = std::make_shared<nn::ModuleList>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>()});
  list->push_back(std::make_shared<nn::Linear>(3, 1));
  nn::Sequential outer;
  outer.push_back(list);
  std::vector<std::string> names;
  for (const auto& [n, t] : outer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.0.weight", "0.0.bias", "0.2.weight", "0.2.bias"}));
  std::vector<std::string> kinds;
  for (const auto& m : *list) kinds.push_back(m->name().substr(0, 4));
  EXPECT_EQ(kinds, (std::vector<std::string>{"Line", "ReLU", "Line"}));
  EXPECT_EQ(list->at<nn::Linear>(2)->weight.shape(), (Shape{1, 3}));
  EXPECT_THROW((*list)[3], Error);
  EXPECT_THROW(list->at<nn::Linear>(1), Error);
}

TEST(ModuleApi, ModuleDictKeepsInsertionOrderAndRefusesAReusedKey) {
  nn::ModuleDict d({{"encoder", std::make_shared<nn::Linear>(2, 2)}, {"act", std::make_shared<nn::Tanh>()}});
  d.insert("decoder", std::make_shared<nn::Linear>(2, 1, false));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"encoder", "act", "decoder"}));
  EXPECT_TRUE(d.contains("act"));
  EXPECT_EQ(d["decoder"]->parameters().size(), 1u);
  EXPECT_THROW(d.insert("act", std::make_shared<nn::ReLU>()), Error);
  try {
    d["missing"];
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keys: encoder, act, decoder"), std::string::npos) << e.what();
  }
}

// One tensor in, several out: the forward a Module-wide virtual would have forbidden.
class Split : public nn::Callable<Split> {
 public:
  std::tuple<Tensor, Tensor> forward(const Tensor& x) { return {mul(x, Scalar(2)), add(x, Scalar(1))}; }
};

TEST(ModuleApi, OneTensorForwardMayReturnATuple) {
  auto split = std::make_shared<Split>();
  auto [a, b] = (*split)(full({3}, 2.0));
  EXPECT_EQ(a.at({0}), 4);
  EXPECT_EQ(b.at({2}), 3);
  // A container runs forwards of one tensor to one only, and names the module otherwise.
  nn::Sequential seq({std::make_shared<nn::ReLU>(), split});
  try {
    seq(ones({3}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Split: has no forward that takes one tensor and returns one"),
              std::string::npos)
        << e.what();
  }
}

// A subclass of a Callable layer re-derives Callable with the layer as its base: calling
// it, directly, through a Module& or inside a Sequential, runs the subclass's forward.
class DoubledLinear : public nn::Callable<DoubledLinear, nn::Linear> {
 public:
  using Callable::Callable;
  Tensor forward(const Tensor& x) {
    seen_scope = current_memory_scope() == this;
    return mul(nn::Linear::forward(x), Scalar(2));
  }
  bool seen_scope = false;
};

TEST(ModuleApi, SubclassOfACallableLayerRunsItsOwnForward) {
  auto d = std::make_shared<DoubledLinear>(3, 2);
  const Tensor x = randn({4, 3});
  const Tensor want = mul(nn::functional::linear(x, d->weight, d->bias), Scalar(2));
  EXPECT_TRUE(all_close((*d)(x), want, 0, 0));
  EXPECT_TRUE(d->seen_scope);
  nn::Module& as_module = *d;
  EXPECT_TRUE(all_close(as_module(x), want, 0, 0));
  // Sequential fuses a Linear's ReLU into it, but not a subclass's, whose forward differs.
  nn::Sequential seq({d, std::make_shared<nn::ReLU>()});
  EXPECT_TRUE(all_close(seq(x), relu(want), 0, 0));
  EXPECT_EQ(d->name(), "Linear(in_features=3, out_features=2, bias=true)");  // the base's, not overridden
}

nn::TransformerOptions small_transformer() {
  return {.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
          .layer = {.dim_feedforward = 16, .dropout = 0}};
}

// Note [One place per parameter]: the Transformer's typed `decoder` reads its registry
// slot, so after replace_module it runs the new stack, and once a Linear is there (as
// word_language_model's TransformerModel puts one) using it as a stack is an error, not
// the old stack silently kept.
TEST(ModuleApi, TypedChildrenReadTheirSlotAfterReplaceModule) {
  nn::Transformer t(small_transformer());
  const Tensor src = randn({5, 2, 8}), tgt = randn({3, 2, 8});
  const nn::TransformerDecoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0});
  auto stack = std::make_shared<nn::TransformerDecoder>(layer, 2);
  t.replace_module("decoder", stack);
  EXPECT_EQ(t.decoder.get(), stack.get());
  const Tensor want = (*stack)(tgt, (*t.encoder)(src));
  EXPECT_TRUE(all_close(t(src, tgt), want, 1e-6, 1e-6));
  std::vector<std::string> names;
  for (const auto& [n, m] : t.named_modules()) names.push_back(n);
  auto listed = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(listed("decoder.layers.1.multihead_attn")) << "the new stack is listed";
  EXPECT_FALSE(listed("decoder.norm")) << "the old stack (with its final norm) is gone";

  const auto linear = t.replace_module("decoder", std::make_shared<nn::Linear>(8, 8));
  EXPECT_EQ(linear->weight.shape(), (Shape{8, 8}));
  try {
    t(src, tgt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("submodule 'decoder' now holds a Linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not the TransformerDecoder"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.decoder->layers, Error);
  EXPECT_TRUE(static_cast<bool>(t.encoder));
  nn::Child<nn::Linear> empty;
  EXPECT_FALSE(static_cast<bool>(empty));
  EXPECT_THROW(empty->weight, Error);
}

// word_language_model's shape: a Transformer whose decoder is a Linear, called through
// operator() with one tensor.
class EncoderOnly : public nn::Callable<EncoderOnly, nn::Transformer> {
 public:
  EncoderOnly()
      : Callable(small_transformer()), decoder(replace_module("decoder", std::make_shared<nn::Linear>(8, 3))) {}
  Tensor forward(const Tensor& src) { return (*decoder)((*encoder)(src)); }
  nn::Child<nn::Linear> decoder;
};

TEST(ModuleApi, TransformerSubclassWithItsOwnDecoder) {
  auto m = std::make_shared<EncoderOnly>();
  const Tensor src = randn({4, 2, 8});
  const Tensor want = nn::functional::linear((*m->encoder)(src), m->decoder->weight, m->decoder->bias);
  EXPECT_TRUE(all_close((*m)(src), want, 1e-6, 1e-6));
  nn::Sequential seq({m});
  EXPECT_TRUE(all_close(seq(src), want, 1e-6, 1e-6));
  std::vector<std::string> names;
  for (const auto& [n, p] : m->named_parameters())
    if (n.rfind("decoder.", 0) == 0) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"decoder.weight", "decoder.bias"}));
}

}  // namespace
}  // namespace ember::test
