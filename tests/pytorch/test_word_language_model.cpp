// examples/pytorch/word_language_model against its PyTorch twins: TransformerModel
// (word_language_model_transformer_twin.py) and RNNModel with a tied LSTM
// (word_language_model_rnn_twin.py), 3 steps of main.py's clipped SGD by hand each.
#include "examples/pytorch/word_language_model/model.h"
#include "tests/pytorch/twin_steps.h"

#include <tuple>

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
    Tensor output = model->forward(t.at(s + ".data")).view({-1, ntoken});
    Tensor loss = criterion(output, t.at(s + ".targets"));
    t.check_loss(step, loss);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), clip);
    NoGradGuard no_grad;
    for (const Tensor& p : model->parameters()) p.add_(p.grad() * -lr);
  }
  t.check_final(*model);
}

// The hidden state is carried (detached) from step to step, as main.py's; dropout 0.
TEST(PyTorchTwin, WordLanguageModelRnn) {
  const twin::Twin t = twin::load("word_language_model_rnn");
  const auto& c = t.config;
  const int64_t ntoken = c.at("ntoken");
  auto model = std::make_shared<pt_word_language_model::RNNModel>(c.at("model").get<std::string>(), ntoken, c.at("ninp"), c.at("nhid"),
                                                                   c.at("nlayers"), c.at("dropout"), c.at("tied"));
  t.init_module(*model);
  model->train();
  nn::NLLLoss criterion;
  const double lr = c.at("lr"), clip = c.at("clip");
  auto hidden = model->init_hidden(c.at("batch_size"));
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    model->zero_grad();
    hidden = pt_word_language_model::repackage_hidden(hidden);
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

// Tied, the decoder's weight is the embedding's: listed once, updated once.
TEST(PyTorchTwin, WordLanguageModelRnnTiesOnce) {
  pt_word_language_model::RNNModel model("GRU", 11, 6, 6, 1, 0.0, true);
  EXPECT_EQ(&model.decoder->weight.impl(), &model.encoder->weight.impl());
  EXPECT_EQ(model.parameters().size(), 1u + 4u + 1u);  // encoder.weight, the GRU's four, decoder.bias
  EXPECT_THROW(pt_word_language_model::RNNModel("LSTM", 11, 6, 8, 1, 0.0, true), Error);
  EXPECT_THROW(pt_word_language_model::RNNModel("RNN", 11, 6, 6, 1), Error);
}

}  // namespace
}  // namespace ember::test
