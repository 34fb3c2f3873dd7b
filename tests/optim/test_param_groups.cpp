// Parameter groups (per-group options, the no-decay helper, duplicates across groups,
// group state in state dicts), the new optimizers' state dicts and argument errors.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "optim/adaptive.h"
#include "optim/lbfgs.h"
#include "optim/lr_scheduler.h"
#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

Tensor param(const std::vector<double>& v, DType dt = kFloat64) {
  Tensor t = tensor(v, dt);
  t.requires_grad_();
  return t;
}

// Steps with deterministic per-step gradients.
void feed(optim::Optimizer& opt, const std::vector<Tensor>& params, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      Generator gen(100 * s + i);
      params[i].set_grad(randn(params[i].shape(), params[i].dtype(), &gen));
    }
    opt.step();
  }
}

std::vector<Tensor> fresh_params() {
  std::vector<Tensor> ps = {random_tensor({3, 4}, kFloat32), random_tensor({5}, kFloat32, Layout::Contiguous, 2)};
  for (Tensor& p : ps) p.requires_grad_();
  return ps;
}

TEST(ParamGroups, EachGroupStepsWithItsOptions) {
  // Group 1's lr 0 leaves it alone; group 0 steps with the optimizer's lr.
  Tensor a = param({1}), b = param({1});
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.0}}, {.lr = 0.1});
  EXPECT_EQ(opt.num_groups(), 2u);
  EXPECT_EQ(opt.group_lr(1), 0.0);
  a.set_grad(tensor({0.5}, kFloat64));
  b.set_grad(tensor({0.5}, kFloat64));
  opt.step();
  EXPECT_DOUBLE_EQ(a.item<double>(), 1 - 0.1 * 0.5);
  EXPECT_EQ(b.item<double>(), 1);
  opt.set_lr(0.2);  // every group's
  EXPECT_EQ(opt.group_lr(0), 0.2);
  EXPECT_EQ(opt.group_lr(1), 0.2);
  EXPECT_EQ(opt.params().size(), 2u);
  EXPECT_EQ(opt.group_params(1), std::vector<size_t>{1});
}

TEST(ParamGroups, StepWithAClosure) {
  // Any optimizer evaluates the closure with gradients on (even under NoGradGuard), then steps.
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 0.1});
  NoGradGuard no_grad;
  const Tensor loss = opt.step([&] {
    opt.zero_grad();
    Tensor l = sum(mul(p, p));
    l.backward();
    return l;
  });
  EXPECT_EQ(loss.item<double>(), 1);
  EXPECT_DOUBLE_EQ(p.item<double>(), 1 - 0.1 * 2);
}

TEST(ParamGroups, WeightDecayGroups) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 3));
  model->push_back(std::make_shared<nn::LayerNorm>(std::vector<int64_t>{3}));
  model->push_back(std::make_shared<nn::Linear>(3, 2));
  const std::vector<optim::ParamGroup> groups = optim::weight_decay_groups(model->parameters());
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 2u);  // the Linear weights
  EXPECT_EQ(groups[1].params.size(), 4u);  // the biases and LayerNorm's weight and bias
  for (const Tensor& p : groups[0].params) EXPECT_EQ(p.dim(), 2);
  for (const Tensor& p : groups[1].params) EXPECT_EQ(p.dim(), 1);
  optim::AdamW opt(groups, {.lr = 1e-3, .weight_decay = 0.05});
  EXPECT_EQ(opt.option(0, "weight_decay"), 0.05);
  EXPECT_EQ(opt.option(1, "weight_decay"), 0.0);
}

TEST(ParamGroups, Errors) {
  Tensor a = param({1}), b = param({2, 3});
  // The same tensor in two groups, or twice in one: named with its groups.
  EXPECT_EMBER_ERROR(optim::SGD({{.params = {a}}, {.params = {b, a}}}, {}), "SGD", "same tensor", "group 0",
                     "group 1", "more than once");
  EXPECT_EMBER_ERROR(optim::RMSprop(std::vector<optim::ParamGroup>{{.params = {a, a}}}, {}), "RMSprop", "same tensor");
  EXPECT_EMBER_ERROR(optim::SGD(std::vector<optim::ParamGroup>{{.params = {a}, .beta1 = 0.5}}, {}), "group 0 sets beta1",
                     "SGD does not have");
  EXPECT_EMBER_ERROR(optim::Adam({{.params = {a}}, {.params = {b}, .lr = -0.1}}, {}), "learning rate", "-0.1");
  EXPECT_EMBER_ERROR(optim::Adam({{.params = {a}}, {.params = {b}, .beta2 = 1.0}}, {}), "betas");
  EXPECT_EMBER_ERROR(optim::SGD(std::vector<optim::ParamGroup>{{.params = {}}}, {}), "no parameters");
  optim::SGD ok({a}, {});
  EXPECT_EMBER_ERROR(ok.option(0, "beta1"), "SGD has no option 'beta1'");
  EXPECT_EMBER_ERROR(ok.set_group_lr(3, 0.1), "no parameter group 3");
}

TEST(NewOptimizers, ArgumentErrors) {
  Tensor p = param({1});
  EXPECT_EMBER_ERROR(optim::Adadelta({p}, {.lr = -1}), "Adadelta", "learning rate");
  EXPECT_EMBER_ERROR(optim::Adadelta({p}, {.rho = 1.5}), "rho");
  EXPECT_EMBER_ERROR(optim::RMSprop({p}, {.lr = -0.01}), "RMSprop", "learning rate");
  EXPECT_EMBER_ERROR(optim::RMSprop({p}, {.alpha = -0.1}), "alpha");
  EXPECT_EMBER_ERROR(optim::RMSprop({p}, {.momentum = -1}), "momentum");
  EXPECT_EMBER_ERROR(optim::RMSprop({p}, {.eps = -1}), "eps");
  EXPECT_EMBER_ERROR(optim::Adagrad({p}, {.lr_decay = -1}), "lr_decay");
  EXPECT_EMBER_ERROR(optim::Adagrad({p}, {.initial_accumulator_value = -1}), "initial_accumulator_value");
  EXPECT_EMBER_ERROR(optim::Adagrad({p}, {.weight_decay = -1}), "weight_decay");
}

std::unique_ptr<optim::Optimizer> make(const std::string& kind, std::vector<Tensor> ps) {
  std::vector<optim::ParamGroup> g = {{.params = {ps[0]}}, {.params = {ps[1]}, .lr = 0.003, .weight_decay = 0.0}};
  if (kind == "Adadelta") return std::make_unique<optim::Adadelta>(g, optim::Adadelta::Options{.weight_decay = 0.1});
  if (kind == "RMSprop")
    return std::make_unique<optim::RMSprop>(g, optim::RMSprop::Options{.momentum = 0.9, .centered = true});
  if (kind == "Adagrad")
    return std::make_unique<optim::Adagrad>(g, optim::Adagrad::Options{.lr_decay = 0.1, .initial_accumulator_value = 0.1});
  if (kind == "SGD") return std::make_unique<optim::SGD>(g, optim::SGD::Options{.lr = 0.05, .momentum = 0.9});
  return std::make_unique<optim::Adam>(g, optim::Adam::Options{.lr = 0.01});
}

TEST(NewOptimizers, StateDictRoundTripContinuesIdentically) {
  for (const std::string kind : {"Adadelta", "RMSprop", "Adagrad", "SGD", "Adam"}) {
    SCOPED_TRACE(kind);
    std::vector<Tensor> pa = fresh_params();
    auto a = make(kind, pa);
    feed(*a, pa, 0, 3);
    a->set_group_lr(0, 0.007);  // a scheduler's change, saved with the group
    std::vector<Tensor> pb;
    for (const Tensor& p : pa) {
      pb.push_back(p.detach().clone());
      pb.back().requires_grad_();
    }
    auto b = make(kind, pb);
    b->load_state_dict(a->state_dict());
    EXPECT_EQ(b->steps(), 3);
    EXPECT_EQ(b->group_lr(0), 0.007);
    EXPECT_EQ(b->group_lr(1), 0.003);
    EXPECT_EQ(b->option(1, "weight_decay"), 0.0);
    feed(*a, pa, 3, 2);
    feed(*b, pb, 3, 2);
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values(pa[i]), values(pb[i])) << "param " << i;
    std::set<std::string> keys;
    for (auto& [n, t] : a->state_dict()) keys.insert(n);
    EXPECT_TRUE(keys.count("group.1.lr") && keys.count("group.0.params") && keys.count("step")) << keys.size();
  }
}

TEST(NewOptimizers, StateOfAnotherOptimizerOrOtherGroupsIsRefused) {
  std::vector<Tensor> ps = fresh_params();
  auto adagrad = make("Adagrad", ps);
  auto rms = make("RMSprop", ps);
  feed(*adagrad, ps, 0, 1);
  EXPECT_EMBER_ERROR(rms->load_state_dict(adagrad->state_dict()), "RMSprop::load_state_dict", "another optimizer");
  auto sgd = make("SGD", ps);
  EXPECT_EMBER_ERROR(sgd->load_state_dict(adagrad->state_dict()), "another optimizer");
  optim::RMSprop one_group(ps, {});
  EXPECT_EMBER_ERROR(one_group.load_state_dict(rms->state_dict()), "2 parameter groups", "RMSprop has 1");
  optim::RMSprop uneven({{.params = {ps[0], ps[1]}}, {.params = {param({1})}}}, {});
  EXPECT_EMBER_ERROR(uneven.load_state_dict(rms->state_dict()), "group 0", "other parameters");
  // Groups in another order: the buffers' shapes differ.
  feed(*rms, ps, 0, 1);
  optim::RMSprop swapped({{.params = {ps[1]}}, {.params = {ps[0]}}}, {});
  EXPECT_EMBER_ERROR(swapped.load_state_dict(rms->state_dict()), "state.0.square_avg", "shape");
  // A sum of squares below zero is a damaged state.
  NamedTensors bad = adagrad->state_dict();
  for (auto& [n, t] : bad)
    if (n == "state.1.sum") t = full(t.shape(), Scalar(-1.0), t.dtype());
  EXPECT_EMBER_ERROR(make("Adagrad", ps)->load_state_dict(bad), "state.1.sum", "never negative");
  // An older state without group keys sets every group's lr.
  NamedTensors old;
  for (auto& [n, t] : rms->state_dict())
    if (n.rfind("group.", 0) != 0) old.emplace_back(n, t);
  auto fresh = make("RMSprop", ps);
  fresh->load_state_dict(old);
  EXPECT_EQ(fresh->group_lr(1), rms->lr());
}

}  // namespace
}  // namespace ember::test
