// Optimizers against optim.safetensors and closed forms, optimizer state dicts, LR
// schedules against lr_sched.safetensors, clip_grad_norm_, argument errors, and
// checkpoints (round trip; damaged or mismatched files change nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "optim/checkpoint.h"
#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT
namespace fs = std::filesystem;
using optim::Adam;
using optim::AdamW;
using optim::SGD;

Tensor param(const std::vector<double>& v, DType dt = kFloat64) {
  Tensor t = tensor(v, dt);
  t.requires_grad_();
  return t;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const json& m, std::vector<Tensor> params) {
  const std::string kind = m.at("optimizer");
  const double lr = m.at("lr").get<double>(), wd = m.at("weight_decay").get<double>();
  if (kind == "SGD")
    return std::make_unique<SGD>(params, SGD::Options{lr, m.at("momentum").get<double>(), m.at("dampening").get<double>(),
                                                      wd, m.at("nesterov").get<bool>()});
  EXPECT_FALSE(m.at("amsgrad").get<bool>());
  const auto betas = m.at("betas").get<std::vector<double>>();
  const double eps = m.at("eps").get<double>();
  if (kind == "Adam") return std::make_unique<Adam>(params, Adam::Options{lr, betas.at(0), betas.at(1), eps, wd});
  if (kind == "AdamW") return std::make_unique<AdamW>(params, AdamW::Options{lr, betas.at(0), betas.at(1), eps, wd});
  return nullptr;
}

TEST(OptimRefcases, EveryStepMatches) {
  RefFile f = load("optim.safetensors", 8);
  int64_t checked = 0, compared = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    const int64_t np = m.at("num_params").get<int64_t>(), steps = m.at("steps").get<int64_t>();
    std::vector<Tensor> params;
    for (int64_t p = 0; p < np; ++p) {
      params.push_back(f.field(i, "param" + std::to_string(p) + ".init").clone());
      params.back().requires_grad_();
    }
    auto opt = make_optimizer(m, params);
    ASSERT_NE(opt, nullptr) << "no optimizer for " << m.at("optimizer");
    const Tol tol = tol_for(m);
    for (int64_t k = 0; k < steps; ++k) {
      SCOPED_TRACE("step " + std::to_string(k + 1));
      for (int64_t p = 0; p < np; ++p)
        params[p].set_grad(f.field(i, "param" + std::to_string(p) + ".grads").select(0, k).clone());
      opt->step();
      for (int64_t p = 0; p < np; ++p) {
        const std::string key = "param" + std::to_string(p);
        const Tensor want = f.field(i, key + ".after").select(0, k);
        EXPECT_TRUE(matches(params[p], want, tol)) << key;
        if (params[p].dtype() == kFloat32) {
          // lr 1e-3 moves a float32 parameter by ~5e-3 over five steps, so the README's
          // 1e-4 alone would be weak: the update itself must match to the rounding of the
          // two computations. Each step, each side rounds the new parameter (u|p| apiece,
          // u = 2^-24) and computes its step from the same float32 inputs in its own order
          // of a handful of ops (8u of the step's terms: the step itself, or lr where
          // Adam's m cancels); over k steps these add: 2u*k*|p| + 8u*(|step| + k*lr).
          const Tensor init = f.field(i, key + ".init");
          const double u = 0x1p-24, lr = m.at("lr").get<double>(), taken = static_cast<double>(k + 1);
          const std::vector<double> w = values(want), w0 = values(init);
          std::vector<double> d(w.size()), bound(w.size());
          for (size_t e = 0; e < w.size(); ++e) {
            d[e] = w[e] - w0[e];
            bound[e] = 2 * u * taken * std::max(std::fabs(w[e]), std::fabs(w0[e])) + 8 * u * (std::fabs(d[e]) + taken * lr);
          }
          EXPECT_TRUE(all_close_tol(sub(params[p].detach(), init), d, want.shape(), bound)) << key << " update";
        }
        ++compared;
      }
    }
    EXPECT_EQ(opt->steps(), steps);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  EXPECT_EQ(compared, 8 * 5 * 2);
}

// One scalar parameter p = 1 with gradient 0.5 at every step.
std::vector<double> run_scalar(optim::Optimizer& opt, const Tensor& p, int steps) {
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    p.set_grad(tensor({0.5}, kFloat64));
    opt.step();
    out.push_back(p.item<double>());
  }
  return out;
}

TEST(Optim, ClosedForms) {
  const double g = 0.5, lr = 0.1;
  {
    Tensor p = param({1});
    SGD opt({p}, {.lr = lr});
    auto v = run_scalar(opt, p, 2);
    EXPECT_DOUBLE_EQ(v[0], 1 - lr * g);
    EXPECT_DOUBLE_EQ(v[1], 1 - 2 * lr * g);
  }
  {  // the momentum buffer starts as g: steps of g, then 1.9 g
    Tensor p = param({1});
    SGD opt({p}, {.lr = lr, .momentum = 0.9});
    auto v = run_scalar(opt, p, 2);
    EXPECT_NEAR(v[0], 1 - lr * g, 1e-15);
    EXPECT_NEAR(v[1], 1 - lr * g - lr * 1.9 * g, 1e-15);
  }
  {  // Nesterov: d = g + mu * buf
    Tensor p = param({1});
    SGD opt({p}, {.lr = lr, .momentum = 0.9, .nesterov = true});
    auto v = run_scalar(opt, p, 2);
    EXPECT_NEAR(v[0], 1 - lr * 1.9 * g, 1e-15);
    EXPECT_NEAR(v[1], v[0] - lr * (g + 0.9 * 1.9 * g), 1e-15);
  }
  {  // dampening applies from the second step: buf = 0.9 g + 0.5 g
    Tensor p = param({1});
    SGD opt({p}, {.lr = lr, .momentum = 0.9, .dampening = 0.5});
    auto v = run_scalar(opt, p, 2);
    EXPECT_NEAR(v[1], v[0] - lr * 1.4 * g, 1e-15);
  }
  {  // SGD weight decay: g + wd p
    Tensor p = param({2});
    SGD opt({p}, {.lr = lr, .weight_decay = 0.1});
    EXPECT_NEAR(run_scalar(opt, p, 1)[0], 2 - lr * (g + 0.1 * 2), 1e-15);
  }
  {  // Adam with a constant gradient moves by lr * g / (|g| + eps) each step
    Tensor p = param({1});
    Adam opt({p}, {.lr = lr});
    auto v = run_scalar(opt, p, 3);
    const double d = lr * g / (g + 1e-8);
    EXPECT_NEAR(v[0], 1 - d, 1e-12);
    EXPECT_NEAR(v[2], 1 - 3 * d, 1e-12);
  }
  {  // AdamW decays first: p (1 - lr wd), then the Adam step
    Tensor p = param({1});
    AdamW opt({p}, {.lr = lr, .weight_decay = 0.5});
    EXPECT_NEAR(run_scalar(opt, p, 1)[0], 1 * (1 - lr * 0.5) - lr * g / (g + 1e-8), 1e-12);
  }
  {  // Adam's weight decay is L2 in the gradient: g' = g + wd p, and the first step is lr sign(g')
    Tensor p = param({1});
    Adam opt({p}, {.lr = lr, .weight_decay = 0.5});
    const double gp = g + 0.5;
    EXPECT_NEAR(run_scalar(opt, p, 1)[0], 1 - lr * gp / (gp + 1e-8), 1e-12);
  }
  {  // a parameter without a gradient is left alone
    Tensor a = param({1}), b = param({3});
    Adam opt({a, b}, {.lr = lr});
    a.set_grad(tensor({0.5}, kFloat64));
    opt.step();
    EXPECT_EQ(b.item<double>(), 3);
    EXPECT_LT(a.item<double>(), 1);
    opt.zero_grad();
    EXPECT_FALSE(a.grad().defined());
  }
}

// Runs `steps` steps with deterministic per-step gradients.
void feed(optim::Optimizer& opt, const std::vector<Tensor>& params, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      Generator gen(100 * s + i);
      params[i].set_grad(randn(params[i].shape(), params[i].dtype(), &gen));
    }
    opt.step();
  }
}
std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    out.push_back(p.detach().clone());
    out.back().requires_grad_();
  }
  return out;
}

TEST(Optim, StateDictRoundTripContinuesIdentically) {
  for (const std::string kind : {"SGD", "Adam", "AdamW"}) {
    SCOPED_TRACE(kind);
    auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
      if (kind == "SGD") return std::make_unique<SGD>(ps, SGD::Options{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      if (kind == "Adam") return std::make_unique<Adam>(ps, Adam::Options{.lr = 0.01, .weight_decay = 0.1});
      return std::make_unique<AdamW>(ps, AdamW::Options{.lr = 0.01});
    };
    std::vector<Tensor> pa = {random_tensor({3, 4}, kFloat32), random_tensor({5}, kFloat32, Layout::Contiguous, 2)};
    for (Tensor& p : pa) p.requires_grad_();
    auto a = make(pa);
    EXPECT_EQ(a->state_bytes(), 0);  // made at the first step
    feed(*a, pa, 0, 3);
    // 17 float32 elements: one momentum buffer, or Adam's two moments.
    EXPECT_EQ(a->state_bytes(), (kind == "SGD" ? 1 : 2) * 17 * 4);
    std::vector<Tensor> pb = clones(pa);
    auto b = make(pb);
    b->set_lr(123);  // overwritten by the state
    b->load_state_dict(a->state_dict());
    EXPECT_EQ(b->steps(), 3);
    EXPECT_DOUBLE_EQ(b->lr(), a->lr());
    feed(*a, pa, 3, 2);
    feed(*b, pb, 3, 2);
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values(pa[i]), values(pb[i])) << "param " << i;
    // The keys: lr, step and the per-parameter buffers.
    std::set<std::string> keys;
    for (auto& [n, t] : a->state_dict()) keys.insert(n);
    EXPECT_TRUE(keys.count("lr") && keys.count("step"));
    EXPECT_TRUE(keys.count(kind == "SGD" ? "state.1.momentum_buffer" : "state.1.exp_avg_sq")) << keys.size();
  }
}

TEST(Optim, StateDictErrorsChangeNothing) {
  std::vector<Tensor> ps = {param({1, 2, 3}), param({4})};
  Adam opt(ps, {.lr = 0.01});
  feed(opt, ps, 0, 1);
  const NamedTensors good = opt.state_dict();
  auto snapshot = [&] {
    std::vector<std::vector<double>> out;
    for (auto& [n, t] : opt.state_dict()) out.push_back(values(t));
    return out;
  };
  const auto before = snapshot();
  NamedTensors wrong = good;
  for (auto& [n, t] : wrong)
    if (n == "state.0.exp_avg") t = zeros({4}, kFloat64);
  EXPECT_EMBER_ERROR(opt.load_state_dict(wrong), "state.0.exp_avg", "[4]", "[3]");
  NamedTensors no_lr(good.begin() + 1, good.end());
  EXPECT_EMBER_ERROR(opt.load_state_dict(no_lr), "lr");
  NamedTensors far = good;
  far.emplace_back("state.7.exp_avg", zeros({1}, kFloat64));
  EXPECT_EMBER_ERROR(opt.load_state_dict(far), "state.7.exp_avg");
  NamedTensors garbled = good;
  garbled.emplace_back("state.x.exp_avg", zeros({1}, kFloat64));
  try {  // a malformed key is an ember::Error too
    opt.load_state_dict(garbled);
    ADD_FAILURE() << "a malformed key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state.x.exp_avg"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a malformed key raised a non-ember exception: " << e.what();
  }
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(opt.steps(), 1);
}

TEST(Optim, ArgumentErrors) {
  Tensor p = param({1});
  EXPECT_EMBER_ERROR(SGD({p}, {.lr = -0.1}), "learning rate", "-0.1");
  EXPECT_EMBER_ERROR(Adam({p}, {.lr = -1}), "learning rate");
  EXPECT_EMBER_ERROR(Adam({p}, {.beta1 = 1.0}), "betas");
  EXPECT_EMBER_ERROR(Adam({p}, {.beta2 = -0.5}), "betas");
  EXPECT_EMBER_ERROR(AdamW({p}, {.beta1 = 1.5}), "betas");
  EXPECT_EMBER_ERROR(SGD({p}, {.momentum = 0, .nesterov = true}), "Nesterov");
  EXPECT_EMBER_ERROR(SGD(std::vector<Tensor>{}, {}), "no parameters");
  EXPECT_EMBER_ERROR(SGD({tensor({1.0})}, {}), "parameter 0");
  SGD ok({p}, {});
  EXPECT_EMBER_ERROR(ok.set_lr(std::nan("")), "learning rate");
  EXPECT_EMBER_ERROR(optim::clip_grad_norm_({p}, 0), "max_norm");
}

TEST(Optim, ClipGradNorm) {
  Tensor a = param({0, 0, 0, 0}), b = param({0, 0}), c = param({1});
  a.set_grad(tensor({3, 0, 0, 4}, kFloat64));  // norm 5
  b.set_grad(tensor({12, 0}, kFloat64));       // total sqrt(25 + 144) = 13; c has none
  EXPECT_NEAR(optim::clip_grad_norm_({a, b, c}, 100), 13, 1e-12);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3, 0, 0, 4}));  // below max_norm: unchanged
  EXPECT_NEAR(optim::clip_grad_norm_({a, b, c}, 6.5), 13, 1e-12);
  const double s = 6.5 / 13;
  EXPECT_CLOSE(a.grad(), (std::vector<double>{3 * s, 0, 0, 4 * s}), (Shape{4}), 1e-6, 0);
  EXPECT_CLOSE(b.grad(), (std::vector<double>{12 * s, 0}), (Shape{2}), 1e-6, 0);
  EXPECT_NEAR(optim::clip_grad_norm_({a, b, c}, 100), 6.5, 1e-5);  // the clipped norm is max_norm
  EXPECT_FALSE(c.grad().defined());
}

// ----- LR schedules -----

TEST(LrSchedRefcases, StepAndCosine) {
  RefFile f = load("lr_sched.safetensors", 5);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    Tensor p = param({0});
    SGD opt({p}, {.lr = m.at("base_lr").get<double>()});
    std::unique_ptr<optim::LRScheduler> s;
    const std::string kind = m.at("scheduler");
    if (kind == "StepLR")
      s = std::make_unique<optim::StepLR>(opt, m.at("step_size").get<int64_t>(), m.at("gamma").get<double>());
    else if (kind == "CosineAnnealingLR")
      s = std::make_unique<optim::CosineAnnealingLR>(opt, m.at("T_max").get<int64_t>(), m.at("eta_min").get<double>());
    ASSERT_NE(s, nullptr) << "no scheduler " << kind;
    const std::vector<double> want = f.field(i, "lr").to_vector<double>();
    ASSERT_EQ(want.size(), 20u);
    for (int64_t e = 0; e < 20; ++e) {
      EXPECT_EQ(s->epoch(), e);
      EXPECT_NEAR(opt.lr(), want[e], 1e-15 + 1e-12 * want[e]) << "epoch " << e;
      EXPECT_NEAR(s->lr_at(e), want[e], 1e-15 + 1e-12 * want[e]) << "epoch " << e;
      s->step();
    }
    s->set_epoch(7);  // resuming jumps straight to an epoch's rate
    EXPECT_NEAR(opt.lr(), want[7], 1e-15 + 1e-12 * want[7]);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(LrSched, LinearWarmupAndErrors) {
  Tensor p = param({0});
  SGD opt({p}, {.lr = 0.1});
  optim::LinearWarmup w(opt, 4, 0.25);
  EXPECT_DOUBLE_EQ(w.base_lr(), 0.1);
  const std::vector<double> want = {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1};
  for (size_t e = 0; e < want.size(); ++e) {
    EXPECT_NEAR(opt.lr(), want[e], 1e-15) << "epoch " << e;
    w.step();
  }
  EXPECT_EMBER_ERROR(optim::StepLR(opt, 0), "step_size");
  EXPECT_EMBER_ERROR(optim::CosineAnnealingLR(opt, 0), "T_max");
  EXPECT_EMBER_ERROR(optim::LinearWarmup(opt, 0), "warmup");
  EXPECT_EMBER_ERROR(w.set_epoch(-1), "epoch");
}

// ----- checkpoints -----

std::shared_ptr<nn::Sequential> mlp(int64_t hidden) {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(4, hidden));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(hidden, 2));
  return s;
}
void train_steps(nn::Module& model, optim::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    Generator gen(s);
    Tensor x = randn({8, 4}, kFloat32, &gen), y = randint(0, 2, {8}, kInt64, &gen);
    opt.zero_grad();
    nn::functional::cross_entropy(model(x), y).backward();
    opt.step();
  }
}
std::vector<std::vector<double>> all_values(const NamedTensors& ts) {
  std::vector<std::vector<double>> out;
  for (auto& [n, t] : ts) out.push_back(values(t));
  return out;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  // Loading `file` must fail with an ember::Error and leave a trained model and its optimizer as they were.
  void expect_rejected(const std::string& file, const std::string& what) {
    auto model = mlp(3);
    Adam opt(model->parameters(), {.lr = 0.01});
    train_steps(*model, opt, 2);
    const auto m0 = all_values(model->state_dict()), o0 = all_values(opt.state_dict());
    const std::string msg = error_message([&] { optim::load_checkpoint(file, *model, &opt); });
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(all_values(model->state_dict()), m0) << "the model changed";
    EXPECT_EQ(all_values(opt.state_dict()), o0) << "the optimizer changed";
    EXPECT_EQ(opt.steps(), 2);
  }
  fs::path dir_;
};

TEST_F(Checkpoint, RoundTripContinuesIdentically) {
  manual_seed(1);
  auto a = mlp(3);
  Adam oa(a->parameters(), {.lr = 0.01});
  train_steps(*a, oa, 3);
  optim::save_checkpoint(path("c.safetensors"), *a, &oa, {{"epoch", "1"}});
  manual_seed(2);
  auto b = mlp(3);
  Adam ob(b->parameters(), {.lr = 0.5});
  auto meta = optim::load_checkpoint(path("c.safetensors"), *b, &ob);
  EXPECT_EQ(meta["epoch"], "1");
  EXPECT_EQ(all_values(b->state_dict()), all_values(a->state_dict()));
  EXPECT_EQ(all_values(ob.state_dict()), all_values(oa.state_dict()));
  EXPECT_EQ(ob.steps(), 3);
  EXPECT_DOUBLE_EQ(ob.lr(), 0.01);
  train_steps(*a, oa, 2);
  train_steps(*b, ob, 2);
  EXPECT_EQ(all_values(b->state_dict()), all_values(a->state_dict()));
  auto c = mlp(3);  // a model-only load
  optim::load_checkpoint(path("c.safetensors"), *c, nullptr);
  int64_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
}

TEST_F(Checkpoint, TruncatedFileIsRejected) {
  auto a = mlp(3);
  Adam oa(a->parameters(), {});
  train_steps(*a, oa, 1);
  optim::save_checkpoint(path("c.safetensors"), *a, &oa);
  fs::resize_file(path("c.safetensors"), fs::file_size(path("c.safetensors")) - 10);
  expect_rejected(path("c.safetensors"), "c.safetensors");
}

TEST_F(Checkpoint, FlippedHeaderByteIsRejected) {
  auto a = mlp(3);
  Adam oa(a->parameters(), {});
  train_steps(*a, oa, 1);
  optim::save_checkpoint(path("c.safetensors"), *a, &oa);
  std::fstream f(path("c.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(8);
  char ch = 0;
  f.read(&ch, 1);
  ASSERT_EQ(ch, '{');
  ch = static_cast<char>(ch ^ 0x55);
  f.seekp(8);
  f.write(&ch, 1);
  f.close();
  expect_rejected(path("c.safetensors"), "c.safetensors");
}

TEST_F(Checkpoint, DifferentModelIsRejected) {
  // With optimizer state (whose shapes already differ), and without any (so the optimizer
  // state loads and must be put back when the model refuses its tensors).
  for (int steps : {1, 0}) {
    SCOPED_TRACE(steps);
    auto other = mlp(5);
    Adam oo(other->parameters(), {.lr = 0.3});
    train_steps(*other, oo, steps);
    optim::save_checkpoint(path("other.safetensors"), *other, &oo);
    expect_rejected(path("other.safetensors"), "shape");
  }
  auto same = mlp(3);
  optim::save_checkpoint(path("model_only.safetensors"), *same, nullptr);
  expect_rejected(path("model_only.safetensors"), "optimizer");
  save_safetensors(path("plain.safetensors"), {{"w", ones({2})}});
  expect_rejected(path("plain.safetensors"), "not an ember checkpoint");
}

}  // namespace
}  // namespace ember::test
