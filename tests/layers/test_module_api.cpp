// The module API a libtorch user expects: a default name(), registration without
// subclassing, modules whose forward takes several tensors (nn::Callable, in the module's
// memory scope), ModuleList and ModuleDict with PyTorch's dotted names.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember.h"

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
    EXPECT_NE(std::string(e.what()).find("PlainNet: forward does not take one tensor"), std::string::npos) << e.what();
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

}  // namespace
}  // namespace ember::test
