// PyTorch reference cases of issue 30's ops, activation modules and loss modules
// (nn_ops.safetensors, from tests/refcases/nn_ops_twin.py, float64): each case's output,
// topk's indices, and every gradient the file holds, at the README's float64 tolerances.
// Activations and losses run through their nn:: modules, as the twin runs torch.nn's.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT
namespace F = nn::functional;

TEST(NnOpsRefcases, MatchPyTorch) {
  const RefFile f = load("nn_ops.safetensors", 24);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + m.dump());
    std::map<std::string, Tensor> in;
    for (const char* name : {"x", "input", "target", "weight", "pos_weight"})
      if (f.has(i, std::string("in.") + name)) in[name] = f.field(i, std::string("in.") + name);
    for (const auto& g : m.at("grads")) in[g.get<std::string>()].requires_grad_();
    const std::string op = m.at("op");
    const auto red = [&] { return F::parse_reduction(m.at("reduction").get<std::string>()); };
    Tensor out, indices;
    if (op == "sin") out = in["x"].sin();
    else if (op == "cos") out = in["x"].cos();
    else if (op == "leaky_relu") out = nn::LeakyReLU(m.at("negative_slope").get<double>())(in["x"]);
    else if (op == "silu") out = nn::SiLU()(in["x"]);
    else if (op == "elu") out = nn::ELU(m.at("alpha").get<double>())(in["x"]);
    else if (op == "norm") {
      const double p = m.at("p").is_null() ? std::numeric_limits<double>::infinity() : m.at("p").get<double>();
      out = in["x"].norm(p, m.at("dims").get<std::vector<int64_t>>(), m.at("keepdim").get<bool>());
    } else if (op == "topk") {
      std::tie(out, indices) = in["x"].topk(m.at("k"), m.at("dim"), m.at("largest").get<bool>());
    } else if (op == "tril") out = in["x"].tril(m.at("diagonal"));
    else if (op == "triu") out = in["x"].triu(m.at("diagonal"));
    else if (op == "unfold") out = in["x"].unfold(m.at("dim"), m.at("size"), m.at("step"));
    else if (op == "bce") out = nn::BCELoss({.weight = in["weight"], .reduction = red()})(in["input"], in["target"]);
    else if (op == "bce_logits")
      out = nn::BCEWithLogitsLoss({.weight = in["weight"], .pos_weight = in["pos_weight"], .reduction = red()})(
          in["input"], in["target"]);
    else if (op == "l1") out = nn::L1Loss(red())(in["input"], in["target"]);
    else if (op == "smooth_l1")
      out = nn::SmoothL1Loss({.reduction = red(), .beta = m.at("beta").get<double>()})(in["input"], in["target"]);
    else if (op == "huber")
      out = nn::HuberLoss({.reduction = red(), .delta = m.at("delta").get<double>()})(in["input"], in["target"]);
    else if (op == "kl_div")
      out = nn::KLDivLoss({.reduction = red(), .log_target = m.at("log_target").get<bool>()})(in["input"], in["target"]);
    else FAIL() << "unknown op " << op;
    const Tol tol{1e-8, 1e-10};
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    if (indices.defined()) {
      EXPECT_TRUE(same_indices(indices, f.field(i, "indices")));
    }
    checked += expect_listed_grads(f, i, m, out, in, tol);
  }
  EXPECT_EQ(checked, 30);
}

}  // namespace
}  // namespace ember::test
