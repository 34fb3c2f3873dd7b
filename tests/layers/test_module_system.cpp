// The module system against PyTorch (module_api.safetensors, tests/refcases/module_api_twin.py):
// each tensor and module listed once (a module held twice, a submodule under two names, a
// tied weight), state_dict with every name, apply's order, the SGD example that stepped
// a shared weight twice; duplicate names and duplicate optimizer parameters as errors;
// replacing and tying parameters and children (the forward uses the replacement); tied
// tensors saved once in a checkpoint and loaded tied.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/core/reference.h"
#include "tests/core/temp_dir.h"

#ifndef EMBER_REFCASES_DIR
#define EMBER_REFCASES_DIR "tests/refcases"
#endif

namespace ember::test {
namespace {

using Names = std::vector<std::string>;

Names names_of(const NamedTensors& ts) {
  Names out;
  for (const auto& [n, t] : ts) out.push_back(n);
  return out;
}
Names names_of(const nn::Module::NamedModules& ms) {
  Names out;
  for (const auto& [n, m] : ms) out.push_back(n);
  return out;
}
bool same_tensor(const Tensor& a, const Tensor& b) { return a.impl_ptr() == b.impl_ptr(); }

// The twin's model: a tied decoder, a Linear held twice, a BatchNorm under two names.
class TiedNet : public nn::Callable<TiedNet> {
 public:
  TiedNet() {
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(10, 4));
    lin = std::make_shared<nn::Linear>(4, 4);
    body = register_module("body", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                       lin, std::make_shared<nn::ReLU>(), lin}));
    norm = register_module("norm", std::make_shared<nn::BatchNorm1d>(4));
    register_module("also_norm", norm);
    decoder = register_module("decoder", std::make_shared<nn::Linear>(4, 10));
    decoder->weight = encoder->weight;  // tied, as word_language_model's tie_weights
  }
  Tensor forward(const Tensor& tokens) { return (*decoder)(norm->forward((*body)(encoder->forward(tokens)))); }
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::Linear> lin, decoder;
  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<nn::BatchNorm1d> norm;
};

class Scale : public nn::Callable<Scale> {
 public:
  Scale() : w(register_parameter("w", ones({}, kFloat64))) {}
  Tensor forward(const Tensor& x) { return mul(w, x); }
  Tensor& w;
};

SafetensorsFile twin() { return load_safetensors(std::string(EMBER_REFCASES_DIR) + "/module_api.safetensors"); }
Names twin_list(const SafetensorsFile& f, const std::string& key) {
  return nlohmann::json::parse(f.metadata.at(key)).get<Names>();
}

TEST(ModuleSystem, ListsAsPyTorchDoes) {
  const SafetensorsFile f = twin();
  auto net = std::make_shared<TiedNet>();
  EXPECT_EQ(names_of(net->named_parameters()), twin_list(f, "named_parameters"));
  EXPECT_EQ(names_of(net->named_buffers()), twin_list(f, "named_buffers"));
  EXPECT_EQ(names_of(net->state_dict()), twin_list(f, "state_dict"));
  EXPECT_EQ(names_of(net->named_modules()), twin_list(f, "named_modules"));
  EXPECT_EQ(names_of(net->named_children()), twin_list(f, "named_children"));
  std::map<const nn::Module*, std::string> name_of;
  for (const auto& [n, m] : net->named_modules()) name_of[m.get()] = n;
  Names visited;
  net->apply([&](nn::Module& m) { visited.push_back(name_of.at(&m)); });
  EXPECT_EQ(visited, twin_list(f, "apply_order"));
  // Lists of tensors and modules follow the named ones.
  EXPECT_EQ(net->parameters().size(), net->named_parameters().size());
  EXPECT_EQ(net->buffers().size(), 3u);
  EXPECT_EQ(net->modules().size(), 7u);
  EXPECT_EQ(net->modules()[0].get(), net.get());  // the module itself, owned
  EXPECT_EQ(net->children().size(), 4u);
}

TEST(ModuleSystem, TiedStateDictNamesShareTheirData) {
  const SafetensorsFile f = twin();
  EXPECT_EQ(f.metadata.at("tied_state_dict_shares"), "true");
  TiedNet net;
  std::map<std::string, Tensor> sd;
  for (const auto& [n, t] : net.state_dict()) sd[n] = t;
  EXPECT_TRUE(sd.at("decoder.weight").shares_storage_with(sd.at("encoder.weight")));
  EXPECT_TRUE(sd.at("body.2.weight").shares_storage_with(sd.at("body.0.weight")));
  EXPECT_TRUE(sd.at("also_norm.running_var").shares_storage_with(sd.at("norm.running_var")));
}

TEST(ModuleSystem, NonRecursiveListingsAndAStackModule) {
  nn::Sequential seq({std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>()});
  seq.register_parameter("extra", zeros({1}));
  EXPECT_EQ(names_of(seq.named_parameters(/*recurse=*/false)), Names{"extra"});
  EXPECT_EQ(names_of(seq.named_parameters()), (Names{"extra", "0.weight", "0.bias"}));
  // A module not owned by a shared_ptr lists itself too (as a non-owning pointer).
  const auto mods = seq.named_modules();
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[0].second.get(), &seq);
}

TEST(ModuleSystem, SgdStepsASharedModuleOnce) {
  // The issue's example: w = 1, y = w * w * x through Sequential(s, s), lr 0.1.
  const SafetensorsFile f = twin();
  auto s = std::make_shared<Scale>();
  nn::Sequential model({s, s});
  ASSERT_EQ(model.parameters().size(), 1u);
  EXPECT_EQ(std::to_string(model.parameters().size()), f.metadata.at("sgd_num_params"));
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  model(ones({}, kFloat64)).backward();
  EXPECT_EQ(s->w.grad().item<double>(), 2.0);  // d(w^2)/dw at 1
  opt.step();
  const double want = f.at("sgd.w_after").item<double>();
  EXPECT_EQ(want, 1 - 0.1 * 2.0);
  EXPECT_EQ(s->w.item<double>(), want);  // 0.8; stepping twice gave 0.6
}

TEST(ModuleSystem, OptimizerRefusesATensorListedTwice) {
  Tensor q = ones({3}).requires_grad_();
  Tensor r = ones({2}).requires_grad_();
  EXPECT_EMBER_ERROR(optim::SGD({q, r, q}, {.lr = 0.1}), "SGD", "parameters 0 (group 0) and 2 (group 0) are the same tensor");
  EXPECT_EMBER_ERROR(optim::Adam({r, r}, {}), "parameters 0 (group 0) and 1 (group 0) are the same tensor");
  EXPECT_NO_THROW(optim::SGD({q, r}, {.lr = 0.1}));
}

TEST(ModuleSystem, ANameRegisteredTwiceIsAnError) {
  Scale m;
  EXPECT_EMBER_ERROR(m.register_parameter("w", ones({})), "register_parameter", "Scale already has a parameter named 'w'");
  EXPECT_EMBER_ERROR(m.register_buffer("w", ones({})), "register_buffer", "parameter named 'w'");
  EXPECT_EMBER_ERROR(m.register_module("w", std::make_shared<nn::ReLU>()), "register_module", "parameter named 'w'");
  m.register_module("act", std::make_shared<nn::ReLU>());
  EXPECT_EMBER_ERROR(m.register_module("act", std::make_shared<nn::ReLU>()), "already has a submodule named 'act'");
  m.register_buffer("count", zeros({}));
  EXPECT_EMBER_ERROR(m.register_parameter("count", ones({})), "already has a buffer named 'count'");
  EXPECT_EQ(names_of(m.state_dict()), (Names{"w", "count"}));  // nothing was added
  EXPECT_EQ(m.named_children().size(), 1u);
  // A ModuleDict key and a Sequential position are names too.
  EXPECT_EMBER_ERROR(nn::ModuleDict({{"a", std::make_shared<nn::ReLU>()}, {"a", std::make_shared<nn::Tanh>()}}),
                     "'a'");
}

TEST(ModuleSystem, ModulesAreNotCopyable) {
  // Layers' handles are references into their registry (Note [One place per parameter]).
  static_assert(!std::is_copy_constructible_v<nn::Linear> && !std::is_copy_assignable_v<nn::Linear>);
  static_assert(!std::is_copy_constructible_v<nn::Module>);
}

TEST(ModuleSystem, TiedWeightIsOneTensorForForwardGradientsAndSteps) {
  manual_seed(3);
  TiedNet net;
  net.eval();  // batch norm on running statistics: deterministic
  ASSERT_TRUE(same_tensor(net.decoder->weight, net.encoder->weight));
  for (const auto& [n, p] : net.named_parameters()) EXPECT_NE(n, "decoder.weight");
  const Tensor tokens = tensor({1, 7, 3}, {3}, kInt64);
  // The decoder computes with the encoder's matrix.
  const Tensor h = net.norm->forward((*net.body)(net.encoder->forward(tokens)));
  const Tensor y = net(tokens);
  EXPECT_TRUE(all_close(y, add(matmul(h, net.encoder->weight.t()), net.decoder->bias), 1e-6, 1e-6));
  // Both uses send their gradient to the one tensor.
  sum(y).backward();
  const Tensor g = net.encoder->weight.grad();
  ASSERT_TRUE(g.defined());
  const Tensor manual = matmul(ones({10, 3}), h.detach());  // the decoder's part: dy^T h
  const std::vector<double> gv = values(g), mv = values(manual);
  // Rows 1, 3 and 7 also get the embedding's part: elsewhere only the decoder's.
  for (int64_t row : {0, 2, 4, 5, 6, 8, 9})
    for (int64_t j = 0; j < 4; ++j) EXPECT_NEAR(gv[row * 4 + j], mv[row * 4 + j], 1e-5) << row;
  // An optimizer over parameters() steps it once.
  optim::SGD opt(net.parameters(), {.lr = 1.0});
  const Tensor before = net.encoder->weight.detach().clone();
  opt.step();
  EXPECT_TRUE(all_close(net.decoder->weight, sub(before, g), 1e-6, 1e-6));
}

TEST(ModuleSystem, AssigningAHandleOrReplacingRewritesTheOnePlace) {
  nn::Linear lin(3, 2);
  const Tensor w = randn({2, 3}).requires_grad_();
  lin.weight = w;  // the member is the registry's slot
  EXPECT_TRUE(same_tensor(lin.named_parameters()[0].second, w));
  const Tensor x = randn({4, 3});
  EXPECT_TRUE(all_close(lin(x), add(matmul(x, w.t()), lin.bias), 1e-6, 1e-6));
  // replace_parameter writes the same slot, so the member sees it; undefined removes it.
  const Tensor w2 = randn({2, 3});
  lin.replace_parameter("weight", w2);
  EXPECT_TRUE(same_tensor(lin.weight, w2));
  EXPECT_TRUE(w2.requires_grad());
  lin.replace_parameter("bias", Tensor());
  EXPECT_FALSE(lin.bias.defined());
  EXPECT_EQ(names_of(lin.named_parameters()), Names{"weight"});
  EXPECT_EQ(names_of(lin.state_dict()), Names{"weight"});
  EXPECT_TRUE(all_close(lin(x), matmul(x, w2.t()), 1e-6, 1e-6));
  EXPECT_NE(lin.name().find("bias=false"), std::string::npos);
  EXPECT_EMBER_ERROR(lin.replace_parameter("wieght", w2), "replace_parameter", "Linear has no parameter named 'wieght'",
                     "parameters: weight, bias");
  nn::BatchNorm1d bn(2);
  const Tensor rv = full({2}, 4.0);
  bn.replace_buffer("running_var", rv);
  EXPECT_TRUE(same_tensor(bn.running_var, rv));
  EXPECT_EMBER_ERROR(bn.replace_buffer("weight", rv), "BatchNorm1d has no buffer named 'weight'");
}

TEST(ModuleSystem, ReplacedChildIsWhatForwardRuns) {
  auto first = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential seq({first, std::make_shared<nn::ReLU>()});
  auto other = std::make_shared<nn::Tanh>();
  EXPECT_EQ(seq.replace_module("0", other).ptr(), other);
  const Tensor x = randn({2, 3});
  EXPECT_TRUE(all_close(seq(x), relu(tanh(x)), 0, 0));
  EXPECT_TRUE(seq.parameters().empty());
  EXPECT_EMBER_ERROR(seq.replace_module("5", other), "replace_module", "Sequential has no submodule named '5'",
                     "submodules: 0, 1");
  EXPECT_EMBER_ERROR(seq.replace_module("1", std::shared_ptr<nn::Module>()), "is null");
  // A Checkpoint runs what its registry holds.
  nn::Checkpoint ck(first);
  ck.replace_module("inner", other);
  EXPECT_EQ(ck.inner(), other);
  EXPECT_TRUE(all_close(ck(x), tanh(x), 0, 0));
}

class CheckpointTies : public TempDirTest {};

TEST_F(CheckpointTies, TiedTensorsAreSavedOnceAndLoadedTied) {
  manual_seed(5);
  TiedNet a;
  optim::SGD opt(a.parameters(), {.lr = 0.1});
  optim::save_checkpoint(path("ck.safetensors"), a, &opt, {{"epoch", "2"}});
  const SafetensorsFile f = load_safetensors(path("ck.safetensors"));
  EXPECT_TRUE(f.contains("model.encoder.weight"));
  EXPECT_FALSE(f.contains("model.decoder.weight"));
  EXPECT_FALSE(f.contains("model.body.2.weight"));
  EXPECT_FALSE(f.contains("model.also_norm.running_mean"));
  const auto tied = nlohmann::json::parse(f.metadata.at("tied"));
  EXPECT_EQ(tied.at("decoder.weight"), "encoder.weight");
  EXPECT_EQ(tied.at("body.2.bias"), "body.0.bias");
  EXPECT_EQ(tied.size(), 8u);  // decoder.weight, body.2.{weight,bias}, also_norm's five
  int64_t saved = 0;
  for (const auto& [n, t] : f.tensors) saved += n.rfind("model.", 0) == 0;
  EXPECT_EQ(saved, 9);  // state_dict's 17 names less the 8 ties

  manual_seed(6);
  TiedNet b;
  ASSERT_FALSE(all_close(b.encoder->weight, a.encoder->weight, 0, 0));
  const auto meta = optim::load_checkpoint(path("ck.safetensors"), b, nullptr);
  EXPECT_EQ(meta.at("epoch"), "2");
  for (const auto& [n, t] : a.state_dict()) {
    bool found = false;
    for (const auto& [m, u] : b.state_dict())
      if (m == n) found = all_close(u, t, 0, 0);
    EXPECT_TRUE(found) << n;
  }
  EXPECT_TRUE(same_tensor(b.decoder->weight, b.encoder->weight));  // still tied
  // A model that is not tied gets the tied value under both names.
  nn::Sequential two({std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 4)});
  nn::Sequential shared({a.lin, std::make_shared<nn::ReLU>(), a.lin});
  optim::save_checkpoint(path("seq.safetensors"), shared, nullptr);
  optim::load_checkpoint(path("seq.safetensors"), two, nullptr);
  EXPECT_TRUE(all_close(two[0].named_parameters()[0].second, a.lin->weight, 0, 0));
  EXPECT_TRUE(all_close(two[2].named_parameters()[0].second, a.lin->weight, 0, 0));
}

TEST_F(CheckpointTies, ReservedMetadataAndBrokenTiesAreErrors) {
  nn::Linear lin(2, 2);
  EXPECT_EMBER_ERROR(optim::save_checkpoint(path("a.safetensors"), lin, nullptr, {{"tied", "x"}}), "save_checkpoint",
                     "'tied' is ember's own");
  EXPECT_EMBER_ERROR(optim::save_checkpoint(path("a.safetensors"), lin, nullptr, {{"format", "x"}}), "'format'");
  // A tie naming a tensor the file does not hold.
  save_safetensors(path("b.safetensors"), {{"model.weight", lin.weight.detach()}},
                   {{"format", "ember-checkpoint-1"}, {"tied", R"({"bias": "nothing"})"}});
  EXPECT_EMBER_ERROR(optim::load_checkpoint(path("b.safetensors"), lin, nullptr), "load_checkpoint",
                     "ties 'bias' to 'nothing', which it does not hold");
  save_safetensors(path("c.safetensors"), {{"model.weight", lin.weight.detach()}},
                   {{"format", "ember-checkpoint-1"}, {"tied", "[1, 2"}});
  EXPECT_EMBER_ERROR(optim::load_checkpoint(path("c.safetensors"), lin, nullptr), "malformed 'tied' metadata");
}

TEST(ModuleSystem, LoadStateDictWithBothTiedNamesKeepsTheTie) {
  manual_seed(7);
  TiedNet a, b;
  b.load_state_dict(a.state_dict());  // PyTorch's dict: both names of the tied weight
  EXPECT_TRUE(all_close(b.decoder->weight, a.encoder->weight, 0, 0));
  EXPECT_TRUE(same_tensor(b.decoder->weight, b.encoder->weight));
}

TEST(ModuleSystem, LayerSizesAreCheckedBeforeAllocating) {
  EXPECT_EMBER_ERROR(nn::Linear(0, 3), "Linear: features must be positive", "in=0 out=3");
  EXPECT_EMBER_ERROR(nn::Embedding(5, -1), "Embedding: sizes must be positive", "5 x -1");
  EXPECT_EMBER_ERROR(nn::Conv2d(3, 4, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 2), "Conv2d", "divisible by groups=2");
  EXPECT_EMBER_ERROR(nn::Conv2d(2, 4, {0, 3}), "Conv2d: kernel_size must be positive");
  EXPECT_EMBER_ERROR(nn::BatchNorm2d(0), "BatchNorm: num_features must be positive, got 0");
}

}  // namespace
}  // namespace ember::test
