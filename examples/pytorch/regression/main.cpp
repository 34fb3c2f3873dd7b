// libtorch's cpp/regression: draws batches of 32 points until the smooth L1 loss is below
// 1e-3, then prints the learned polynomial beside the target one.
#include <cstdio>
#include <sstream>
#include <string>

#include "examples/pytorch/common.h"
#include "examples/pytorch/regression/model.h"

using ember::Tensor;

static std::string poly_desc(const Tensor& W, const Tensor& b) {
  const auto w = W.to_vector<double>();
  std::ostringstream stream;
  stream << "y = ";
  for (size_t i = 0; i < w.size(); ++i) stream << w[i] << " x^" << w.size() - i << " ";
  stream << "+ " << b.to_vector<double>()[0];
  return stream.str();
}

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_regression", [&] {
    CLI::App app{"libtorch's cpp/regression in ember: fit a degree-4 polynomial with SGD and smooth L1"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.lr = 0.1;
    flags.batch_size = 32;
    ember::pt::add_flags(app, flags, /*with_data=*/false);
    CLI11_PARSE(app, argc, argv);
    ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    using namespace pt_regression;
    const Tensor W_target = ember::randn({kPolyDegree, 1}) * 5;
    const Tensor b_target = ember::randn({1}) * 5;
    auto fc = make_model();
    ember::optim::SGD optim(fc->parameters(), {.lr = flags.lr});
    double loss = 0;
    int64_t batch_idx = 0;
    while (++batch_idx) {
      const Tensor batch_x = make_features(ember::randn({flags.batch_size}));
      const Tensor batch_y = f(batch_x, W_target, b_target);
      optim.zero_grad();
      Tensor output = ember::smooth_l1_loss((*fc)(batch_x), batch_y);
      loss = output.item<double>();
      output.backward();
      optim.step();
      if (loss < 1e-3 || flags.dry_run) break;
    }
    std::printf("Loss: %g after %lld batches\n", loss, static_cast<long long>(batch_idx));
    std::printf("==> Learned function:\t%s\n", poly_desc(fc->weight.view({-1}), fc->bias).c_str());
    std::printf("==> Actual function:\t%s\n", poly_desc(W_target.view({-1}), b_target).c_str());
    return 0;
  });
}
