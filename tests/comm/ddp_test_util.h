// The models, data and training loops the DDP tests compare: one process on the whole
// batch against N ranks on its shards. Three models: an MLP, a CNN without batch norm
// (conv -> relu -> max pool -> linear on 6x6 single-channel images), and a wide MLP
// (8 -> 1024 -> 4) whose activations, not its parameters, fill memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/ddp.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/functional.h"
#include "layers/layers.h"
#include "optim/optimizer.h"

namespace ember::comm::testing {

enum class ModelKind { kMlp, kCnn, kWide };

inline std::string to_string(ModelKind k) {
  return k == ModelKind::kMlp ? "Mlp" : k == ModelKind::kCnn ? "Cnn" : "Wide";
}

inline std::shared_ptr<nn::Module> make_model(uint64_t seed, DType dt, ModelKind kind = ModelKind::kMlp) {
  manual_seed(seed);
  using Modules = std::initializer_list<std::shared_ptr<nn::Module>>;
  std::shared_ptr<nn::Module> m;
  if (kind == ModelKind::kMlp) {
    m = std::make_shared<nn::Sequential>(Modules{std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::Tanh>(),
                                                 std::make_shared<nn::Linear>(32, 16), std::make_shared<nn::Tanh>(),
                                                 std::make_shared<nn::Linear>(16, 4)});
  } else if (kind == ModelKind::kWide) {
    m = std::make_shared<nn::Sequential>(Modules{std::make_shared<nn::Linear>(8, 1024), std::make_shared<nn::Tanh>(),
                                                 std::make_shared<nn::Linear>(1024, 4)});
  } else {  // [B, 1, 6, 6] -> conv 3x3 pad 1 -> [B, 3, 6, 6] -> relu, pool 2 -> [B, 3, 3, 3] -> [B, 27] -> [B, 4]
    m = std::make_shared<nn::Sequential>(Modules{
        std::make_shared<nn::Conv2d>(1, 3, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(27, 4)});
  }
  m->to(dt);
  return m;
}

// Step s's global batch: inputs ([global, 8] for the MLPs, [global, 1, 6, 6] for the CNN)
// and [global, 4] targets, the same for every caller.
inline std::pair<Tensor, Tensor> batch(int step, int64_t global, DType dt, ModelKind kind = ModelKind::kMlp) {
  Generator gen(1000 + step);
  Tensor x = kind == ModelKind::kCnn ? randn({global, 1, 6, 6}, dt, &gen) : randn({global, 8}, dt, &gen);
  return {x, randn({global, 4}, dt, &gen)};
}

inline Tensor loss_of(nn::Module& m, const Tensor& x, const Tensor& y) {
  return nn::functional::mse_loss(m(x), y);
}

// Ten SGD steps of one process on the global batch; returns the final parameters.
inline std::vector<Tensor> train_single(int64_t global, DType dt, int steps = 10, ModelKind kind = ModelKind::kMlp) {
  auto m = make_model(1, dt, kind);
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, global, dt, kind);
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
