// LambdaLR, MultiStepLR, ExponentialLR, OneCycleLR and ReduceLROnPlateau against
// optim_ext.safetensors (PyTorch 1.13, two parameter groups with their own base rates);
// scheduler state dicts; a training run stopped and resumed from a checkpoint equals one
// that did not stop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "optim/adaptive.h"
#include "optim/checkpoint.h"
#include "optim/one_cycle.h"
#include "optim/plateau.h"
#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT
namespace fs = std::filesystem;

Tensor param(const std::vector<double>& v) {
  Tensor t = tensor(v, kFloat64);
  t.requires_grad_();
  return t;
}

optim::LambdaLR::Lambda lambda_named(const std::string& n) {
  if (n == "pow0.95") return [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); };
  if (n == "inv") return [](int64_t e) { return 1.0 / static_cast<double>(e + 1); };
  return [](int64_t e) { return std::min(1.0, static_cast<double>(e + 1) / 3); };  // warm3
}

std::vector<double> doubles(const json& v) {
  return v.is_array() ? v.get<std::vector<double>>() : std::vector<double>{v.get<double>()};
}

std::unique_ptr<optim::Scheduler> make_scheduler(const json& m, optim::Optimizer& opt) {
  const std::string kind = m.at("scheduler");
  const json& s = m.at("settings");
  if (kind == "LambdaLR") {
    std::vector<optim::LambdaLR::Lambda> ls;
    for (const std::string n : s.at("lambdas")) ls.push_back(lambda_named(n));
    return std::make_unique<optim::LambdaLR>(opt, ls);
  }
  if (kind == "MultiStepLR")
    return std::make_unique<optim::MultiStepLR>(opt, s.at("milestones").get<std::vector<int64_t>>(),
                                                s.at("gamma").get<double>());
  if (kind == "ExponentialLR") return std::make_unique<optim::ExponentialLR>(opt, s.at("gamma").get<double>());
  if (kind == "OneCycleLR") {
    optim::OneCycleLR::Options o;
    o.max_lrs = doubles(s.at("max_lr"));
    o.total_steps = s.value("total_steps", 0);
    o.epochs = s.value("epochs", 0);
    o.steps_per_epoch = s.value("steps_per_epoch", 0);
    o.pct_start = s.value("pct_start", o.pct_start);
    o.anneal_strategy = s.value("anneal_strategy", "cos") == "cos" ? optim::OneCycleLR::Anneal::kCos
                                                                   : optim::OneCycleLR::Anneal::kLinear;
    o.cycle_momentum = s.value("cycle_momentum", true);
    o.base_momentum = s.value("base_momentum", o.base_momentum);
    o.max_momentum = s.value("max_momentum", o.max_momentum);
    o.div_factor = s.value("div_factor", o.div_factor);
    o.final_div_factor = s.value("final_div_factor", o.final_div_factor);
    o.three_phase = s.value("three_phase", false);
    return std::make_unique<optim::OneCycleLR>(opt, o);
  }
  if (kind == "ReduceLROnPlateau") {
    optim::ReduceLROnPlateau::Options o;
    o.mode = s.at("mode") == "min" ? optim::ReduceLROnPlateau::Mode::kMin : optim::ReduceLROnPlateau::Mode::kMax;
    o.factor = s.at("factor").get<double>();
    o.patience = s.at("patience").get<int64_t>();
    o.threshold = s.value("threshold", o.threshold);
    o.threshold_mode = s.value("threshold_mode", "rel") == "rel" ? optim::ReduceLROnPlateau::ThresholdMode::kRel
                                                                 : optim::ReduceLROnPlateau::ThresholdMode::kAbs;
    o.cooldown = s.value("cooldown", 0);
    o.min_lrs = opt.num_groups() == doubles(s.at("min_lr")).size() ? doubles(s.at("min_lr")) : std::vector<double>{};
    if (o.min_lrs.empty()) o.min_lr = doubles(s.at("min_lr"))[0];
    o.eps = s.value("eps", o.eps);
    return std::make_unique<optim::ReduceLROnPlateau>(opt, o);
  }
  return nullptr;
}

struct Scheduled {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
};
Scheduled optimizer_for(const json& m) {
  Scheduled r;
  std::vector<optim::ParamGroup> groups;
  for (double lr : m.at("base_lrs").get<std::vector<double>>()) {
    r.params.push_back(param({0}));
    groups.push_back({.params = {r.params.back()}, .lr = lr});
  }
  if (m.at("optimizer") == "Adam")
    r.opt = std::make_unique<optim::Adam>(groups, optim::Adam::Options{});
  else
    r.opt = std::make_unique<optim::SGD>(groups, optim::SGD::Options{.momentum = 0.9});
  return r;
}

double momentum_of(const optim::Optimizer& opt, size_t g) {
  return opt.option(g, opt.has_option("beta1") ? "beta1" : "momentum");
}

// The closed forms against PyTorch's chained products (MultiStepLR and ExponentialLR
// multiply the previous rate by gamma each epoch): up to 25 roundings apart, 1e-13 relative.
TEST(SchedulerRefcases, EveryEpochMatches) {
  RefFile f = load("optim_ext.safetensors", 29);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (m.at("kind") != "scheduler") continue;
    SCOPED_TRACE(label(f, i, m));
    Scheduled r = optimizer_for(m);
    auto sched = make_scheduler(m, *r.opt);
    ASSERT_NE(sched, nullptr);
    const Tensor lr = f.field(i, "lr");
    const bool has_momentum = f.has(i, "momentum");
    const Tensor momentum = has_momentum ? f.field(i, "momentum") : Tensor();
    const std::vector<double> metrics = f.has(i, "metrics") ? f.field(i, "metrics").to_vector<double>()
                                                            : std::vector<double>{};
    const int64_t epochs = m.at("epochs").get<int64_t>();
    for (int64_t e = 0; e < epochs; ++e) {
      SCOPED_TRACE("epoch " + std::to_string(e));
      const std::vector<double> want = lr.select(0, e).to_vector<double>();
      const std::vector<double> last = sched->get_last_lr();
      for (size_t g = 0; g < want.size(); ++g) {
        EXPECT_NEAR(r.opt->group_lr(g), want[g], 1e-13 * want[g]) << "group " << g;
        EXPECT_EQ(last[g], r.opt->group_lr(g));
        if (has_momentum)
          EXPECT_NEAR(momentum_of(*r.opt, g), momentum.select(0, e).to_vector<double>()[g], 1e-13) << "group " << g;
      }
      if (e + 1 == epochs) break;
      if (auto* p = dynamic_cast<optim::ReduceLROnPlateau*>(sched.get()))
        p->step(metrics[e]);
      else
        dynamic_cast<optim::LRScheduler&>(*sched).step();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

TEST(Schedulers, StateDictsRoundTripAndRefuseOthers) {
  Tensor p = param({0});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  optim::MultiStepLR a(opt, {2, 5}, 0.5);
  for (int i = 0; i < 6; ++i) a.step();
  optim::SGD opt2({param({0})}, {.lr = 0.3});
  optim::MultiStepLR b(opt2, {2, 5}, 0.5);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.epoch(), 6);
  EXPECT_EQ(b.base_lr(), 0.1);
  EXPECT_EQ(b.get_last_lr(), a.get_last_lr());
  optim::MultiStepLR other_milestones(opt2, {3, 5}, 0.5);
  EXPECT_EMBER_ERROR(other_milestones.load_state_dict(a.state_dict()), "milestones", "differs");
  optim::ExponentialLR exp(opt2, 0.9);
  EXPECT_EMBER_ERROR(exp.load_state_dict(a.state_dict()), "unexpected key 'milestones'", "another scheduler");
  optim::ReduceLROnPlateau plateau(opt2, {.patience = 1});
  EXPECT_EMBER_ERROR(plateau.load_state_dict(a.state_dict()), "another scheduler");
  plateau.step(1.0);
  plateau.step(2.0);
  optim::ReduceLROnPlateau plateau2(opt2, {.patience = 1});
  plateau2.load_state_dict(plateau.state_dict());
  EXPECT_EQ(plateau2.num_bad_epochs(), 1);
  EXPECT_EQ(plateau2.epoch(), 2);
  EXPECT_EMBER_ERROR(a.load_state_dict(plateau.state_dict()), "unexpected key");
}

TEST(Schedulers, ArgumentErrors) {
  Tensor p = param({0});
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::Adagrad adagrad({param({0})}, {});
  EXPECT_EMBER_ERROR(optim::MultiStepLR(sgd, {}, 0.1), "milestone");
  EXPECT_EMBER_ERROR(optim::ExponentialLR(sgd, -1), "gamma");
  EXPECT_EMBER_ERROR(optim::LambdaLR(sgd, std::vector<optim::LambdaLR::Lambda>(3, [](int64_t) { return 1.0; })),
                     "one lambda or 1");
  EXPECT_EMBER_ERROR(optim::OneCycleLR(sgd, {.max_lr = 0.1}), "total_steps");
  EXPECT_EMBER_ERROR(optim::OneCycleLR(adagrad, {.max_lr = 0.1, .total_steps = 10}), "Adagrad", "cycle_momentum");
  EXPECT_EMBER_ERROR(optim::ReduceLROnPlateau(sgd, {.factor = 1.0}), "factor");
  optim::OneCycleLR one(sgd, {.max_lr = 0.1, .total_steps = 3, .cycle_momentum = false});
  for (int i = 0; i < 3; ++i) one.step();
  const double lr = sgd.lr();
  EXPECT_EMBER_ERROR(one.step(), "tried to step 5 times", "total_steps is 3");
  EXPECT_EQ(sgd.lr(), lr);
  EXPECT_EQ(one.epoch(), 3);
}

// ----- resuming from a checkpoint -----

std::shared_ptr<nn::Sequential> mlp() {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(4, 6));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(6, 2));
  return s;
}

struct Training {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::Scheduler> sched;
};

// An optimizer with the no-decay groups and a schedule; `kind` picks the pair.
Training make_training(const std::string& kind, uint64_t seed) {
  manual_seed(seed);
  Training t{mlp(), nullptr, nullptr};
  auto groups = optim::weight_decay_groups(t.model->parameters());
  if (kind == "OneCycleLR") {
    t.opt = std::make_unique<optim::SGD>(groups, optim::SGD::Options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
    t.sched = std::make_unique<optim::OneCycleLR>(*t.opt, optim::OneCycleLR::Options{.max_lr = 0.2, .total_steps = 10});
  } else if (kind == "ReduceLROnPlateau") {
    t.opt = std::make_unique<optim::RMSprop>(groups, optim::RMSprop::Options{.lr = 0.01, .weight_decay = 1e-3,
                                                                             .momentum = 0.5, .centered = true});
    t.sched = std::make_unique<optim::ReduceLROnPlateau>(*t.opt, optim::ReduceLROnPlateau::Options{.patience = 0});
  } else {
    t.opt = std::make_unique<optim::Adadelta>(groups, optim::Adadelta::Options{.weight_decay = 1e-3});
    t.sched = std::make_unique<optim::LambdaLR>(*t.opt, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
  }
  return t;
}

// Step s of the run: a batch fixed by s, one optimizer step, one scheduler step (the
// plateau schedule sees a metric that worsens every other step).
void train_step(Training& t, int s) {
  Generator gen(s);
  Tensor x = randn({8, 4}, kFloat32, &gen), y = randint(0, 2, {8}, kInt64, &gen);
  t.opt->zero_grad();
  Tensor loss = nn::functional::cross_entropy((*t.model)(x), y);
  loss.backward();
  t.opt->step();
  if (auto* p = dynamic_cast<optim::ReduceLROnPlateau*>(t.sched.get()))
    p->step(s % 2 == 0 ? loss.item<double>() : 10.0 + s);
  else
    dynamic_cast<optim::LRScheduler&>(*t.sched).step();
}

TEST(Resume, StoppedAndResumedEqualsUninterrupted) {
  const fs::path dir = fs::temp_directory_path() / ("ember_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string kind : {"OneCycleLR", "ReduceLROnPlateau", "LambdaLR"}) {
    SCOPED_TRACE(kind);
    Training whole = make_training(kind, 1);
    std::vector<std::vector<double>> lrs_whole, lrs_resumed;
    for (int s = 0; s < 10; ++s) {
      train_step(whole, s);
      lrs_whole.push_back(whole.sched->get_last_lr());
    }
    Training first = make_training(kind, 1);
    for (int s = 0; s < 4; ++s) {
      train_step(first, s);
      lrs_resumed.push_back(first.sched->get_last_lr());
    }
    const std::string path = (dir / (kind + ".safetensors")).string();
    optim::save_checkpoint(path, *first.model, first.opt.get(), first.sched.get(), {{"step", "4"}});
    Training resumed = make_training(kind, 2);  // other weights; its own fresh state
    const auto meta = optim::load_checkpoint(path, *resumed.model, resumed.opt.get(), resumed.sched.get());
    EXPECT_EQ(meta.at("step"), "4");
    for (int s = 4; s < 10; ++s) {
      train_step(resumed, s);
      lrs_resumed.push_back(resumed.sched->get_last_lr());
    }
    EXPECT_EQ(lrs_resumed, lrs_whole);
    const NamedTensors a = whole.model->state_dict(), b = resumed.model->state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i].second), values(b[i].second)) << a[i].first;
    // A checkpoint without a scheduler's state cannot resume one.
    optim::save_checkpoint(path, *first.model, first.opt.get());
    EXPECT_EMBER_ERROR(optim::load_checkpoint(path, *resumed.model, resumed.opt.get(), resumed.sched.get()),
                       "no scheduler state");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ember::test
