// nn::RNN, LSTM, GRU and their cells (layers/recurrent.h): against a float64 loop over
// layers, directions and steps at awkward sizes (batch 1 and 3, hidden 5 and 17, 1 and 7
// steps, 2 and 3 layers, bidirectional, batch_first, unbatched), gradcheck of small
// layers, dropout between layers, PyTorch's parameter names, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/core/reference.h"

namespace ember::test {
namespace {

using Vec = std::vector<double>;
enum class K { kTanh, kRelu, kLstm, kGru };

double sig(double x) { return 1 / (1 + std::exp(-x)); }

// One step of a cell on one batch row, in float64: x [I], h and c [H] (c updated).
Vec ref_step(K k, const Vec& x, const Vec& h, Vec& c, const Vec& wi, const Vec& wh, const Vec& bi, const Vec& bh,
             int64_t H) {
  const int64_t I = static_cast<int64_t>(x.size()), G = k == K::kLstm ? 4 : (k == K::kGru ? 3 : 1);
  Vec gi(G * H), gh(G * H);
  for (int64_t r = 0; r < G * H; ++r) {
    double s = bi.empty() ? 0 : bi[r], t = bh.empty() ? 0 : bh[r];
    for (int64_t i = 0; i < I; ++i) s += wi[r * I + i] * x[i];
    for (int64_t i = 0; i < H; ++i) t += wh[r * H + i] * h[i];
    gi[r] = s, gh[r] = t;
  }
  Vec out(H);
  for (int64_t j = 0; j < H; ++j) {
    auto a = [&](int64_t g) { return gi[g * H + j] + gh[g * H + j]; };
    switch (k) {
      case K::kTanh: out[j] = std::tanh(a(0)); break;
      case K::kRelu: out[j] = std::max(a(0), 0.0); break;
      case K::kLstm:
        c[j] = sig(a(1)) * c[j] + sig(a(0)) * std::tanh(a(2));
        out[j] = sig(a(3)) * std::tanh(c[j]);
        break;
      case K::kGru: {
        const double r = sig(a(0)), z = sig(a(1)), n = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
        out[j] = (1 - z) * n + z * h[j];
        break;
      }
    }
  }
  return out;
}

struct RefOut {
  Vec out, hn, cn;  // out [T, B, D H], hn and cn [L D, B, H]
};

// The whole stack from x [T, B, I] (time-major), h0 and c0 [L D, B, H] (empty: zeros).
RefOut ref_stack(K k, const std::vector<std::vector<Tensor>>& weights, const Vec& x0, int64_t T, int64_t B, int64_t I,
                 int64_t H, int64_t L, int64_t D, const Vec& h0, const Vec& c0) {
  Vec x = x0;
  int64_t in = I;
  RefOut r{{}, Vec(L * D * B * H), Vec(L * D * B * H)};
  for (int64_t l = 0; l < L; ++l) {
    Vec y(T * B * D * H);
    for (int64_t d = 0; d < D; ++d) {
      const auto& w = weights[l * D + d];
      const Vec wi = values(w[0]), wh = values(w[1]);
      const Vec bi = w.size() > 2 ? values(w[2]) : Vec(), bh = w.size() > 2 ? values(w[3]) : Vec();
      for (int64_t b = 0; b < B; ++b) {
        const int64_t s = (l * D + d) * B * H + b * H;
        Vec h(h0.empty() ? Vec(H) : Vec(h0.begin() + s, h0.begin() + s + H));
        Vec c(c0.empty() ? Vec(H) : Vec(c0.begin() + s, c0.begin() + s + H));
        for (int64_t i = 0; i < T; ++i) {
          const int64_t t = d == 0 ? i : T - 1 - i;
          const Vec xt(x.begin() + (t * B + b) * in, x.begin() + (t * B + b + 1) * in);
          h = ref_step(k, xt, h, c, wi, wh, bi, bh, H);
          for (int64_t j = 0; j < H; ++j) y[(t * B + b) * D * H + d * H + j] = h[j];
        }
        std::copy(h.begin(), h.end(), r.hn.begin() + s);
        std::copy(c.begin(), c.end(), r.cn.begin() + s);
      }
    }
    x = y, in = D * H;
  }
  r.out = x;
  return r;
}

struct Case {
  K kind;
  int64_t T, B, I, H, L;
  bool bidirectional, batch_first, with_state;
};

// Runs the layer of `c` in `dt` and compares with the float64 loop. Tolerance: each
// step's state is within ~(I + H + 40) u of the exact one relative to the magnitudes
// involved (gates' sums, the bounded activations), and a step passes earlier errors on
// times at most the recurrent weights' gain: bound it by (T L + 1) (I + H + 40) 8u.
void check_case(const Case& c, DType dt) {
  const int64_t D = c.bidirectional ? 2 : 1;
  const nn::RNNOptions o{.num_layers = c.L,
                         .nonlinearity = c.kind == K::kRelu ? nn::RNNNonlinearity::kReLU : nn::RNNNonlinearity::kTanh,
                         .bias = true,
                         .batch_first = c.batch_first,
                         .dropout = 0,
                         .bidirectional = c.bidirectional};
  Generator gen(7);
  Tensor x_tm = random_tensor({c.T, c.B, c.I}, dt, Layout::Contiguous, 100 + c.H);
  Tensor h0 = random_tensor({c.L * D, c.B, c.H}, dt, Layout::Contiguous, 200 + c.H, [](double v) { return v / 2; });
  Tensor c0 = random_tensor({c.L * D, c.B, c.H}, dt, Layout::Contiguous, 300 + c.H);
  const Tensor x = c.batch_first ? x_tm.transpose(0, 1).contiguous() : x_tm;
  Tensor out, hn, cn;
  std::vector<std::vector<Tensor>> weights;
  if (c.kind == K::kLstm) {
    nn::LSTM m(c.I, c.H, o);
    m.to(dt), m.to(default_device());
    std::tuple<Tensor, std::tuple<Tensor, Tensor>> r =
        c.with_state ? m(x, std::tuple<Tensor, Tensor>{h0, c0}) : m(x);
    out = std::get<0>(r), hn = std::get<0>(std::get<1>(r)), cn = std::get<1>(std::get<1>(r));
    weights = m.all_weights();
  } else if (c.kind == K::kGru) {
    nn::GRU m(c.I, c.H, o);
    m.to(dt), m.to(default_device());
    std::tie(out, hn) = c.with_state ? m(x, h0) : m(x);
    weights = m.all_weights();
  } else {
    nn::RNN m(c.I, c.H, o);
    m.to(dt), m.to(default_device());
    std::tie(out, hn) = c.with_state ? m(x, h0) : m(x);
    weights = m.all_weights();
  }
  const RefOut r = ref_stack(c.kind, weights, values(x_tm), c.T, c.B, c.I, c.H, c.L, D,
                             c.with_state ? values(h0) : Vec(), c.with_state ? values(c0) : Vec());
  const double tol = (c.T * c.L + 1) * (c.I + D * c.H + 40) * 8 * dtype_unit_roundoff(dt);
  const Tensor out_tm = c.batch_first ? out.transpose(0, 1) : out;
  EXPECT_TRUE(all_close(out_tm, r.out, {c.T, c.B, D * c.H}, tol, tol));
  EXPECT_TRUE(all_close(hn, r.hn, {c.L * D, c.B, c.H}, tol, tol));
  if (c.kind == K::kLstm) {
    EXPECT_TRUE(all_close(cn, r.cn, {c.L * D, c.B, c.H}, tol, 4 * tol));
  }
}

const std::vector<Case> kCases = {
    {K::kLstm, 7, 3, 4, 5, 2, true, false, true},  {K::kLstm, 1, 1, 3, 17, 3, false, true, false},
    {K::kLstm, 7, 1, 6, 17, 1, true, true, true},  {K::kGru, 7, 3, 4, 5, 3, true, false, true},
    {K::kGru, 1, 3, 5, 17, 2, false, true, false}, {K::kTanh, 7, 3, 4, 5, 2, true, true, true},
    {K::kRelu, 7, 1, 4, 17, 2, false, false, true},
};

class RecurrentLayers : public ::testing::TestWithParam<DType> {};

TEST_P(RecurrentLayers, MatchAFloat64LoopAtAwkwardSizes) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "kind " << static_cast<int>(c.kind) << " T " << c.T << " B " << c.B << " H "
                                      << c.H << " L " << c.L << " bi " << c.bidirectional << " bf " << c.batch_first);
    check_case(c, GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RecurrentLayers, ::testing::Values(kFloat32, kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(RecurrentLayer, UnbatchedInputIsOneBatchRow) {
  nn::GRU m(3, 5, {.num_layers = 2, .bidirectional = true});
  m.to(default_device());
  const Tensor x = random_tensor({4, 3}, kFloat32, Layout::Contiguous, 5);
  auto [out1, h1] = m(x);
  auto [out3, h3] = m(x.unsqueeze(1));
  EXPECT_EQ(out1.shape(), (Shape{4, 10}));
  EXPECT_EQ(h1.shape(), (Shape{4, 5}));
  EXPECT_TRUE(all_close(out1, out3.squeeze(1), 0, 0));
  EXPECT_TRUE(all_close(h1, h3.squeeze(1), 0, 0));
}

TEST(RecurrentLayer, GradcheckOfSmallLstmGruAndRnn) {
  for (int kind : {0, 1, 2}) {
    const bool lstm = kind == 0;
    const nn::RNNOptions o{.num_layers = 2, .bidirectional = true};
    std::shared_ptr<nn::Module> m;
    if (kind == 0) m = std::make_shared<nn::LSTM>(3, 4, o);
    if (kind == 1) m = std::make_shared<nn::GRU>(3, 4, o);
    if (kind == 2) m = std::make_shared<nn::RNN>(3, 4, o);
    m->to(kFloat64), m->to(default_device());
    Tensor x = random_tensor({3, 2, 3}, kFloat64, Layout::Contiguous, 11);
    Tensor h0 = random_tensor({4, 2, 4}, kFloat64, Layout::Contiguous, 12);
    Tensor c0 = random_tensor({4, 2, 4}, kFloat64, Layout::Contiguous, 13);
    std::vector<Tensor> inputs{x, h0, c0};
    for (Tensor& t : inputs) t.requires_grad_();
    for (const Tensor& p : m->parameters()) inputs.push_back(p);
    auto fn = [&](const std::vector<Tensor>& v) {
      if (lstm) {
        auto [out, hc] = static_cast<nn::LSTM&>(*m)(v[0], std::tuple<Tensor, Tensor>{v[1], v[2]});
        return cat({out.reshape({-1}), std::get<0>(hc).reshape({-1}), std::get<1>(hc).reshape({-1})}, 0);
      }
      auto [out, hn] = kind == 1 ? static_cast<nn::GRU&>(*m)(v[0], v[1]) : static_cast<nn::RNN&>(*m)(v[0], v[1]);
      return cat({out.reshape({-1}), hn.reshape({-1}), mul(v[2], Scalar(0)).reshape({-1})}, 0);
    };
    EXPECT_TRUE(grad_ok(fn, inputs)) << "kind " << kind;
  }
}

TEST(RecurrentLayer, DropoutActsBetweenLayersInTrainingOnly) {
  nn::LSTM m(4, 6, {.num_layers = 2, .dropout = 0.5});
  m.to(default_device());
  const Tensor x = random_tensor({5, 2, 4}, kFloat32, Layout::Contiguous, 3);
  auto out_train = std::get<0>(m(x));
  m.eval();
  auto out_eval1 = std::get<0>(m(x));
  auto out_eval2 = std::get<0>(m(x));
  EXPECT_TRUE(all_close(out_eval1, out_eval2, 0, 0));
  EXPECT_FALSE(all_close(out_train, out_eval1, 1e-3, 1e-3));
  nn::LSTM one(4, 6, {.num_layers = 1, .dropout = 0.5});  // PyTorch warns; nothing to drop
  one.to(default_device());
  auto a = std::get<0>(one(x));
  one.eval();
  EXPECT_TRUE(all_close(a, std::get<0>(one(x)), 0, 0));
}

TEST(RecurrentLayer, ParameterNamesAndShapesArePyTorchs) {
  nn::LSTM m(3, 5, {.num_layers = 2, .bidirectional = true});
  std::vector<std::string> names;
  for (const auto& [name, t] : m.named_parameters()) names.push_back(name + " " + shape_str(t.shape()));
  const std::vector<std::string> want = {
      "weight_ih_l0 [20, 3]",          "weight_hh_l0 [20, 5]",          "bias_ih_l0 [20]",
      "bias_hh_l0 [20]",               "weight_ih_l0_reverse [20, 3]",  "weight_hh_l0_reverse [20, 5]",
      "bias_ih_l0_reverse [20]",       "bias_hh_l0_reverse [20]",       "weight_ih_l1 [20, 10]",
      "weight_hh_l1 [20, 5]",          "bias_ih_l1 [20]",               "bias_hh_l1 [20]",
      "weight_ih_l1_reverse [20, 10]", "weight_hh_l1_reverse [20, 5]", "bias_ih_l1_reverse [20]",
      "bias_hh_l1_reverse [20]"};
  EXPECT_EQ(names, want);
  const double k = 1 / std::sqrt(5.0);
  for (const Tensor& p : m.parameters()) EXPECT_LE(max(abs(p)).item<double>(), k);
  EXPECT_EQ(m.name(), "LSTM(3, 5, num_layers=2, bidirectional=true)");
  nn::GRUCell cell(3, 7, false);
  EXPECT_EQ(cell.named_parameters().size(), 2u);
  EXPECT_EQ(cell.weight_ih.shape(), (Shape{21, 3}));
  EXPECT_EQ(cell.name(), "GRUCell(3, 7, bias=false)");
}

TEST(RecurrentLayer, CellsAreOneStepOfTheirOps) {
  nn::LSTMCell lc(4, 5);
  nn::GRUCell gc(4, 5);
  nn::RNNCell rc(4, 5, true, nn::RNNNonlinearity::kReLU);
  for (nn::Module* m : std::vector<nn::Module*>{&lc, &gc, &rc}) m->to(default_device());
  const Tensor x = random_tensor({3, 4}, kFloat32, Layout::Contiguous, 8);
  const Tensor h = random_tensor({3, 5}, kFloat32, Layout::Contiguous, 9);
  auto [h1, c1] = lc(x, std::tuple<Tensor, Tensor>{h, h});
  auto [h2, c2] = lstm_cell(x, h, h, lc.weight_ih, lc.weight_hh, lc.bias_ih, lc.bias_hh);
  EXPECT_TRUE(all_close(h1, h2, 0, 0));
  EXPECT_TRUE(all_close(gc(x), gru_cell(x, zeros({3, 5}), gc.weight_ih, gc.weight_hh, gc.bias_ih, gc.bias_hh), 0, 0));
  EXPECT_TRUE(all_close(rc(x, h), rnn_relu_cell(x, h, rc.weight_ih, rc.weight_hh, rc.bias_ih, rc.bias_hh), 0, 0));
}

TEST(RecurrentLayer, BadArgumentsAreClearErrors) {
  EXPECT_TRUE(contains(error_of([] { nn::LSTM(3, 5, {.proj_size = 2}); }), "proj_size"));
  EXPECT_TRUE(contains(error_of([] { nn::GRU(3, 5, {.dropout = -0.1}); }), "dropout must be in [0, 1]"));
  EXPECT_TRUE(contains(error_of([] { nn::LSTM(3, 0); }), "must be positive"));
  EXPECT_TRUE(contains(error_of([] { nn::LSTM(3, 5, {.num_layers = 0}); }), "num_layers"));
  EXPECT_TRUE(contains(error_of([] { nn::GRU(3, 5, {.nonlinearity = nn::RNNNonlinearity::kReLU}); }),
                       "nonlinearity is RNN's option only"));
  nn::LSTM m(3, 5, {.num_layers = 2});
  m.to(default_device());
  const Tensor x = zeros({4, 2, 3});
  EXPECT_TRUE(contains(error_of([&] { m(zeros({4, 2, 6})); }), "input has 6 features, expected input_size 3"));
  EXPECT_TRUE(contains(error_of([&] { m(x, std::tuple<Tensor, Tensor>{zeros({2, 2, 6}), zeros({2, 2, 5})}); }),
                       "h0 must be [2, 2, 5]"));
  EXPECT_TRUE(contains(error_of([&] { m(x, std::tuple<Tensor, Tensor>{zeros({2, 2, 5}), zeros({1, 2, 5})}); }),
                       "c0 must be [2, 2, 5]"));
  EXPECT_TRUE(contains(error_of([&] { m(x.to(kFloat64)); }), "input is float64"));
  EXPECT_TRUE(contains(error_of([&] { m(zeros({2, 3, 4, 3})); }), "input must be [T, B, 3]"));
}

}  // namespace
}  // namespace ember::test
