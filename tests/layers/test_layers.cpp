// nn::Module bookkeeping (dotted names, state dicts, strict loading, modes, dtype moves,
// zero_grad), the layers' forwards against float64 loops, the default initialisation
// against init.safetensors, and gradchecks of the functional forms (losses: test_losses.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/core/refcase_util.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

namespace F = nn::functional;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(const Shape& s, uint64_t seed, double scale = 1, double shift = 0) {
  Tensor t = random_tensor(s, kFloat64, Layout::Contiguous, seed, [=](double v) { return v * scale + shift; });
  t.requires_grad_();
  return t;
}
using test::grad_ok;
void set_values(const Tensor& t, const std::vector<double>& v) {
  NoGradGuard g;
  t.copy_(tensor(v, t.shape(), t.dtype()));
}

// ----- a nested model -----
class Block : public nn::Callable<Block> {
 public:
  Block() {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(3));
  }
  Tensor forward(const Tensor& x) { return bn->forward(fc->forward(x)); }
  std::string name() const override { return "Block"; }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::BatchNorm1d> bn;
};
class Net : public nn::Callable<Net> {
 public:
  Net() {
    scale = register_parameter("scale", ones({2}));
    auto seq = std::make_shared<nn::Sequential>();
    seq->push_back(std::make_shared<Block>());
    seq->push_back(std::make_shared<nn::ReLU>());
    seq->push_back(std::make_shared<nn::Linear>(3, 2));
    features = register_module("features", seq);
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
    register_buffer("calls", zeros({}, kInt64));
  }
  Tensor forward(const Tensor& x) { return mul(drop->forward(features->forward(x)), scale); }
  std::string name() const override { return "Net"; }
  Tensor scale;
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Dropout> drop;
};
std::vector<std::string> names(const NamedTensors& ts) {
  std::vector<std::string> out;
  for (auto& [n, t] : ts) out.push_back(n);
  return out;
}
std::map<std::string, std::vector<double>> snapshot(const nn::Module& m) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [n, t] : m.state_dict()) out[n] = values(t);
  return out;
}

TEST(Module, DottedNamesAndCounts) {
  Net net;
  const std::vector<std::string> params = {"scale",           "features.0.fc.weight", "features.0.fc.bias",
                                           "features.0.bn.weight", "features.0.bn.bias", "features.2.weight",
                                           "features.2.bias"};
  EXPECT_EQ(names(net.named_parameters()), params);
  EXPECT_EQ(names(net.named_buffers()), (std::vector<std::string>{"calls", "features.0.bn.running_mean",
                                                                  "features.0.bn.running_var",
                                                                  "features.0.bn.num_batches_tracked"}));
  int64_t count = 0;
  for (const Tensor& p : net.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    count += p.numel();
  }
  EXPECT_EQ(net.parameters().size(), 7u);
  EXPECT_EQ(count, 2 + 12 + 3 + 3 + 3 + 6 + 2);
  ASSERT_EQ(net.features->size(), 3u);
  EXPECT_EQ(net.features->named_children()[2].first, "2");
  EXPECT_EQ((*net.features)[2].name(), "Linear(in_features=3, out_features=2, bias=true)");
  // Each module's parameters then buffers (PyTorch's order: scale, calls, features.0...);
  // values are detached views of the module's own data.
  NamedTensors sd = net.state_dict();
  ASSERT_EQ(sd.size(), 11u);
  const std::vector<std::string> sd_names = names(sd);
  std::set<std::string> keys(sd_names.begin(), sd_names.end());
  EXPECT_EQ(keys.size(), 11u);
  for (auto& [n, t] : sd) EXPECT_FALSE(t.requires_grad()) << n;
  EXPECT_EQ(sd[1].first, "calls");
  EXPECT_EQ(sd[2].first, "features.0.fc.weight");
  EXPECT_TRUE(sd[2].second.shares_storage_with((*net.features)[0].named_parameters()[0].second));
  EXPECT_NE(net.str().find("(features): Sequential"), std::string::npos) << net.str();
  EXPECT_EQ(nn::Linear(3, 2, false).named_parameters().size(), 1u);
}

class BadName : public nn::Callable<BadName> {
 public:
  explicit BadName(const std::string& n) { register_parameter(n, zeros({1})); }
  Tensor forward(const Tensor& x) { return x; }
  std::string name() const override { return "BadName"; }
};
TEST(Module, RejectsBadNames) {
  EXPECT_EMBER_ERROR(BadName("a.b"), "a.b");
  EXPECT_EMBER_ERROR(BadName(""), "name");
}

TEST(Module, StateDictRoundTripIntoFreshModel) {
  Net a, b;
  a.eval();
  b.eval();
  ASSERT_NE(snapshot(a)["features.0.fc.weight"], snapshot(b)["features.0.fc.weight"]);  // random inits differ
  set_values(a.named_buffers()[1].second, {0.5, -1, 2});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(snapshot(a), snapshot(b));
  Tensor x = random_tensor({5, 4}, kFloat32);
  EXPECT_TRUE(all_close(b(x), a(x), 0, 0));
  // A copy, not an alias: changing a afterwards leaves b alone.
  set_values(a.scale, {7, 7});
  EXPECT_EQ(values(b.scale), (std::vector<double>{1, 1}));
}

TEST(Module, StrictLoadListsProblemsAndChangesNothing) {
  Net a, b;
  NamedTensors bad;
  for (auto& [n, t] : a.state_dict()) {
    if (n == "features.2.bias") continue;
    bad.emplace_back(n, n == "features.0.fc.weight" ? zeros({3, 5}) : t.clone());
  }
  bad.emplace_back("extra.weight", ones({1}));
  const auto before = snapshot(b);
  const std::string msg = error_message([&] { b.load_state_dict(bad); });
  for (const char* s : {"missing keys: features.2.bias", "unexpected keys: extra.weight", "shape mismatches",
                        "features.0.fc.weight", "[3, 5]", "[3, 4]"})
    EXPECT_NE(msg.find(s), std::string::npos) << "want '" << s << "' in: " << msg;
  EXPECT_EQ(snapshot(b), before);
  // Each problem alone is enough in strict mode.
  NamedTensors missing = a.state_dict();
  missing.erase(missing.begin());
  EXPECT_EMBER_ERROR(b.load_state_dict(missing), "missing keys: scale");
  NamedTensors extra = a.state_dict();
  extra.emplace_back("features.9.weight", ones({2}));
  EXPECT_EMBER_ERROR(b.load_state_dict(extra), "unexpected keys: features.9.weight");
  EXPECT_EQ(snapshot(b), before);
}

TEST(Module, NonStrictLoadSkipsMissingAndUnexpected) {
  Net a, b;
  NamedTensors partial;
  for (auto& [n, t] : a.state_dict())
    if (n != "features.2.bias") partial.emplace_back(n, t);
  partial.emplace_back("extra", ones({4}));
  const std::vector<double> own_bias = values((*b.features)[2].named_parameters()[1].second);
  b.load_state_dict(partial, false);
  auto sa = snapshot(a), sb = snapshot(b);
  for (auto& [n, v] : sa) {
    if (n == "features.2.bias") EXPECT_EQ(sb[n], own_bias);
    else EXPECT_EQ(sb[n], v) << n;
  }
  // Shape mismatches are errors even when not strict.
  NamedTensors wrong = {{"scale", ones({3})}};
  const auto before = snapshot(b);
  EXPECT_EMBER_ERROR(b.load_state_dict(wrong, false), "scale", "[3]", "[2]");
  EXPECT_EQ(snapshot(b), before);
}

TEST(Module, TrainEvalPropagates) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.drop->is_training());
  EXPECT_FALSE((*net.features)[0].children()[1]->is_training());
  Tensor x = random_tensor({6, 4}, kFloat32);
  EXPECT_TRUE(all_close(net(x), net(x), 0, 0));  // deterministic: no dropout, running stats
  net.train();
  EXPECT_TRUE(net.drop->is_training() && (*net.features)[0].is_training());
}

TEST(Module, ToFloat64KeepsHandles) {
  nn::Linear lin(3, 2);
  nn::BatchNorm1d bn(2);
  optim::SGD opt(lin.parameters(), {.lr = 0.5});
  Tensor w = lin.weight;
  const TensorImpl* impl = w.impl_ptr().get();
  const std::vector<double> before = values(w);
  lin.to(kFloat64);
  bn.to(kFloat64);
  EXPECT_EQ(lin.weight.impl_ptr().get(), impl);
  EXPECT_EQ(lin.named_parameters()[0].second.impl_ptr().get(), impl);
  EXPECT_DTYPE(w, kFloat64);
  EXPECT_DTYPE(lin.bias, kFloat64);
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_EQ(values(w), before);
  EXPECT_DTYPE(bn.running_var, kFloat64);
  EXPECT_DTYPE(bn.num_batches_tracked, kInt64);
  Tensor y = lin(ones({4, 3}, kFloat64));
  EXPECT_DTYPE(y, kFloat64);
  sum(y).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_DTYPE(w.grad(), kFloat64);
  EXPECT_CLOSE(w.grad(), std::vector<double>(6, 4.0), (Shape{2, 3}), 0, 0);
  opt.step();  // the optimizer made before to() updates the same tensors
  std::vector<double> want = before;
  for (double& v : want) v -= 0.5 * 4;
  EXPECT_CLOSE(lin.weight, want, (Shape{2, 3}), 0, 1e-12);
}

TEST(Module, ZeroGrad) {
  nn::Linear lin(3, 2);
  Tensor x = ones({1, 3});
  sum(lin(x)).backward();
  sum(lin(x)).backward();
  EXPECT_CLOSE(lin.bias.grad(), (std::vector<double>{2, 2}), (Shape{2}), 0, 0);  // accumulated
  lin.zero_grad();
  for (const Tensor& p : lin.parameters())
    if (p.grad().defined()) {
      EXPECT_EQ(values(sum(abs(p.grad()))), std::vector<double>{0});
    }
  sum(lin(x)).backward();
  EXPECT_CLOSE(lin.bias.grad(), (std::vector<double>{1, 1}), (Shape{2}), 0, 0);
}

// ----- forwards -----

TEST(Layers, LinearIsXWtPlusB) {
  nn::Linear lin(3, 2);
  Tensor x = random_tensor({2, 4, 3}, kFloat32, Layout::Contiguous, 3);
  std::vector<double> xv = values(x), w = values(lin.weight), b = values(lin.bias), want;
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t o = 0; o < 2; ++o) {
      double s = b[o];
      for (int64_t k = 0; k < 3; ++k) s += xv[r * 3 + k] * w[o * 3 + k];
      want.push_back(s);
    }
  EXPECT_CLOSE(lin(x), want, (Shape{2, 4, 2}), 1e-5, 1e-6);
  EXPECT_EMBER_ERROR(lin(ones({2, 5})), "linear", "[2, 5]");
  EXPECT_EQ(lin.name(), "Linear(in_features=3, out_features=2, bias=true)");
}

TEST(Layers, Conv2dMatchesConvOp) {
  nn::Conv2d conv(4, 6, {3, 2}, {2, 1}, {1, 0}, {1, 1}, 2);
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(conv.bias.shape(), (Shape{6}));
  Tensor x = random_tensor({2, 4, 7, 6}, kFloat32, Layout::Contiguous, 4);
  Tensor want = conv2d(x, conv.weight, conv.bias, {2, 1}, {1, 0}, {1, 1}, 2);
  EXPECT_EQ(want.shape(), (Shape{2, 6, 4, 5}));
  EXPECT_TRUE(all_close(conv(x), want, 0, 0));
  EXPECT_EMBER_ERROR(nn::Conv2d(3, 4, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 2), "groups");
}

TEST(Layers, BatchNorm2dTrainingAndEval) {
  nn::BatchNorm2d bn(2);
  set_values(bn.weight, {1.5, -0.5});
  set_values(bn.bias, {0.25, 2});
  const int64_t N = 3, C = 2, HW = 20, n = N * HW;
  Tensor x = random_tensor({N, C, 4, 5}, kFloat32, Layout::Contiguous, 5, [](double v) { return 2 * v + 1; });
  const std::vector<double> xv = values(x), w = {1.5, -0.5}, b = {0.25, 2};
  std::vector<double> mean(C, 0), var(C, 0);
  auto at = [&](int64_t i, int64_t c, int64_t k) { return xv[(i * C + c) * HW + k]; };
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < HW; ++k) mean[c] += at(i, c, k) / n;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < HW; ++k) var[c] += std::pow(at(i, c, k) - mean[c], 2) / n;  // biased
  }
  auto expect_norm = [&](const Tensor& y, const std::vector<double>& m, const std::vector<double>& v) {
    std::vector<double> want(xv.size());
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t k = 0; k < HW; ++k)
          want[(i * C + c) * HW + k] = (at(i, c, k) - m[c]) / std::sqrt(v[c] + 1e-5) * w[c] + b[c];
    EXPECT_CLOSE(y, want, x.shape(), 1e-4, 1e-5);
  };
  expect_norm(bn(x), mean, var);
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.1 * mean[c];
    rv[c] = 0.9 + 0.1 * var[c] * n / (n - 1);  // unbiased in the running estimate
  }
  EXPECT_CLOSE(bn.running_mean, rm, (Shape{C}), 1e-5, 1e-6);
  EXPECT_CLOSE(bn.running_var, rv, (Shape{C}), 1e-5, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.9 * rm[c] + 0.1 * mean[c];
    rv[c] = 0.9 * rv[c] + 0.1 * var[c] * n / (n - 1);
  }
  EXPECT_CLOSE(bn.running_var, rv, (Shape{C}), 1e-5, 1e-6);
  bn.eval();  // running statistics, which eval leaves alone
  expect_norm(bn(x), rm, rv);
  EXPECT_CLOSE(bn.running_mean, rm, (Shape{C}), 1e-5, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_EMBER_ERROR(bn(ones({3, 2})), "BatchNorm2d", "[3, 2]");
  nn::BatchNorm1d bn1(2);
  EXPECT_EQ(bn1(random_tensor({4, 2}, kFloat32)).shape(), (Shape{4, 2}));
  EXPECT_EQ(bn1(random_tensor({4, 2, 3}, kFloat32)).shape(), (Shape{4, 2, 3}));
  EXPECT_EMBER_ERROR(bn1(ones({1, 2})), "batch_norm");  // one value per channel
}

TEST(Layers, LayerNormOverTrailingDims) {
  nn::LayerNorm ln({4, 5});
  Tensor x = random_tensor({2, 3, 4, 5}, kFloat32, Layout::Contiguous, 6);
  Tensor w = random_tensor({4, 5}, kFloat32, Layout::Contiguous, 7), b = random_tensor({4, 5}, kFloat32, Layout::Contiguous, 8);
  set_values(ln.weight, values(w));
  set_values(ln.bias, values(b));
  std::vector<double> xv = values(x), wv = values(w), bv = values(b), want(xv.size());
  for (int64_t g = 0; g < 6; ++g) {
    double m = 0, v = 0;
    for (int64_t k = 0; k < 20; ++k) m += xv[g * 20 + k] / 20;
    for (int64_t k = 0; k < 20; ++k) v += std::pow(xv[g * 20 + k] - m, 2) / 20;
    for (int64_t k = 0; k < 20; ++k) want[g * 20 + k] = (xv[g * 20 + k] - m) / std::sqrt(v + 1e-5) * wv[k] + bv[k];
  }
  EXPECT_CLOSE(ln(x), want, x.shape(), 1e-4, 1e-5);
  EXPECT_EMBER_ERROR(ln(ones({2, 5, 4})), "layer_norm", "[4, 5]");
}

TEST(Layers, Dropout) {
  Tensor x = random_tensor({1000}, kFloat32);
  nn::Dropout d0(0.0);
  EXPECT_TRUE(all_close(d0(x), x, 0, 0));
  nn::Dropout d(0.3);
  d.eval();
  EXPECT_TRUE(all_close(d(x), x, 0, 0));
  d.train();
  Tensor big = ones({100000});
  manual_seed(7);
  const std::vector<double> y1 = values(d(big));
  int64_t zeros_ = 0;
  for (double v : y1) {
    if (v == 0) ++zeros_;
    else EXPECT_NEAR(v, 1 / 0.7, 1e-6);
  }
  EXPECT_NEAR(zeros_ / 100000.0, 0.3, 0.01);  // 0.01 is ~7 standard deviations
  manual_seed(7);
  EXPECT_EQ(values(d(big)), y1);
  manual_seed(8);
  EXPECT_NE(values(d(big)), y1);
  Generator g1(5), g2(5);
  EXPECT_EQ(values(F::dropout(big, 0.5, true, &g1)), values(F::dropout(big, 0.5, true, &g2)));
  EXPECT_EQ(values(sum(abs(F::dropout(x, 1.0, true)))), std::vector<double>{0});
  EXPECT_EMBER_ERROR(nn::Dropout(1.5), "Dropout", "1.5");
}

TEST(Layers, EmbeddingPaddingRowGetsNoGrad) {
  nn::Embedding emb(5, 3, 1);
  EXPECT_EQ(values(emb.weight.select(0, 1)), (std::vector<double>{0, 0, 0}));
  set_values(emb.weight, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  Tensor idx = tensor({0, 1, 2, 1, 2, 2}, {2, 3}, kInt64);
  Tensor out = emb(idx);
  EXPECT_CLOSE(out, (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 3, 4, 5, 6, 7, 8, 6, 7, 8}), (Shape{2, 3, 3}), 0, 0);
  sum(out).backward();
  EXPECT_CLOSE(emb.weight.grad(), (std::vector<double>{1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0, 0, 0, 0}), (Shape{5, 3}), 0, 0);
  nn::Embedding neg(4, 2, -1);  // counts from the end, as in PyTorch
  EXPECT_EQ(values(neg.weight.select(0, 3)), (std::vector<double>{0, 0}));
  // On a GPU a bad index is raised at the next synchronization: reading the result.
  EXPECT_THROW(emb(tensor({5}, kInt64)).to_vector<float>(), Error);
}

TEST(Layers, Flatten) {
  Tensor x = arange(0, 120, 1).view({2, 3, 4, 5});
  Tensor y = nn::Flatten()(x);
  EXPECT_EQ(y.shape(), (Shape{2, 60}));
  EXPECT_EQ(values(y), values(x));
  EXPECT_EQ(nn::Flatten(1, 2)(x).shape(), (Shape{2, 12, 5}));
}

// Window i of n over L spans [floor(i L / n), ceil((i + 1) L / n)).
std::vector<double> ref_adaptive(const Tensor& x, int64_t oh, int64_t ow) {
  const int64_t H = x.size(-2), W = x.size(-1), planes = x.numel() / (H * W);
  std::vector<double> v = values(x), out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh, w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += v[(p * H + h) * W + w];
        out.push_back(s / double((h1 - h0) * (w1 - w0)));
      }
  return out;
}
TEST(Layers, AdaptiveAvgPool2d) {
  struct Case { Shape in; nn::Pair out; };
  for (const Case& c : {Case{{2, 3, 7, 5}, {3, 2}}, Case{{1, 2, 6, 4}, {3, 2}}, Case{{1, 1, 5, 5}, {1, 1}},
                        Case{{2, 4, 4}, {3, 3}}, Case{{1, 1, 3, 2}, {5, 4}}}) {
    SCOPED_TRACE(shape_str(c.in));
    Tensor x = random_tensor(c.in, kFloat64, Layout::Contiguous, 9);
    Shape want_shape = c.in;
    want_shape[want_shape.size() - 2] = c.out.first;
    want_shape.back() = c.out.second;
    EXPECT_CLOSE(nn::AdaptiveAvgPool2d(c.out)(x), ref_adaptive(x, c.out.first, c.out.second), want_shape, 1e-12, 1e-12);
  }
}

// ----- default initialisation (init.safetensors) -----

TEST(Init, DefaultsMatchInitRefcases) {
  refcase::RefFile f = refcase::load("init.safetensors", 12);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const refcase::json m = f.meta(i);
    const std::string op = m.at("op");
    SCOPED_TRACE("init case" + std::to_string(i) + " " + op);
    if (op == "Linear" || op == "Conv2d") {
      const double bound = f.field(i, "weight_bound").item<double>(), evar = f.field(i, "expected_var").item<double>();
      EXPECT_DOUBLE_EQ(f.field(i, "bias_bound").item<double>(), bound);
      const Shape wshape = f.field(i, "weight_shape").to_vector<int64_t>();
      // Pool the draws of fresh layers until there are 100000 weights (var std error ~0.3%).
      std::vector<double> w, b;
      while (w.size() < 100000) {
        Tensor wt, bt;
        if (op == "Linear") {
          auto l = std::make_shared<nn::Linear>(m.at("in_features").get<int64_t>(), m.at("out_features").get<int64_t>());
          wt = l->weight, bt = l->bias;
        } else {
          auto ks = refcase::pair_of(m.at("kernel_size"));
          auto l = std::make_shared<nn::Conv2d>(m.at("in_channels").get<int64_t>(), m.at("out_channels").get<int64_t>(), ks,
                                                nn::Pair{1, 1}, nn::Pair{0, 0}, nn::Pair{1, 1}, m.at("groups").get<int64_t>());
          wt = l->weight, bt = l->bias;
        }
        ASSERT_EQ(wt.shape(), wshape);
        ASSERT_EQ(nn::init::calculate_fan_in_and_fan_out(wt).first, m.at("fan_in").get<int64_t>());
        for (double v : values(wt)) w.push_back(v);
        for (double v : values(bt)) b.push_back(v);
      }
      double mean = 0, var = 0, wmax = 0, bmax = 0;
      for (double v : w) mean += v / double(w.size());
      for (double v : w) var += (v - mean) * (v - mean) / double(w.size() - 1);
      for (double v : w) wmax = std::max(wmax, std::fabs(v));
      for (double v : b) bmax = std::max(bmax, std::fabs(v));
      EXPECT_LE(wmax, bound * (1 + 1e-6));
      EXPECT_GE(wmax, 0.99 * bound);  // the whole range is used
      EXPECT_LE(bmax, bound * (1 + 1e-6));
      EXPECT_GE(bmax, 0.9 * bound);
      EXPECT_NEAR(var, evar, 0.02 * evar);
      EXPECT_NEAR(mean, 0, 0.01 * bound);
    } else if (op == "Embedding") {
      nn::Embedding emb(1000, 64);
      std::vector<double> v = values(emb.weight);
      double mean = 0, var = 0;
      for (double e : v) mean += e / double(v.size());
      for (double e : v) var += (e - mean) * (e - mean) / double(v.size() - 1);
      EXPECT_NEAR(mean, f.field(i, "weight_mean").item<double>(), 0.02);
      EXPECT_NEAR(std::sqrt(var), f.field(i, "weight_std").item<double>(), 0.02);
    } else if (op == "BatchNorm2d") {
      nn::BatchNorm2d bn(7);
      EXPECT_EQ(values(bn.weight), std::vector<double>(7, f.field(i, "weight_value").item<double>()));
      EXPECT_EQ(values(bn.bias), std::vector<double>(7, f.field(i, "bias_value").item<double>()));
      EXPECT_EQ(values(bn.running_mean), std::vector<double>(7, f.field(i, "running_mean_value").item<double>()));
      EXPECT_EQ(values(bn.running_var), std::vector<double>(7, f.field(i, "running_var_value").item<double>()));
      EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
      EXPECT_NE(bn.name().find("momentum=0.1"), std::string::npos) << bn.name();
    } else if (op == "LayerNorm") {
      nn::LayerNorm ln({3, 4});
      EXPECT_EQ(values(ln.weight), std::vector<double>(12, f.field(i, "weight_value").item<double>()));
      EXPECT_EQ(values(ln.bias), std::vector<double>(12, f.field(i, "bias_value").item<double>()));
    } else {
      ADD_FAILURE() << "unknown init case " << op;
      continue;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// ----- gradchecks (float64) -----

TEST(Gradcheck, LinearFunctionalAndModule) {
  Tensor x = leaf({3, 4}, 1), w = leaf({2, 4}, 2), b = leaf({2}, 3);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::linear(in[0], in[1]); }, {x, w}));
  nn::Linear lin(4, 2);
  lin.to(kFloat64);
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return lin(in[0]); }, {x, lin.weight, lin.bias}));
}

TEST(Gradcheck, BatchNormAndLayerNorm) {
  Tensor x = leaf({4, 3, 2, 2}, 4), w = leaf({3}, 5), b = leaf({3}, 6);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::batch_norm(in[0], {}, {}, in[1], in[2], true); },
                      {x, w, b}));
  Tensor rm = random_tensor({3}, kFloat64), rv = random_tensor({3}, kFloat64, Layout::Contiguous, 2,
                                                               [](double v) { return 1 + v * v; });
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::batch_norm(in[0], rm, rv, in[1], in[2], false); },
                      {x, w, b}));
  nn::BatchNorm2d bn(3);
  bn.to(kFloat64);
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return bn(in[0]); }, {x, bn.weight, bn.bias}));
  Tensor y = leaf({2, 3, 4}, 7), lw = leaf({3, 4}, 8), lb = leaf({3, 4}, 9);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {3, 4}, in[1], in[2]); },
                      {y, lw, lb}));
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {4}); }, {y}));
}

TEST(Gradcheck, EmbeddingDropoutAdaptivePool) {
  Tensor w = leaf({6, 3}, 14), idx = tensor({0, 5, 2, 2, 0, 1}, {2, 3}, kInt64);
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::embedding(idx, in[0]); }, {w}));
  Generator gen;
  Tensor x = leaf({4, 5}, 15);
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) {
    gen.manual_seed(3);  // the same mask on every evaluation
    return F::dropout(in[0], 0.4, true, &gen);
  }, {x}));
  Tensor p = leaf({1, 2, 5, 7}, 16), q = leaf({1, 1, 6, 6}, 17);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::adaptive_avg_pool2d(in[0], {3, 4}); }, {p}));
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return F::adaptive_avg_pool2d(in[0], {3, 2}); }, {q}));
}

}  // namespace
}  // namespace ember::test
