// pytorch/examples' time_sequence_prediction: generate_sine_wave.py's 100 sine waves of
// 1000 points (--waves, --length) (each shifted by a random whole number in [-80, 80), period 2 pi T, T = 20),
// then train.py: LBFGS (lr 0.8) on waves 3..99 with the MSE of the next point, and after
// each step the test loss on waves 0..2 with 1000 points predicted beyond them. The
// original also plots the predictions (matplotlib); this port prints the losses only.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "examples/pytorch/common.h"
#include "examples/pytorch/time_sequence_prediction/model.h"

using ember::Tensor;

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_time_sequence_prediction", [&] {
    CLI::App app{"pytorch/examples' time_sequence_prediction in ember: two LSTMCells learn sine waves with LBFGS"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.lr = 0.8;
    flags.seed = 0;
    int64_t steps = 15, N = 100, L = 1000;
    ember::pt::add_flags(app, flags, /*with_data=*/false);
    app.add_option("--steps", steps, "steps to run")->check(CLI::Range(int64_t{1}, int64_t{1000000}).description(""))->type_name("INT in [1, 1000000]")->capture_default_str();
    app.add_option("--waves", N, "sine waves generated (generate_sine_wave.py's N; the first 3 are the test set)")->check(CLI::Range(int64_t{4}, int64_t{100000}).description(""))->type_name("INT in [4, 100000]")->capture_default_str();
    app.add_option("--length", L, "points per wave (generate_sine_wave.py's L)")->check(CLI::Range(int64_t{2}, int64_t{1000000}).description(""))->type_name("INT in [2, 1000000]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    const int64_t T = 20;
    std::mt19937_64 rng(flags.seed);
    std::uniform_int_distribution<int64_t> shift(-4 * T, 4 * T - 1);
    std::vector<double> wave(static_cast<size_t>(N * L));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t s = shift(rng);
      for (int64_t l = 0; l < L; ++l) wave[static_cast<size_t>(n * L + l)] = std::sin(static_cast<double>(l + s) / 1.0 / T);
    }
    const Tensor data = ember::tensor(wave, {N, L}, ember::TensorOptions(ember::kFloat64, device));
    const Tensor input = data.slice(0, 3, N).slice(1, 0, L - 1);
    const Tensor target = data.slice(0, 3, N).slice(1, 1, L);
    const Tensor test_input = data.slice(0, 0, 3).slice(1, 0, L - 1);
    const Tensor test_target = data.slice(0, 0, 3).slice(1, 1, L);

    auto seq = std::make_shared<pt_time_sequence_prediction::Sequence>();
    seq->to(ember::kFloat64);
    seq->to(device);
    ember::nn::MSELoss criterion;
    // use LBFGS as optimizer since we can load the whole data to train
    ember::optim::LBFGS optimizer(seq->parameters(), {.lr = flags.lr});
    for (int64_t i = 0; i < steps; ++i) {
      std::printf("STEP: %lld\n", static_cast<long long>(i));
      optimizer.step([&] {
        optimizer.zero_grad();
        const Tensor out = (*seq)(input);
        Tensor loss = criterion(out, target);
        std::printf("loss: %.10g\n", loss.item<double>());
        loss.backward();
        return loss;
      });
      // begin to predict, no need to track gradient here
      ember::NoGradGuard no_grad;
      const int64_t future = flags.dry_run ? 10 : 1000;
      const Tensor pred = (*seq)(test_input, future);
      const Tensor loss = criterion(pred.slice(1, 0, pred.size(1) - future), test_target);
      std::printf("test loss: %.10g\n", loss.item<double>());
      if (flags.dry_run) break;
    }
    return 0;
  });
}
