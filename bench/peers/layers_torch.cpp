// libtorch's twin of bench/bench_layers.cpp: the Fashion-MNIST CNN's ops at batch 128 and
// DCGAN's generator layers at batch 16, forward (no autograd) and backward (of the op
// alone), median milliseconds of 7 runs of 20 calls each, printed as "op pass ms" lines
// for bench/peers/compare_layers.py.
// Usage: ember_peer_layers_torch THREADS
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

double median_ms(const std::function<void()>& f) {
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) f();
    runs.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(argc > 1 ? std::atoi(argv[1]) : 1);
  torch::manual_seed(7);
  struct Case {
    const char* name;
    std::vector<torch::Tensor> in;
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)> op;
  };
  auto rg = [](std::vector<int64_t> s, bool grad) { return torch::randn(s, torch::requires_grad(grad)); };
  std::vector<Case> cases = {
      {"conv1", {rg({128, 1, 28, 28}, false), rg({32, 1, 3, 3}, true), rg({32}, true)},
       [](const auto& t) { return torch::conv2d(t[0], t[1], t[2], 1, 1); }},
      {"conv2", {rg({128, 32, 14, 14}, true), rg({64, 32, 3, 3}, true), rg({64}, true)},
       [](const auto& t) { return torch::conv2d(t[0], t[1], t[2], 1, 1); }},
      {"relu1", {rg({128, 32, 28, 28}, true)}, [](const auto& t) { return torch::relu(t[0]); }},
      {"pool1", {rg({128, 32, 28, 28}, true)}, [](const auto& t) { return torch::max_pool2d(t[0], 2); }},
      {"fc1", {rg({128, 3136}, true), rg({128, 3136}, true), rg({128}, true)},
       [](const auto& t) { return torch::linear(t[0], t[1], t[2]); }},
      // DCGAN's generator at batch 16 (bench_layers.cpp).
      {"ct1", {rg({16, 100, 1, 1}, false), rg({100, 512, 4, 4}, true), rg({512}, true)},
       [](const auto& t) { return torch::conv_transpose2d(t[0], t[1], t[2]); }},
      {"ct2", {rg({16, 512, 4, 4}, true), rg({512, 256, 4, 4}, true), rg({256}, true)},
       [](const auto& t) { return torch::conv_transpose2d(t[0], t[1], t[2], 2, 1); }},
      {"ct3", {rg({16, 256, 8, 8}, true), rg({256, 128, 4, 4}, true), rg({128}, true)},
       [](const auto& t) { return torch::conv_transpose2d(t[0], t[1], t[2], 2, 1); }},
      {"ct4", {rg({16, 128, 16, 16}, true), rg({128, 64, 4, 4}, true), rg({64}, true)},
       [](const auto& t) { return torch::conv_transpose2d(t[0], t[1], t[2], 2, 1); }},
      {"gn", {rg({16, 256, 16, 16}, true), rg({256}, true), rg({256}, true)},
       [](const auto& t) { return torch::group_norm(t[0], 32, t[1], t[2]); }},
  };
  for (const Case& c : cases) {
    {
      torch::NoGradGuard no_grad;
      std::printf("%s fwd %.3f\n", c.name, median_ms([&] { c.op(c.in); }));
    }
    torch::Tensor y = c.op(c.in);
    torch::Tensor g = torch::randn_like(y);
    std::printf("%s bwd %.3f\n", c.name, median_ms([&] {
                  y.backward(g, /*retain_graph=*/true);
                  for (const auto& t : c.in)
                    if (t.requires_grad()) t.mutable_grad() = torch::Tensor();
                }));
  }
  // Recurrent layers at the examples' shapes (bench/bench_layers.cpp's recurrent cases):
  // fwd without autograd, fwdbwd the forward with autograd and the backward of its output.
  struct Rnn {
    const char* name;
    bool lstm;
    int64_t T, B, I, H, layers;
    double dropout;
    bool batch_first;
  };
  for (const Rnn& r : {Rnn{"lstm_wlm", true, 35, 20, 200, 200, 2, 0.2, false},
                       Rnn{"gru_wlm", false, 35, 20, 200, 200, 2, 0.2, false},
                       Rnn{"lstm_mnist", true, 28, 64, 28, 64, 1, 0, true}}) {
    torch::nn::LSTM lstm(torch::nn::LSTMOptions(r.I, r.H).num_layers(r.layers).dropout(r.dropout).batch_first(
        r.batch_first));
    torch::nn::GRU gru(torch::nn::GRUOptions(r.I, r.H).num_layers(r.layers).dropout(r.dropout).batch_first(
        r.batch_first));
    const torch::Tensor x = torch::randn(r.batch_first ? std::vector<int64_t>{r.B, r.T, r.I}
                                                       : std::vector<int64_t>{r.T, r.B, r.I});
    auto run = [&] { return r.lstm ? std::get<0>(lstm->forward(x)) : std::get<0>(gru->forward(x)); };
    const torch::Tensor g = torch::randn_like(run());
    {
      torch::NoGradGuard no_grad;
      std::printf("%s fwd %.3f\n", r.name, median_ms([&] { run(); }));
    }
    std::printf("%s fwdbwd %.3f\n", r.name, median_ms([&] { run().backward(g); }));
  }
  return 0;
}
