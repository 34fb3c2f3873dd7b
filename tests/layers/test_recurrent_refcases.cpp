// nn::LSTM, GRU, RNN and their cells against PyTorch 1.13 (tests/refcases/recurrent_twin.py
// wrote tests/refcases/recurrent.safetensors): the twin's weights loaded by PyTorch's
// parameter names, the same inputs and states, and its outputs, h_n, c_n and the gradients
// of a weighted sum of them with respect to the input, the states and every parameter.
// All float64: PyTorch's and ember's results differ only by rounding in a different
// order, far below the README's float64 tolerance (atol 1e-10, rtol 1e-8).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>

#include "tests/core/reference.h"

#ifndef EMBER_REFCASES_DIR
#define EMBER_REFCASES_DIR "tests/refcases"
#endif

namespace ember::test {
namespace {

using nlohmann::json;

TEST(RecurrentRefcases, MatchPyTorchValuesAndGradients) {
  const SafetensorsFile st = load_safetensors(std::string(EMBER_REFCASES_DIR) + "/recurrent.safetensors");
  const int64_t n = std::stoll(st.metadata.at("num_cases"));
  ASSERT_EQ(n, 12) << "the file changed; update the count";
  for (int64_t i = 0; i < n; ++i) {
    const json m = json::parse(st.metadata.at("case" + std::to_string(i)));
    const std::string p = "case" + std::to_string(i) + ".", kind = m.at("kind");
    SCOPED_TRACE(::testing::Message() << "case " << i << " " << m.dump());
    auto field = [&](const std::string& f) { return st.at(p + f).to(default_device()); };
    auto has = [&](const std::string& f) { return st.contains(p + f); };
    const int64_t I = m.at("input_size"), H = m.at("hidden_size");
    const nn::RNNOptions o{.num_layers = m.at("num_layers"),
                           .nonlinearity = m.at("nonlinearity") == "relu" ? nn::RNNNonlinearity::kReLU
                                                                          : nn::RNNNonlinearity::kTanh,
                           .bias = m.at("bias"),
                           .batch_first = m.at("batch_first"),
                           .dropout = 0,
                           .bidirectional = m.at("bidirectional")};
    std::shared_ptr<nn::Module> mod;
    if (kind == "LSTM") mod = std::make_shared<nn::LSTM>(I, H, o);
    if (kind == "GRU") mod = std::make_shared<nn::GRU>(I, H, o);
    if (kind == "RNN") mod = std::make_shared<nn::RNN>(I, H, o);
    if (kind == "LSTMCell") mod = std::make_shared<nn::LSTMCell>(I, H, o.bias);
    if (kind == "GRUCell") mod = std::make_shared<nn::GRUCell>(I, H, o.bias);
    if (kind == "RNNCell") mod = std::make_shared<nn::RNNCell>(I, H, o.bias, o.nonlinearity);
    ASSERT_TRUE(mod) << kind;
    mod->to(kFloat64), mod->to(default_device());
    NamedTensors state;
    for (const auto& [name, t] : mod->named_parameters()) state.emplace_back(name, field("param." + name));
    mod->load_state_dict(state);

    Tensor x = field("input"), h0 = has("h0") ? field("h0") : Tensor(), c0 = has("c0") ? field("c0") : Tensor();
    for (Tensor* t : {&x, &h0, &c0})
      if (t->defined()) t->requires_grad_();
    Tensor out, hn, cn;
    if (kind == "LSTM") {
      auto& l = static_cast<nn::LSTM&>(*mod);
      auto r = h0.defined() ? l(x, std::tuple<Tensor, Tensor>{h0, c0}) : l(x);
      out = std::get<0>(r), hn = std::get<0>(std::get<1>(r)), cn = std::get<1>(std::get<1>(r));
    } else if (kind == "GRU") {
      std::tie(out, hn) = static_cast<nn::GRU&>(*mod)(x, h0);
    } else if (kind == "RNN") {
      std::tie(out, hn) = static_cast<nn::RNN&>(*mod)(x, h0);
    } else if (kind == "LSTMCell") {
      std::tie(hn, cn) = static_cast<nn::LSTMCell&>(*mod)(x, std::tuple<Tensor, Tensor>{h0, c0});
    } else if (kind == "GRUCell") {
      hn = static_cast<nn::GRUCell&>(*mod)(x, h0);
    } else {
      hn = static_cast<nn::RNNCell&>(*mod)(x, h0);
    }
    Tensor loss = zeros({}, {kFloat64, default_device()});
    for (const auto& [name, t] : {std::pair<std::string, Tensor>{"output", out}, {"h_n", hn}, {"c_n", cn}}) {
      ASSERT_EQ(t.defined(), has(name)) << name;
      if (!t.defined()) continue;
      EXPECT_TRUE(all_close(t, field(name), 1e-8, 1e-10)) << name;
      loss = add(loss, sum(mul(t, field("weight." + name))));
    }
    loss.backward();
    for (const auto& [name, t] : {std::pair<std::string, Tensor>{"input", x}, {"h0", h0}, {"c0", c0}})
      if (t.defined()) EXPECT_TRUE(all_close(t.grad(), field("grad." + name), 1e-8, 1e-10)) << "grad of " << name;
    for (const auto& [name, t] : mod->named_parameters())
      EXPECT_TRUE(all_close(t.grad(), field("grad." + name), 1e-8, 1e-10)) << "grad of " << name;
  }
}

}  // namespace
}  // namespace ember::test
