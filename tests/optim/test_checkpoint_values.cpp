// What a checkpoint holds is checked before a run resumes from it: NaN and infinities in
// the parameters or the optimizer's state (a file whose checksums are valid, as a run that
// diverged writes it) are refused by the tensor's name; the optimizer's lr and step must be
// finite and non-negative; metadata numbers (the epoch) are whole numbers in their range.
// Nothing changes when a load is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ember.h"
#include "optim/checkpoint.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<nn::Sequential> small_mlp() {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(4, 3));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(3, 2));
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

std::vector<double> flat(const NamedTensors& ts) {
  std::vector<double> out;
  for (const auto& [n, t] : ts)
    for (double v : t.to(Device::cpu()).to_vector<double>()) out.push_back(v);
  return out;
}

class CheckpointValues : public test::TempDirTest {
 protected:
  // A valid checkpoint of a trained model, rewritten with `edit` applied to its tensors
  // (save_safetensors: the checksums match the edited bytes).
  std::string edited(const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    auto model = small_mlp();
    optim::Adam opt(model->parameters(), {.lr = 0.01});
    train_steps(*model, opt, 2);
    const std::string p = path("ck.safetensors");
    optim::save_checkpoint(p, *model, &opt, {{"epoch", "1"}});
    SafetensorsFile f = load_safetensors(p);
    std::map<std::string, std::string> meta = f.metadata;
    edit(f.tensors);
    save_safetensors(p, f.tensors, meta);
    return p;
  }
  // Loading must fail naming `what`, and change neither the model nor the optimizer.
  void expect_refused(const std::string& file, const std::string& what) {
    auto model = small_mlp();
    optim::Adam opt(model->parameters(), {.lr = 0.05});
    train_steps(*model, opt, 3);
    const auto m0 = flat(model->state_dict()), o0 = flat(opt.state_dict());
    try {
      optim::load_checkpoint(file, *model, &opt);
      ADD_FAILURE() << "loaded; expected an error naming " << what;
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), what)) << e.what();
    }
    EXPECT_EQ(flat(model->state_dict()), m0) << "the model changed";
    EXPECT_EQ(flat(opt.state_dict()), o0) << "the optimizer changed";
  }
  static Tensor& find(std::vector<std::pair<std::string, Tensor>>& ts, const std::string& name) {
    for (auto& [n, t] : ts)
      if (n == name) return t;
    throw std::runtime_error("no " + name);
  }
  // `t` with element i set to v (the tensors of a loaded file are contiguous CPU tensors).
  static Tensor with(const Tensor& t, int64_t i, double v) {
    Tensor c = t.clone();
    c.view({-1}).narrow(0, i, 1).fill_(v);
    return c;
  }
};

TEST_F(CheckpointValues, NonFiniteParametersOrStateAreRefusedByName) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const struct {
    const char* tensor;
    int64_t at;
    double value;
    const char* shown;
  } cases[] = {{"optimizer.state.0.exp_avg_sq", 5, -nan, "-nan"},  // the flipped sign bit, as a value
               {"optimizer.state.2.exp_avg", 0, inf, "inf"},
               {"model.0.weight", 11, -inf, "-inf"},
               {"model.2.bias", 1, nan, "nan"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tensor);
    const std::string p = edited([&](auto& ts) { find(ts, c.tensor) = with(find(ts, c.tensor), c.at, c.value); });
    expect_refused(p, "tensor '" + std::string(c.tensor) + "' holds " + c.shown + " at element " +
                          std::to_string(c.at) + " of ");
  }
  // 16-bit floats are checked too.
  const std::string p = edited([&](auto& ts) {
    ts.emplace_back("model.extra", with(zeros({4}), 2, nan).to(kBFloat16));
  });
  auto model = small_mlp();
  try {
    optim::load_checkpoint(p, *model, nullptr);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "tensor 'model.extra' holds nan at element 2")) << e.what();
  }
}

TEST_F(CheckpointValues, TheOptimizersLrAndStepAreChecked) {
  expect_refused(edited([](auto& ts) { find(ts, "optimizer.lr") = scalar_tensor(-0.5, kFloat64); }),
                 "'lr' is -0.5, expected a finite value >= 0");
  expect_refused(edited([](auto& ts) { find(ts, "optimizer.step") = scalar_tensor(-5, kInt64); }),
                 "'step' is -5, expected a whole number >= 0");
  expect_refused(edited([](auto& ts) { find(ts, "optimizer.step") = zeros({2}, kInt64); }),
                 "'lr' and 'step' must hold one value each");
  // A flipped sign bit in Adam's second moment gave "loss -nan" (the issue): finite, but
  // never negative in a real state.
  expect_refused(edited([](auto& ts) {
                   Tensor& v = find(ts, "optimizer.state.1.exp_avg_sq");
                   v = with(v, 2, -v.view({-1}).select(0, 2).item<double>() - 1e-3);
                 }),
                 "'state.1.exp_avg_sq' holds -");
}

TEST(CheckpointInt, TheEpochIsAWholeNumberInItsRange) {
  const std::map<std::string, std::string> meta = {{"epoch", "12"}, {"abc", "abc"}, {"sci", "1e3"}, {"space", " 12"},
                                                   {"neg", "-5"}, {"huge", "99999999999999999999"}, {"empty", ""},
                                                   {"plus", "+3"}, {"big", "1000001"}};
  EXPECT_EQ(optim::checkpoint_int(meta, "epoch", "ck", 0, 1000000), 12);
  auto error = [&](const std::string& key) {
    try {
      optim::checkpoint_int(meta, key, "ck", 0, 1000000);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("missing"), "checkpoint 'ck' has no 'missing' in its metadata");
  for (const char* key : {"abc", "sci", "space", "empty", "plus"})
    EXPECT_TRUE(has(error(key), "', not a whole number")) << key << ": " << error(key);
  for (const char* key : {"neg", "huge", "big"})
    EXPECT_TRUE(has(error(key), ", outside 0 to 1000000")) << key << ": " << error(key);
}

}  // namespace
}  // namespace ember
