// The recurrent cells (core/ops_rnn.cpp): lstm_cell, gru_cell, rnn_tanh_cell and
// rnn_relu_cell against a float64 loop at awkward sizes in float32 and float64, their
// gradients (gradcheck in float64; float32's against float64's), the pointwise halves,
// and the argument checks. Runs on every test device (NAME.cuda: the emulated kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rnn_sequence.h"
#include "tests/core/grad_helpers.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

double sig(double x) { return 1 / (1 + std::exp(-x)); }

// The identity [n, n] for a square w: a cell whose w_ih is it takes its x as the projection.
Tensor eye_like(const Tensor& w) {
  std::vector<double> v(static_cast<size_t>(w.size(0) * w.size(0)), 0.0);
  for (int64_t i = 0; i < w.size(0); ++i) v[static_cast<size_t>(i * w.size(0) + i)] = 1;
  return make_tensor(v, w.shape(), w.dtype());
}

struct CellInputs {
  Tensor x, h, c, w_ih, w_hh, b_ih, b_hh;
};

CellInputs make_inputs(int64_t G, int64_t B, int64_t I, int64_t H, DType dt, uint64_t seed, bool bias = true) {
  auto scaled = [](double s) { return [s](double v) { return v * s; }; };
  CellInputs in;
  in.x = random_tensor({B, I}, dt, Layout::Contiguous, seed);
  in.h = random_tensor({B, H}, dt, Layout::Contiguous, seed + 1, scaled(0.5));
  in.c = random_tensor({B, H}, dt, Layout::Contiguous, seed + 2);
  in.w_ih = random_tensor({G * H, I}, dt, Layout::Contiguous, seed + 3, scaled(0.4));
  in.w_hh = random_tensor({G * H, H}, dt, Layout::Contiguous, seed + 4, scaled(0.3));
  if (bias) {
    in.b_ih = random_tensor({G * H}, dt, Layout::Contiguous, seed + 5, scaled(0.5));
    in.b_hh = random_tensor({G * H}, dt, Layout::Contiguous, seed + 6, scaled(0.5));
  }
  return in;
}

// Row b's projections in float64: p[g H + j] = x_b . w_ih[g H + j] + b_ih (ih) or
// h_b . w_hh + b_hh (hh), and the sums of the terms' magnitudes (for the tolerance).
struct Proj {
  std::vector<double> ih, hh, ih_abs, hh_abs;
};
Proj project(const CellInputs& in, int64_t G, int64_t B, int64_t I, int64_t H) {
  const auto x = values(in.x), h = values(in.h), wi = values(in.w_ih), wh = values(in.w_hh);
  const auto bi = in.b_ih.defined() ? values(in.b_ih) : std::vector<double>(G * H, 0.0);
  const auto bh = in.b_hh.defined() ? values(in.b_hh) : std::vector<double>(G * H, 0.0);
  Proj p{std::vector<double>(B * G * H), std::vector<double>(B * G * H), std::vector<double>(B * G * H),
         std::vector<double>(B * G * H)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < G * H; ++k) {
      double s = bi[k], sa = std::fabs(bi[k]), t = bh[k], ta = std::fabs(bh[k]);
      for (int64_t i = 0; i < I; ++i) s += x[b * I + i] * wi[k * I + i], sa += std::fabs(x[b * I + i] * wi[k * I + i]);
      for (int64_t i = 0; i < H; ++i) t += h[b * H + i] * wh[k * H + i], ta += std::fabs(h[b * H + i] * wh[k * H + i]);
      p.ih[b * G * H + k] = s, p.ih_abs[b * G * H + k] = sa, p.hh[b * G * H + k] = t, p.hh_abs[b * G * H + k] = ta;
    }
  return p;
}

// The tolerance of a state element computed from gates whose sums carry at most `gate_err`
// (gamma_{I+H+2} times the terms' magnitudes, any summation order): sigmoid and tanh are
// 1/4- and 1-Lipschitz, so c = f c_prev + i g moves by at most (|c_prev| / 4 + 1 + 1/4)
// gate_err and h by that plus 1/4 gate_err; then 32 roundings of the pointwise math
// (the vector exp is within 2 ulp, a sigmoid or tanh within 8).
double state_tol(double gate_err, double c_prev, double value, double u) {
  return (std::fabs(c_prev) + 3) * gate_err + 32 * u * (1 + std::fabs(value));
}

class RnnCells : public ::testing::TestWithParam<DType> {};

TEST_P(RnnCells, LstmCellMatchesAFloat64Loop) {
  const DType dt = GetParam();
  const double u = dtype_unit_roundoff(dt);
  for (auto [B, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {3, 17}, {3, 5}, {2, 40}}) {
    const int64_t I = 7;
    const CellInputs in = make_inputs(4, B, I, H, dt, 10 + B + H);
    auto [h1, c1] = lstm_cell(in.x, in.h, in.c, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
    const Proj p = project(in, 4, B, I, H);
    const auto c = values(in.c);
    std::vector<double> hw(B * H), cw(B * H), ht(B * H), ct(B * H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        auto gate = [&](int64_t g) { return p.ih[b * 4 * H + g * H + j] + p.hh[b * 4 * H + g * H + j]; };
        double err = 0;
        for (int64_t g = 0; g < 4; ++g)
          err = std::max(err, gamma_n(I + H + 2, u) * (p.ih_abs[b * 4 * H + g * H + j] + p.hh_abs[b * 4 * H + g * H + j]));
        const double cn = sig(gate(1)) * c[b * H + j] + sig(gate(0)) * std::tanh(gate(2));
        cw[b * H + j] = cn, hw[b * H + j] = sig(gate(3)) * std::tanh(cn);
        ct[b * H + j] = state_tol(err, c[b * H + j], cn, u);
        ht[b * H + j] = state_tol(err, c[b * H + j], hw[b * H + j], u);
      }
    EXPECT_TRUE(all_close_tol(h1, hw, {B, H}, ht)) << "B " << B << " H " << H;
    EXPECT_TRUE(all_close_tol(c1, cw, {B, H}, ct)) << "B " << B << " H " << H;
  }
}

TEST_P(RnnCells, GruCellMatchesAFloat64Loop) {
  const DType dt = GetParam();
  const double u = dtype_unit_roundoff(dt);
  for (auto [B, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {3, 17}, {2, 40}}) {
    const int64_t I = 6;
    const CellInputs in = make_inputs(3, B, I, H, dt, 20 + B + H);
    const Tensor h1 = gru_cell(in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
    const Proj p = project(in, 3, B, I, H);
    const auto h = values(in.h);
    std::vector<double> want(B * H), tol(B * H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        auto at = [&](const std::vector<double>& v, int64_t g) { return v[b * 3 * H + g * H + j]; };
        const double r = sig(at(p.ih, 0) + at(p.hh, 0)), z = sig(at(p.ih, 1) + at(p.hh, 1));
        const double n = std::tanh(at(p.ih, 2) + r * at(p.hh, 2));
        want[b * H + j] = (1 - z) * n + z * h[b * H + j];
        double err = 0;
        for (int64_t g = 0; g < 3; ++g) err = std::max(err, gamma_n(I + H + 2, u) * (at(p.ih_abs, g) + at(p.hh_abs, g)));
        // n's argument also moves by |gh_n| / 4 times r's error.
        tol[b * H + j] = state_tol(err * (2 + std::fabs(at(p.hh, 2))), h[b * H + j], want[b * H + j], u);
      }
    EXPECT_TRUE(all_close_tol(h1, want, {B, H}, tol)) << "B " << B << " H " << H;
  }
}

TEST_P(RnnCells, SimpleCellsMatchAFloat64Loop) {
  const DType dt = GetParam();
  const double u = dtype_unit_roundoff(dt);
  const int64_t B = 3, I = 4, H = 17;
  const CellInputs in = make_inputs(1, B, I, H, dt, 40);
  const Proj p = project(in, 1, B, I, H);
  std::vector<double> wt(B * H), wr(B * H), tol(B * H);
  for (int64_t k = 0; k < B * H; ++k) {
    const double a = p.ih[k] + p.hh[k];
    wt[k] = std::tanh(a), wr[k] = std::max(a, 0.0);
    tol[k] = gamma_n(I + H + 3, u) * (p.ih_abs[k] + p.hh_abs[k]) + 8 * u;
  }
  EXPECT_TRUE(all_close_tol(rnn_tanh_cell(in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh), wt, {B, H}, tol));
  EXPECT_TRUE(all_close_tol(rnn_relu_cell(in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh), wr, {B, H}, tol));
}

// float32 gradients against float64's on the same (float32-representable) inputs: the
// vectorized backward kernels. Each gradient element sums at most G H + B terms of
// products of saved values, each within ~32 u: tolerance 64 u (G H + B) times the float64
// gradient's scale.
TEST(RnnCellGrad, Float32GradientsMatchFloat64) {
  for (const bool lstm : {true, false}) {
    const int64_t B = 3, I = 5, H = 17, G = lstm ? 4 : 3;
    const CellInputs f32 = make_inputs(G, B, I, H, kFloat32, 50);
    std::vector<std::vector<Tensor>> grads;
    for (DType dt : {kFloat32, kFloat64}) {
      std::vector<Tensor> in{f32.x, f32.h, f32.c, f32.w_ih, f32.w_hh, f32.b_ih, f32.b_hh};
      for (Tensor& t : in) {
        t = t.to(dt).detach();
        t.requires_grad_();
      }
      Tensor loss;
      if (lstm) {
        auto [h1, c1] = lstm_cell(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
        loss = add(sum(mul(h1, h1)), sum(c1));
      } else {
        loss = sum(mul(gru_cell(in[0], in[1], in[3], in[4], in[5], in[6]), Scalar(1.5)));
      }
      loss.backward();
      std::vector<Tensor> g;
      for (const Tensor& t : in) g.push_back(t.grad());
      grads.push_back(g);
    }
    for (size_t k = 0; k < grads[0].size(); ++k) {
      if (!lstm && k == 2) continue;  // GRU has no c
      const double scale = max(abs(grads[1][k])).item<double>() + 1;
      EXPECT_TRUE(all_close(grads[0][k], grads[1][k], 0, 64 * 0x1p-24 * (G * H + B) * scale))
          << (lstm ? "lstm" : "gru") << " input " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RnnCells, ::testing::Values(kFloat32, kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(RnnCellGrad, GradcheckOfEveryCell) {
  const int64_t B = 3, I = 4, H = 5;
  for (int64_t G : {4, 3, 1}) {
    const CellInputs in = make_inputs(G, B, I, H, kFloat64, 60 + G);
    std::vector<Tensor> leaves{in.x, in.h, in.c, in.w_ih, in.w_hh, in.b_ih, in.b_hh};
    for (Tensor& t : leaves) t.requires_grad_();
    auto fn = [G](const std::vector<Tensor>& v) {
      if (G == 4) {
        auto [h1, c1] = lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        return cat({h1, c1}, 1);
      }
      if (G == 3) return gru_cell(v[0], v[1], v[3], v[4], v[5], v[6]);
      return cat({rnn_tanh_cell(v[0], v[1], v[3], v[4], v[5], v[6]), rnn_relu_cell(v[0], v[1], v[3], v[4], v[5], v[6])},
                 1);
    };
    std::vector<Tensor> used = leaves;
    if (G != 4) used.erase(used.begin() + 2);
    auto fn_used = [&](const std::vector<Tensor>& v) {
      std::vector<Tensor> all = v;
      if (G != 4) all.insert(all.begin() + 2, in.c);
      return fn(all);
    };
    EXPECT_TRUE(grad_ok(fn_used, used)) << "gates " << G;
  }
}

TEST(RnnCellGrad, GradcheckOfThePointwiseHalvesOnlyHOrOnlyCUsed) {
  const Tensor gates = leaf({3, 20}, 70), c = leaf({3, 5}, 71);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& v) { return lstm_cell_pointwise(v[0], v[1]).first; }, {gates, c}));
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& v) { return lstm_cell_pointwise(v[0], v[1]).second; }, {gates, c}));
  const Tensor gi = leaf({2, 9}, 72), gh = leaf({2, 9}, 73), h = leaf({2, 3}, 74);
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& v) { return gru_cell_pointwise(v[0], v[1], v[2]); }, {gi, gh, h}));
}

TEST(RnnCellGrad, UnbatchedAndBiaslessCells) {
  const CellInputs in = make_inputs(4, 1, 3, 5, kFloat64, 80, false);
  auto [h1, c1] = lstm_cell(in.x.squeeze(0), in.h.squeeze(0), in.c.squeeze(0), in.w_ih, in.w_hh);
  auto [h2, c2] = lstm_cell(in.x, in.h, in.c, in.w_ih, in.w_hh);
  EXPECT_EQ(h1.shape(), (Shape{5}));
  EXPECT_TRUE(all_close(h1, h2.squeeze(0), 0, 0));
  EXPECT_TRUE(all_close(c1, c2.squeeze(0), 0, 0));
}

// One layer over a whole sequence (core/rnn_sequence.h, Note [RNN layer stub]): the
// rnn_layer stub's loop is its cells step by step in either direction, with and without
// biases, with the same gradients: gradcheck covers the reversed backward loop, W_ih's,
// W_hh's and the biases' one-GEMM gradients, and the gradients of h_n and c_n.
using kernels::RnnCell;

int64_t gates_of(RnnCell cell) { return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1; }
const char* cell_name(RnnCell cell) {
  return cell == RnnCell::kLstm ? "lstm" : cell == RnnCell::kGru ? "gru" : cell == RnnCell::kRnnTanh ? "tanh" : "relu";
}

TEST(RnnLayer, GradcheckOfEveryCellInBothDirections) {
  const int64_t T = 4, B = 3, I = 2, H = 5;
  for (const RnnCell cell : {RnnCell::kLstm, RnnCell::kGru, RnnCell::kRnnTanh, RnnCell::kRnnRelu})
    for (const bool reverse : {false, true})
      for (const bool bias : {true, false}) {
        const int64_t G = gates_of(cell);
        const bool lstm = cell == RnnCell::kLstm;
        auto scaled = [](double s) { return [s](double v) { return v * s; }; };
        std::vector<Tensor> in{leaf({T, B, I}, 500), leaf({B, H}, 501, scaled(0.5)), leaf({G * H, I}, 503, scaled(0.4)),
                               leaf({G * H, H}, 504, scaled(0.3))};
        if (lstm) in.push_back(leaf({B, H}, 502));
        if (bias) in.push_back(leaf({G * H}, 505, scaled(0.5))), in.push_back(leaf({G * H}, 506, scaled(0.5)));
        EXPECT_TRUE(grad_ok(
            [&](const std::vector<Tensor>& v) {
              const Tensor c0 = lstm ? v[4] : Tensor();
              const Tensor b_ih = bias ? v[lstm ? 5 : 4] : Tensor(), b_hh = bias ? v[lstm ? 6 : 5] : Tensor();
              const RnnLayerOutput r = rnn_layer(v[0], v[1], c0, v[2], v[3], b_ih, b_hh, cell, reverse);
              std::vector<Tensor> parts{r.y.reshape({-1}), r.h_n.reshape({-1})};
              if (lstm) parts.push_back(r.c_n.reshape({-1}));
              return cat(parts, 0);
            },
            in))
            << cell_name(cell) << " reverse " << reverse << " bias " << bias;
      }
}

// The layer against its cells run step by step (core's lstm_cell, gru_cell, rnn_*_cell),
// in float64: both sum the same products, so they agree to a few ulp.
TEST(RnnLayer, IsItsCellStepByStep) {
  const int64_t T = 5, B = 3, I = 4, H = 6;
  for (const RnnCell cell : {RnnCell::kLstm, RnnCell::kGru, RnnCell::kRnnTanh, RnnCell::kRnnRelu})
    for (const bool reverse : {false, true}) {
      const int64_t G = gates_of(cell);
      const bool lstm = cell == RnnCell::kLstm;
      auto scaled = [](double s) { return [s](double v) { return v * s; }; };
      const Tensor x = random_tensor({T, B, I}, kFloat64, Layout::Contiguous, 510);
      const Tensor h0 = random_tensor({B, H}, kFloat64, Layout::Contiguous, 511, scaled(0.5));
      const Tensor c0 = lstm ? random_tensor({B, H}, kFloat64, Layout::Contiguous, 512) : Tensor();
      const Tensor w_ih = random_tensor({G * H, I}, kFloat64, Layout::Contiguous, 513, scaled(0.4));
      const Tensor w_hh = random_tensor({G * H, H}, kFloat64, Layout::Contiguous, 514, scaled(0.3));
      const Tensor b_ih = random_tensor({G * H}, kFloat64, Layout::Contiguous, 515, scaled(0.5));
      const Tensor b_hh = random_tensor({G * H}, kFloat64, Layout::Contiguous, 516, scaled(0.5));
      const RnnLayerOutput r = rnn_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, cell, reverse);
      Tensor h = h0, c = c0;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = reverse ? T - 1 - i : i;
        const Tensor xt = x.select(0, t);
        if (lstm) std::tie(h, c) = lstm_cell(xt, h, c, w_ih, w_hh, b_ih, b_hh);
        else if (cell == RnnCell::kGru) h = gru_cell(xt, h, w_ih, w_hh, b_ih, b_hh);
        else if (cell == RnnCell::kRnnTanh) h = rnn_tanh_cell(xt, h, w_ih, w_hh, b_ih, b_hh);
        else h = rnn_relu_cell(xt, h, w_ih, w_hh, b_ih, b_hh);
        EXPECT_TRUE(all_close(r.y.select(0, t), values(h), h.shape(), 1e-13, 1e-13))
            << cell_name(cell) << " reverse " << reverse << " step " << t;
      }
      EXPECT_TRUE(all_close(r.h_n, values(h), h.shape(), 1e-13, 1e-13)) << cell_name(cell);
      if (lstm) EXPECT_TRUE(all_close(r.c_n, values(c), c.shape(), 1e-13, 1e-13));
      else EXPECT_FALSE(r.c_n.defined());
    }
}

// Without gradients (inference) the op keeps no reserve and records nothing; its results
// are those of training mode, bit for bit, and a sequence of no steps returns the states.
TEST(RnnLayer, InferenceAndEmptySequences) {
  const Tensor x = random_tensor({3, 2, 4}, kFloat32, Layout::Contiguous, 520);
  const Tensor h0 = random_tensor({2, 5}, kFloat32, Layout::Contiguous, 521);
  const Tensor c0 = random_tensor({2, 5}, kFloat32, Layout::Contiguous, 522);
  Tensor w_ih = random_tensor({20, 4}, kFloat32, Layout::Contiguous, 523);
  const Tensor w_hh = random_tensor({20, 5}, kFloat32, Layout::Contiguous, 524, [](double v) { return 0.3 * v; });
  const RnnLayerOutput plain = rnn_layer(x, h0, c0, w_ih, w_hh, {}, {}, RnnCell::kLstm, false);
  EXPECT_FALSE(plain.y.requires_grad());
  w_ih.requires_grad_();
  const RnnLayerOutput trained = rnn_layer(x, h0, c0, w_ih, w_hh, {}, {}, RnnCell::kLstm, false);
  EXPECT_TRUE(trained.y.requires_grad());
  EXPECT_TRUE(all_close(plain.y, trained.y, 0, 0));
  EXPECT_TRUE(all_close(plain.c_n, trained.c_n, 0, 0));
  const RnnLayerOutput none = rnn_layer(x.narrow(0, 0, 0), h0, c0, w_ih, w_hh, {}, {}, RnnCell::kLstm, true);
  EXPECT_EQ(none.y.shape(), (Shape{0, 2, 5}));
  EXPECT_TRUE(all_close(none.h_n, h0, 0, 0));
}

// The kernels have no derivative of their own: a second derivative is an error naming
// the op (Note [Double backward] in core/autograd_graph.h), not a silent zero.
TEST(RnnLayer, SecondDerivativeIsAnErrorNamingTheOp) {
  const Tensor x = leaf({2, 1, 3}, 530), h0 = leaf({1, 2}, 531), c0 = leaf({1, 2}, 532), w_ih = leaf({8, 3}, 533);
  const Tensor w_hh = leaf({8, 2}, 534);
  const RnnLayerOutput r = rnn_layer(x, h0, c0, w_ih, w_hh, {}, {}, RnnCell::kLstm, false);
  const std::vector<Tensor> g = autograd::grad({sum(mul(r.y, r.y))}, {w_hh}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(contains(error_of([&] { sum(g[0]).backward(); }), "rnn_layer"));
}

TEST(RnnLayer, BadArgumentsNameTheProblem) {
  const Tensor x = zeros({2, 3, 4}), h0 = zeros({3, 5}), c0 = zeros({3, 5});
  EXPECT_TRUE(contains(error_of([&] {
                         rnn_layer(x, h0, c0, zeros({20, 4}), zeros({20, 4}), {}, {}, RnnCell::kLstm, false);
                       }),
                       "rnn_layer: w_hh must be [20, 5]"));
  EXPECT_TRUE(contains(error_of([&] {
                         rnn_layer(x, h0, {}, zeros({15, 3}), zeros({15, 5}), {}, {}, RnnCell::kGru, false);
                       }),
                       "rnn_layer: w_ih must be [15, 4]"));
  EXPECT_TRUE(contains(error_of([&] {
                         rnn_layer(x, h0, {}, zeros({20, 4}), zeros({20, 5}), {}, {}, RnnCell::kLstm, false);
                       }),
                       "rnn_layer: c0"));
  EXPECT_TRUE(contains(error_of([&] {
                         rnn_layer(x, h0, c0, zeros({5, 4}), zeros({5, 5}), {}, {}, RnnCell::kRnnTanh, false);
                       }),
                       "c0 is the LSTM's only"));
  EXPECT_TRUE(contains(error_of([&] {
                         rnn_layer(x, h0, {}, zeros({5, 4}), zeros({5, 5}), zeros({5}), {}, RnnCell::kRnnRelu, false);
                       }),
                       "b_ih and b_hh go together"));
  EXPECT_TRUE(
      contains(error_of([&] {
                 rnn_layer(x, zeros({2, 5}), {}, zeros({5, 4}), zeros({5, 5}), {}, {}, RnnCell::kRnnRelu, false);
               }),
               "h0 must be [3, hidden_size]"));
  EXPECT_TRUE(
      contains(error_of([&] {
                 rnn_layer(x.to(kFloat64), h0, {}, zeros({5, 4}), zeros({5, 5}), {}, {}, RnnCell::kRnnTanh, false);
               }),
               "one dtype"));
}

TEST(RnnCellErrors, BadArgumentsNameTheProblem) {
  const CellInputs in = make_inputs(4, 3, 4, 5, kFloat32, 90);
  EXPECT_TRUE(
      contains(error_of([&] { lstm_cell(in.x, in.h.narrow(1, 0, 4), in.c, in.w_ih, in.w_hh); }), "w_hh must be"));
  EXPECT_TRUE(contains(error_of([&] { gru_cell(in.x, in.h, in.w_ih, in.w_hh); }), "gru_cell: w_hh must be [15, 5]"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell(in.x.narrow(1, 0, 3), in.h, in.c, in.w_ih, in.w_hh); }),
                       "w_ih must be [20, 3]"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell(in.x, in.h, in.c, in.w_ih.to(kFloat64), in.w_hh); }), "one dtype"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell(in.x, in.h, in.c.narrow(0, 0, 2), in.w_ih, in.w_hh); }),
                       "cx [2, 5] must match hx [3, 5]"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell(in.x.narrow(0, 0, 2), in.h, in.c, in.w_ih, in.w_hh); }),
                       "input batch 2 != hx batch 3"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell(in.x, in.h, in.c, in.w_ih, in.w_hh, in.b_ih); }),
                       "b_ih and b_hh go together"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell_pointwise(zeros({3, 18}), zeros({3, 5})); }),
                       "gates must be [B, 4 H]"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell_pointwise(zeros({3, 20}), zeros({3, 6})); }), "c must be [3, 5]"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell_pointwise(zeros({3, 20}, kInt64), zeros({3, 5})); }),
                       "float32 or float64"));
  EXPECT_TRUE(contains(error_of([&] { gru_cell_pointwise(zeros({3, 15}), zeros({3, 12}), zeros({3, 5})); }),
                       "gi and gh must match"));
  EXPECT_TRUE(contains(error_of([&] { lstm_cell_pointwise(zeros({3, 20}), zeros({3, 5}, kFloat64)); }),
                       "c is float64 but the gates are float32"));
}

}  // namespace
}  // namespace ember::test
