// The model, data and training loops the DDP tests compare: one process on the whole
// batch against N ranks on its shards.
#pragma once

#include <memory>
#include <vector>

#include "comm/ddp.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/functional.h"
#include "layers/layers.h"
#include "optim/optimizer.h"

namespace ember::comm::testing {

inline std::shared_ptr<nn::Module> make_model(uint64_t seed, DType dt) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(32, 16),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4)});
  m->to(dt);
  return m;
}

// Step s's global batch: [global, 8] inputs and [global, 4] targets, the same for every caller.
inline std::pair<Tensor, Tensor> batch(int step, int64_t global, DType dt) {
  Generator gen(1000 + step);
  return {randn({global, 8}, dt, &gen), randn({global, 4}, dt, &gen)};
}

inline Tensor loss_of(nn::Module& m, const Tensor& x, const Tensor& y) {
  return nn::functional::mse_loss(m.forward(x), y);
}

// Ten SGD steps of one process on the global batch; returns the final parameters.
inline std::vector<Tensor> train_single(int64_t global, DType dt, int steps = 10) {
  auto m = make_model(1, dt);
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, global, dt);
    opt.zero_grad();
    loss_of(*m, x, y).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

// max |a - b| / (atol + rtol * |b|) over all parameters: <= 1 passes.
inline double worst_ratio(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]) / (atol + rtol * std::abs(y[k])));
  }
  return worst;
}

}  // namespace ember::comm::testing
