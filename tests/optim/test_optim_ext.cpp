// Adadelta, RMSprop, Adagrad, parameter groups and LBFGS against optim_ext.safetensors
// (tests/refcases/optim_twin.py, PyTorch 1.13) step by step; their state dicts; argument
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "optim/adaptive.h"
#include "optim/lbfgs.h"
#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT

Tensor param(const std::vector<double>& v, DType dt = kFloat64) {
  Tensor t = tensor(v, dt);
  t.requires_grad_();
  return t;
}

double opt_or(const json& o, const char* key, double fallback) {
  return o.contains(key) && !o.at(key).is_null() ? o.at(key).get<double>() : fallback;
}

// The case's groups as ember's ParamGroups (overrides by PyTorch's names), or one group.
std::vector<optim::ParamGroup> groups_of(const json& m, const std::vector<Tensor>& params) {
  if (m.at("groups").is_null()) return {{.params = params}};
  std::vector<optim::ParamGroup> out;
  for (const json& g : m.at("groups")) {
    optim::ParamGroup pg;
    for (int64_t i : g.at("params").get<std::vector<int64_t>>()) pg.params.push_back(params[i]);
    for (const auto& [key, v] : g.items()) {
      if (key == "params") continue;
      const double x = v.get<double>();
      std::optional<double>* slot = key == "lr" ? &pg.lr : key == "weight_decay" ? &pg.weight_decay
                                  : key == "momentum" ? &pg.momentum : key == "beta1" ? &pg.beta1
                                  : key == "beta2" ? &pg.beta2 : key == "alpha" ? &pg.alpha
                                  : key == "lr_decay" ? &pg.lr_decay : nullptr;
      EXPECT_NE(slot, nullptr) << "no ParamGroup field for " << key;
      if (slot) *slot = x;
    }
    out.push_back(std::move(pg));
  }
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const json& m, const std::vector<Tensor>& params) {
  const std::string kind = m.at("optimizer");
  const json& o = m.at("options");
  std::vector<optim::ParamGroup> g = groups_of(m, params);
  if (kind == "Adadelta") {
    optim::Adadelta::Options d;
    return std::make_unique<optim::Adadelta>(g, optim::Adadelta::Options{opt_or(o, "lr", d.lr), opt_or(o, "rho", d.rho),
                                                                        opt_or(o, "eps", d.eps),
                                                                        opt_or(o, "weight_decay", d.weight_decay)});
  }
  if (kind == "RMSprop") {
    optim::RMSprop::Options d;
    return std::make_unique<optim::RMSprop>(
        g, optim::RMSprop::Options{opt_or(o, "lr", d.lr), opt_or(o, "alpha", d.alpha), opt_or(o, "eps", d.eps),
                                   opt_or(o, "weight_decay", d.weight_decay), opt_or(o, "momentum", d.momentum),
                                   o.contains("centered") && o.at("centered").get<bool>()});
  }
  if (kind == "Adagrad") {
    optim::Adagrad::Options d;
    return std::make_unique<optim::Adagrad>(
        g, optim::Adagrad::Options{opt_or(o, "lr", d.lr), opt_or(o, "lr_decay", d.lr_decay),
                                   opt_or(o, "weight_decay", d.weight_decay),
                                   opt_or(o, "initial_accumulator_value", d.initial_accumulator_value),
                                   opt_or(o, "eps", d.eps)});
  }
  if (kind == "SGD")
    return std::make_unique<optim::SGD>(g, optim::SGD::Options{.lr = opt_or(o, "lr", 0.01),
                                                               .momentum = opt_or(o, "momentum", 0),
                                                               .weight_decay = opt_or(o, "weight_decay", 0)});
  if (kind == "Adam")
    return std::make_unique<optim::Adam>(g, optim::Adam::Options{.lr = opt_or(o, "lr", 1e-3),
                                                                 .weight_decay = opt_or(o, "weight_decay", 0)});
  if (kind == "AdamW") return std::make_unique<optim::AdamW>(g, optim::AdamW::Options{.lr = opt_or(o, "lr", 1e-3)});
  return nullptr;
}

// Five steps, each a handful of elementwise ops in the same order as PyTorch's: each side
// rounds every op (u = 2^-53 in float64, 2^-24 in float32), at most ~10 roundings a step
// of values below 10 in size (parameters ~N(0, 1), updates below lr * 10), so over five
// steps the two differ by at most 5 * 10 * 2 * 10 u: 1.1e-13 in float64, 6e-5 in float32
// (the float32 bound is loose: the observed differences are a few ulps).
TEST(OptimExtRefcases, EveryStepMatches) {
  RefFile f = load("optim_ext.safetensors", 29);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (m.at("kind") != "optimizer") continue;
    SCOPED_TRACE(label(f, i, m));
    const double atol = m.at("dtype") == "F64" ? 1000 * 0x1p-53 : 1000 * 0x1p-24;
    std::vector<Tensor> params;
    for (int64_t p = 0; p < 2; ++p) {
      params.push_back(f.field(i, "param" + std::to_string(p) + ".init").clone());
      params.back().requires_grad_();
    }
    auto opt = make_optimizer(m, params);
    ASSERT_NE(opt, nullptr) << "no optimizer for " << m.at("optimizer");
    for (int64_t k = 0; k < m.at("steps").get<int64_t>(); ++k) {
      SCOPED_TRACE("step " + std::to_string(k + 1));
      for (int64_t p = 0; p < 2; ++p)
        params[p].set_grad(f.field(i, "param" + std::to_string(p) + ".grads").select(0, k).clone());
      opt->step();
      for (int64_t p = 0; p < 2; ++p) {
        const std::string key = "param" + std::to_string(p);
        EXPECT_TRUE(all_close(params[p], f.field(i, key + ".after").select(0, k), 0, atol)) << key;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

// ----- LBFGS -----

struct Problem {
  std::vector<Tensor> params;
  std::function<Tensor()> loss;
};

Problem problem_of(const RefFile& f, int64_t i, const json& m) {
  Problem p;
  for (int64_t k = 0; k < m.at("num_params").get<int64_t>(); ++k) {
    p.params.push_back(f.field(i, "param" + std::to_string(k) + ".init").clone());
    p.params.back().requires_grad_();
  }
  if (m.at("problem") == "logistic") {
    const Tensor X = f.field(i, "X"), y = f.field(i, "y"), w = p.params[0], b = p.params[1];
    p.loss = [=] { return mean(log(add(exp(mul(neg(y), add(matmul(X, w), b))), Scalar(1)))); };
  } else {
    const Tensor x = p.params[0], y = p.params[1];
    p.loss = [=] {
      const Tensor a = Scalar(1) - x, c = sub(y, mul(x, x));
      return sum(add(mul(a, a), mul(mul(c, c), Scalar(100))));
    };
  }
  return p;
}

optim::LBFGS::Options lbfgs_options(const json& o) {
  return {.lr = o.at("lr").get<double>(),
          .max_iter = o.at("max_iter").get<int64_t>(),
          .max_eval = o.at("max_eval").is_null() ? 0 : o.at("max_eval").get<int64_t>(),
          .tolerance_grad = o.at("tolerance_grad").get<double>(),
          .tolerance_change = o.at("tolerance_change").get<double>(),
          .history_size = o.at("history_size").get<int64_t>(),
          .line_search = o.at("line_search").is_null() ? optim::LBFGS::LineSearch::kNone
                                                       : optim::LBFGS::LineSearch::kStrongWolfe};
}

// The same iterations as PyTorch's (func_evals and n_iter equal: every branch taken
// alike), and the same iterates in float64. The iterates go through up to 30 evaluations,
// dot products (summed in another order than BLAS's ddot: relative 1e-16 n) and divisions
// by curvatures down to 1e-10, which amplify: 1e-9 relative leaves that room and still
// fails any wrong step (a step differs by far more than that).
TEST(LbfgsRefcases, EveryStepMatches) {
  RefFile f = load("optim_ext.safetensors", 29);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (m.at("kind") != "lbfgs") continue;
    SCOPED_TRACE(label(f, i, m));
    Problem pr = problem_of(f, i, m);
    optim::LBFGS opt(pr.params, lbfgs_options(m.at("options")));
    auto closure = [&] {
      opt.zero_grad();
      Tensor loss = pr.loss();
      loss.backward();
      return loss;
    };
    const std::vector<double> losses = f.field(i, "loss").to_vector<double>();
    const std::vector<int64_t> evals = f.field(i, "func_evals").to_vector<int64_t>();
    const std::vector<int64_t> iters = f.field(i, "n_iter").to_vector<int64_t>();
    for (int64_t k = 0; k < 3; ++k) {
      SCOPED_TRACE("step " + std::to_string(k + 1));
      const Tensor loss = opt.step(closure);
      EXPECT_NEAR(loss.item<double>(), losses[k], 1e-9 * std::fabs(losses[k]));
      EXPECT_EQ(opt.func_evals(), evals[k]);
      EXPECT_EQ(opt.n_iter(), iters[k]);
      for (size_t p = 0; p < pr.params.size(); ++p)
        EXPECT_TRUE(all_close(pr.params[p], f.field(i, "param" + std::to_string(p) + ".after").select(0, k), 1e-9,
                              1e-11))
            << "param " << p;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(Lbfgs, StateDictContinuesIdentically) {
  RefFile f = load("optim_ext.safetensors", 29);
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (m.at("kind") != "lbfgs" || m.at("problem") != "rosenbrock") continue;
    SCOPED_TRACE(label(f, i, m));
    Problem a = problem_of(f, i, m), b = problem_of(f, i, m);
    optim::LBFGS oa(a.params, lbfgs_options(m.at("options"))), ob(b.params, lbfgs_options(m.at("options")));
    auto closure_of = [](optim::LBFGS& o, Problem& p) {
      return [&o, &p] {
        o.zero_grad();
        Tensor loss = p.loss();
        loss.backward();
        return loss;
      };
    };
    oa.step(closure_of(oa, a));
    for (size_t p = 0; p < a.params.size(); ++p) b.params[p].detach().copy_(a.params[p].detach());
    ob.load_state_dict(oa.state_dict());
    EXPECT_EQ(ob.n_iter(), oa.n_iter());
    oa.step(closure_of(oa, a));
    ob.step(closure_of(ob, b));
    for (size_t p = 0; p < a.params.size(); ++p) EXPECT_EQ(values(a.params[p]), values(b.params[p])) << p;
    EXPECT_EQ(ob.func_evals(), oa.func_evals());
  }
}

TEST(Lbfgs, NeedsAClosure) {
  Tensor p = param({1, 2});
  optim::LBFGS opt({p}, {});
  p.set_grad(tensor({1.0, 1.0}, kFloat64));
  EXPECT_EMBER_ERROR(opt.step(), "LBFGS", "closure");
  EXPECT_EMBER_ERROR(opt.step(nullptr), "closure");
  EXPECT_EQ(values(p), (std::vector<double>{1, 2}));
  EXPECT_EMBER_ERROR(opt.step([] { return Tensor(); }), "loss");
  EXPECT_EMBER_ERROR(optim::LBFGS({p}, {.lr = -1}), "learning rate");
  EXPECT_EMBER_ERROR(optim::LBFGS({p}, {.history_size = 0}), "history_size");
  EXPECT_EMBER_ERROR(optim::LBFGS({p, param({1}, kFloat32)}, {}), "one dtype");
}

}  // namespace
}  // namespace ember::test
