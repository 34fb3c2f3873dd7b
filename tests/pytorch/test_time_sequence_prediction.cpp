// examples/pytorch/time_sequence_prediction against its PyTorch twin
// (time_sequence_prediction_twin.py): 2 LBFGS steps of train.py's closure (every
// evaluation's loss checked, in order), then a prediction 5 points past the input.
#include "examples/pytorch/time_sequence_prediction/model.h"
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
  int64_t evals = 0;
  for (int i = 0; i < 2; ++i) {
    auto closure = [&] {
      optimizer.zero_grad();
      Tensor out = (*seq)(input);
      Tensor loss = criterion(out, target);
      if (evals < t.steps()) t.check_loss(evals, loss);
      ++evals;
      loss.backward();
      return loss;
    };
    optimizer.step(closure);
  }
  EXPECT_EQ(evals, t.steps()) << "closure evaluations";
  t.check_final(*seq);
  NoGradGuard no_grad;
  const std::vector<double> got = (*seq)(input, t.config.at("future").get<int64_t>()).to_vector<double>();
  const std::vector<double> want = t.st.at("pred").to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(twin::close(got[i], want[i], std::abs(want[i]))) << "pred[" << i << "]: " << got[i] << ", PyTorch's " << want[i];
}

}  // namespace
}  // namespace ember::test
