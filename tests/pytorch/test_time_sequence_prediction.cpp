// examples/pytorch/time_sequence_prediction against its PyTorch twin
// (time_sequence_prediction_twin.py): an LBFGS step (20 iterations, every closure's loss
// checked), then a prediction 5 points beyond the input.
#include "examples/pytorch/time_sequence_prediction/model.h"
#include "tests/core/reference.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, TimeSequencePrediction) {
  const twin::Twin t = twin::load("time_sequence_prediction");
  auto seq = std::make_shared<pt_time_sequence_prediction::Sequence>();
  t.init_module(*seq);
  const Tensor input = t.at("input"), target = t.at("target");
  nn::MSELoss criterion;
  optim::LBFGS optimizer(seq->parameters(), {.lr = t.config.at("lr").get<double>()});
  int64_t evaluation = 0;
  for (int i = 0; i < 1; ++i) {
    optimizer.step([&] {
      optimizer.zero_grad();
      Tensor loss = criterion((*seq)(input), target);
      if (evaluation < t.steps()) t.check_loss(evaluation, loss);
      ++evaluation;
      loss.backward();
      return loss;
    });
  }
  EXPECT_EQ(evaluation, t.steps()) << "closure evaluations";
  t.check_final(*seq);
  NoGradGuard no_grad;
  const Tensor pred = (*seq)(input, t.config.at("future").get<int64_t>());
  EXPECT_TRUE(all_close(pred, t.at("pred"), twin::kRtol, twin::kAtol));
}

}  // namespace
}  // namespace ember::test
