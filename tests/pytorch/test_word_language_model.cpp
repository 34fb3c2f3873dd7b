// examples/pytorch/word_language_model against its PyTorch twins: RNNModel
// (word_language_model_rnn_twin.py: a 2-layer LSTM, tied weights, the state carried from
// step to step) and TransformerModel (word_language_model_transformer_twin.py), 3 steps
// each of main.py's clipped SGD by hand.
#include "examples/pytorch/word_language_model/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, WordLanguageModelTransformer) {
  const twin::Twin t = twin::load("word_language_model_transformer");
  const auto& c = t.config;
  const int64_t ntoken = c.at("ntoken");
  auto model = std::make_shared<pt_word_language_model::TransformerModel>(ntoken, c.at("ninp"), c.at("nhead"), c.at("nhid"),
                                                                          c.at("nlayers"), c.at("dropout"));
  t.init_module(*model);
  model->train();
  // Dropout's masks cannot match PyTorch's: the dropout modules and the attention (whose
  // dropout follows its mode) run in eval mode, as in the twin.
  for (const auto& m : model->modules())
    if (std::dynamic_pointer_cast<nn::Dropout>(m) || std::dynamic_pointer_cast<nn::MultiheadAttention>(m)) m->eval();
  nn::NLLLoss criterion;
  const double lr = c.at("lr"), clip = c.at("clip");
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    model->zero_grad();
    Tensor output = (*model)(t.at(s + ".data")).view({-1, ntoken});
    Tensor loss = criterion(output, t.at(s + ".targets"));
    t.check_loss(step, loss);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), clip);
    NoGradGuard no_grad;
    for (const Tensor& p : model->parameters()) p.add_(p.grad() * -lr);
  }
  t.check_final(*model);
}

TEST(PyTorchTwin, WordLanguageModelRnn) {
  const twin::Twin t = twin::load("word_language_model_rnn");
  const auto& c = t.config;
  const int64_t ntoken = c.at("ntoken");
  auto model = std::make_shared<pt_word_language_model::RNNModel>(c.at("model").get<std::string>(), ntoken, c.at("ninp"),
                                                                  c.at("nhid"), c.at("nlayers"), c.at("dropout"), c.at("tied"));
  t.init_module(*model);
  model->train();
  nn::NLLLoss criterion;
  const double lr = c.at("lr"), clip = c.at("clip");
  pt_word_language_model::Hidden hidden = model->init_hidden(c.at("batch_size"));
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    model->zero_grad();
    hidden = {hidden.h.detach(), hidden.c.defined() ? hidden.c.detach() : Tensor()};  // repackage_hidden
    Tensor output;
    std::tie(output, hidden) = (*model)(t.at(s + ".data"), hidden);
    Tensor loss = criterion(output, t.at(s + ".targets"));
    t.check_loss(step, loss);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), clip);
    NoGradGuard no_grad;
    for (const Tensor& p : model->parameters()) p.add_(p.grad() * -lr);
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
