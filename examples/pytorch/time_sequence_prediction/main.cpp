// pytorch/examples' time_sequence_prediction: generate_sine_wave.py's 100 sine waves of
// 1000 points (sin(x / T), T = 20, each shifted by an integer in [-4T, 4T): the shifts drawn
// by ember's generator, seeded by --seed, where the original's come from numpy's seed 2),
// then train.py: Sequence trained on waves 3..99 with LBFGS (lr 0.8) and MSELoss, each step
// followed by a prediction of 1000 points past waves 0..2 and its test loss. --epochs is the
// original's --steps (each step one LBFGS step(closure), up to 20 evaluations of the whole
// training set). The original also plots each prediction to predict<i>.pdf; here
// --save-pred writes the last one as CSV.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "examples/pytorch/common.h"
#include "examples/pytorch/time_sequence_prediction/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_time_sequence_prediction", [&] {
    CLI::App app{"pytorch/examples' time_sequence_prediction in ember: two LSTMCells learn sine waves, with LBFGS"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 15;
    flags.lr = 0.8;
    flags.seed = 0;
    std::string save_pred;
    ember::pt::add_flags(app, flags, /*with_data=*/false);
    app.add_option("--save-pred", save_pred, "write the last prediction [3, 999 + 1000] to this CSV file");
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);

    // generate_sine_wave.py
    const int64_t T = 20, L = 1000, N = 100;
    const Tensor shift = ember::randint(-4 * T, 4 * T, {N, 1}, ember::kInt64).to(ember::kFloat64);
    const Tensor x = ember::arange(0, static_cast<double>(L), 1, ember::kFloat64).unsqueeze(0) + shift;
    const Tensor data = ember::sin(x / static_cast<double>(T)).to(device);

    const Tensor input = data.slice(0, 3, N).slice(1, 0, L - 1);
    const Tensor target = data.slice(0, 3, N).slice(1, 1, L);
    const Tensor test_input = data.slice(0, 0, 3).slice(1, 0, L - 1);
    const Tensor test_target = data.slice(0, 0, 3).slice(1, 1, L);
    // build the model
    auto seq = std::make_shared<pt_time_sequence_prediction::Sequence>();
    seq->to(device);
    seq->to(ember::kFloat64);
    ember::nn::MSELoss criterion;
    // use LBFGS as optimizer since we can load the whole data to train
    ember::optim::LBFGS optimizer(seq->parameters(), {.lr = flags.lr});
    // begin to train
    for (int64_t i = 0; i < flags.epochs; ++i) {
      std::printf("STEP:  %lld\n", static_cast<long long>(i));
      auto closure = [&] {
        optimizer.zero_grad();
        Tensor out = (*seq)(input);
        Tensor loss = criterion(out, target);
        std::printf("loss: %.17g\n", loss.item<double>());
        loss.backward();
        return loss;
      };
      optimizer.step(closure);
      // begin to predict, no need to track gradient here
      {
        ember::NoGradGuard no_grad;
        const int64_t future = 1000;
        const Tensor pred = (*seq)(test_input, future);
        const Tensor loss = criterion(pred.slice(1, 0, pred.size(1) - future), test_target);
        std::printf("test loss: %.17g\n", loss.item<double>());
        if (!save_pred.empty() && (i + 1 == flags.epochs || flags.dry_run)) {
          std::ofstream out(save_pred);
          EMBER_CHECK(out, "time_sequence_prediction: cannot write ", save_pred);
          const std::vector<double> y = pred.to(ember::Device::cpu()).to_vector<double>();
          const int64_t n = pred.size(1);
          for (int64_t r = 0; r < pred.size(0); ++r)
            for (int64_t c = 0; c < n; ++c) out << y[static_cast<size_t>(r * n + c)] << (c + 1 < n ? ',' : '\n');
        }
      }
      if (flags.dry_run) break;
    }
    return 0;
  });
}
