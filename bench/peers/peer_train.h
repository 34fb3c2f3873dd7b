// The Fashion-MNIST examples written against PyTorch's C++ frontend (libtorch), for a
// side-by-side comparison with ember's examples: the same models, initialisation
// scheme (PyTorch's defaults, which ember copies), Adam, batch, epochs and data.
// The images come from ember's IDX reader, so both programs train on the same bytes.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/idx.h"

namespace peers {

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int epochs = 1, batch = 128, threads = 0;
  double lr = 1e-3;
  uint64_t seed = 1;
};

inline Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--data") a.data = v;
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--batch-size") a.batch = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--lr") a.lr = std::stod(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--batch-size N] [--threads N] [--lr X] [--seed S]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return a;
}

// images float [N, 1, 28, 28] in [0, 1], labels int64 [N]
inline std::pair<torch::Tensor, torch::Tensor> load(const std::string& dir, bool train) {
  const std::string p = train ? "train" : "t10k";
  ember::Tensor images = ember::data::read_idx(dir + "/" + p + "-images-idx3-ubyte.gz");
  ember::Tensor labels = ember::data::read_idx(dir + "/" + p + "-labels-idx1-ubyte.gz");
  const int64_t n = images.size(0);
  torch::Tensor x = torch::from_blob(images.data_ptr(), {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat32).div_(255.0);
  torch::Tensor y = torch::from_blob(labels.data_ptr(), {n}, torch::kUInt8).to(torch::kInt64);
  return {x, y};
}

template <class Model>
double evaluate(Model& model, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  model->eval();
  const double acc = model->forward(x).argmax(1).eq(y).to(torch::kFloat64).mean().template item<double>();
  model->train();
  return acc;
}

// Trains `model`, evaluating after each epoch (outside the epoch's clock), and prints
// one JSON line: test_accuracy, epoch_seconds, epoch_test_accuracy, epoch_train_loss.
template <class Model>
int run(const Args& a, Model model) {
  if (a.threads > 0) torch::set_num_threads(a.threads);
  auto [x, y] = load(a.data, true);
  auto [tx, ty] = load(a.data, false);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(a.lr));
  std::string secs = "[", accs = "[", losses = "[";
  const int64_t n = x.size(0);
  double acc = evaluate(model, tx, ty);
  for (int e = 0; e < a.epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor perm = torch::randperm(n, torch::TensorOptions().dtype(torch::kInt64));
    model->train();
    double loss_sum = 0;
    for (int64_t s = 0; s < n; s += a.batch) {
      torch::Tensor idx = perm.narrow(0, s, std::min<int64_t>(a.batch, n - s));
      torch::Tensor logits = model->forward(x.index_select(0, idx));
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y.index_select(0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.template item<double>() * static_cast<double>(idx.size(0));
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    secs += (e ? ", " : "") + std::to_string(t);
    losses += (e ? ", " : "") + std::to_string(loss_sum / static_cast<double>(n));
    acc = evaluate(model, tx, ty);
    accs += (e ? ", " : "") + std::to_string(acc);
  }
  std::printf(
      "{\"test_accuracy\": %.4f, \"epoch_seconds\": %s], \"epoch_test_accuracy\": %s], \"epoch_train_loss\": %s], "
      "\"threads\": %d}\n",
      acc, secs.c_str(), accs.c_str(), losses.c_str(), torch::get_num_threads());
  return 0;
}

}  // namespace peers
