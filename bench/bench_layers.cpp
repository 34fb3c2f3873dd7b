// The Fashion-MNIST CNN's ops one by one at its training batch (128), forward and
// backward, with what each must do: FLOPs for the convolutions and linear layers, bytes
// for the memory-bound ops. Where a training step's time goes, op by op.
//
// Names: BM_layer/<op>/<pass>, pass fwd (no autograd) or bwd (backward of the op alone,
// gradients of every input that needs one). Cases, batch N = 128:
//   conv1     [N, 1, 28, 28]  * [32, 1, 3, 3] pad 1    2*N*32*784*9     = 58 MFLOP fwd
//   conv2     [N, 32, 14, 14] * [64, 32, 3, 3] pad 1   2*N*64*196*288   = 925 MFLOP fwd; bwd x2
//   relu1     [N, 32, 28, 28]: fwd reads and writes 12.8 MB; bwd reads two, writes one (38.5 MB)
//   pool1     2x2 max pool of [N, 32, 28, 28]: reads 12.8 MB, writes 3.2 MB (+ indices)
//   fc1       [N, 3136] @ [3136, 128]                  2*N*3136*128     = 103 MFLOP fwd
// And DCGAN's generator (issue 30) at batch B = 16: its transposed convolutions, each
// 2*B*Cin*H*W*Cout*16 FLOPs forward (every input pixel meets the 4x4 kernel of every
// output channel), twice that backward (input and weight gradients; ct1's input is the
// noise, no gradient):
//   ct1       [B, 100, 1, 1] -> 512, k4 s1 p0          2*B*100*512*16   = 26 MFLOP fwd
//   ct2..ct4  [B, 512, 4, 4] -> 256, [B, 256, 8, 8] -> 128, [B, 128, 16, 16] -> 64, k4 s2 p1:
//             1.07 GFLOP fwd each
//   gn        GroupNorm(32, 256) of [B, 256, 16, 16]: fwd reads x twice and writes y
//             (12.6 MB), bwd reads dy and x twice and writes dx (21 MB)
// The counters give FLOP/s or bytes/s of that minimum work, to set beside the machine's
// peak (README) and the same ops in libtorch (bench/peers).
//
// Recurrent layers at the PyTorch examples' shapes, BM_layer/<case>/fwd (no autograd) and
// /fwdbwd (forward with autograd, then backward of the output): the FLOPs are the GEMMs'
// (2 T B G H (I + H) per layer and direction forward, twice that backward):
//   lstm_wlm   LSTM(200, 200, num_layers=2, dropout=0.2), [35, 20, 200]  (word_language_model)
//   gru_wlm    GRU(200, 200, num_layers=2, dropout=0.2), [35, 20, 200]
//   lstm_mnist LSTM(28, 64, batch_first), [64, 28, 28]                   (mnist_rnn)
#include <benchmark/benchmark.h>

#include <functional>
#include <string>

#include "ember.h"

namespace {

using ember::Tensor;
constexpr int64_t N = 128;
constexpr int64_t B = 16;

struct LayerCase {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> op;  // the op on its inputs
  std::vector<ember::Shape> inputs;
  std::vector<bool> needs_grad;  // per input, in the backward pass
  double fwd_flops, bwd_flops;   // 0: memory-bound, bytes below instead
  double fwd_bytes, bwd_bytes;
};

std::vector<LayerCase> cases() {
  using ember::Pool2dOptions;
  const double f = 4;  // bytes per float
  return {
      {"conv1", [](const std::vector<Tensor>& t) { return ember::conv2d(t[0], t[1], t[2], {1, 1}, {1, 1}); },
       {{N, 1, 28, 28}, {32, 1, 3, 3}, {32}}, {false, true, true}, 2.0 * N * 32 * 784 * 9,
       2.0 * N * 32 * 784 * 9, 0, 0},
      {"conv2", [](const std::vector<Tensor>& t) { return ember::conv2d(t[0], t[1], t[2], {1, 1}, {1, 1}); },
       {{N, 32, 14, 14}, {64, 32, 3, 3}, {64}}, {true, true, true}, 2.0 * N * 64 * 196 * 288,
       4.0 * N * 64 * 196 * 288, 0, 0},
      {"relu1", [](const std::vector<Tensor>& t) { return ember::relu(t[0]); }, {{N, 32, 28, 28}}, {true}, 0, 0,
       2 * f * N * 32 * 784, 3 * f * N * 32 * 784},
      {"pool1",
       [](const std::vector<Tensor>& t) { return ember::max_pool2d(t[0], Pool2dOptions{.kernel_size = {2, 2}}); },
       {{N, 32, 28, 28}}, {true}, 0, 0, f * N * 32 * (784 + 196), f * N * 32 * (784 + 196)},
      {"fc1", [](const std::vector<Tensor>& t) { return ember::linear(t[0], t[1], t[2]); },
       {{N, 3136}, {128, 3136}, {128}}, {true, true, true}, 2.0 * N * 3136 * 128, 4.0 * N * 3136 * 128, 0, 0},
      {"ct1",
       [](const std::vector<Tensor>& t) { return ember::conv_transpose2d(t[0], t[1], t[2]); },
       {{B, 100, 1, 1}, {100, 512, 4, 4}, {512}}, {false, true, true}, 2.0 * B * 100 * 512 * 16,
       2.0 * B * 100 * 512 * 16, 0, 0},
      {"ct2", [](const std::vector<Tensor>& t) { return ember::conv_transpose2d(t[0], t[1], t[2], {2, 2}, {1, 1}); },
       {{B, 512, 4, 4}, {512, 256, 4, 4}, {256}}, {true, true, true}, 2.0 * B * 512 * 16 * 256 * 16,
       4.0 * B * 512 * 16 * 256 * 16, 0, 0},
      {"ct3", [](const std::vector<Tensor>& t) { return ember::conv_transpose2d(t[0], t[1], t[2], {2, 2}, {1, 1}); },
       {{B, 256, 8, 8}, {256, 128, 4, 4}, {128}}, {true, true, true}, 2.0 * B * 256 * 64 * 128 * 16,
       4.0 * B * 256 * 64 * 128 * 16, 0, 0},
      {"ct4", [](const std::vector<Tensor>& t) { return ember::conv_transpose2d(t[0], t[1], t[2], {2, 2}, {1, 1}); },
       {{B, 128, 16, 16}, {128, 64, 4, 4}, {64}}, {true, true, true}, 2.0 * B * 128 * 256 * 64 * 16,
       4.0 * B * 128 * 256 * 64 * 16, 0, 0},
      {"gn", [](const std::vector<Tensor>& t) { return ember::group_norm(t[0], 32, t[1], t[2]); },
       {{B, 256, 16, 16}, {256}, {256}}, {true, true, true}, 0, 0, 3 * f * B * 256 * 256, 5 * f * B * 256 * 256},
  };
}

std::vector<Tensor> make_inputs(const LayerCase& c, bool grad) {
  ember::Generator gen(7);
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor t = ember::randn(c.inputs[i], ember::kFloat32, &gen);
    if (grad && c.needs_grad[i]) t.requires_grad_();
    in.push_back(t);
  }
  return in;
}

void set_rates(benchmark::State& state, double flops, double bytes) {
  if (flops > 0)
    state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
  if (bytes > 0)
    state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1000);
  state.counters["threads"] = ember::get_num_threads();
}

void bm_forward(benchmark::State& state, const LayerCase& c) {
  std::vector<Tensor> in = make_inputs(c, false);
  ember::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = c.op(in);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_rates(state, c.fwd_flops, c.fwd_bytes);
}

void bm_backward(benchmark::State& state, const LayerCase& c) {
  std::vector<Tensor> in = make_inputs(c, true);
  Tensor y = c.op(in);
  Tensor g = ember::randn(y.shape());
  for (auto _ : state) {
    y.backward(g, /*retain_graph=*/true);
    for (size_t i = 0; i < in.size(); ++i)
      if (c.needs_grad[i]) in[i].set_grad({});  // each iteration computes fresh gradients
  }
  set_rates(state, c.bwd_flops, c.bwd_bytes);
}

struct RecurrentCase {
  std::string name;
  bool lstm;
  int64_t T, B, I, H, layers;
  double dropout;
  bool batch_first;
  double flops() const {  // forward GEMMs
    const double G = lstm ? 4 : 3;
    return 2.0 * T * B * G * H * (I + H) + (layers - 1) * 2.0 * T * B * G * H * (2 * H);
  }
};

void bm_recurrent(benchmark::State& state, const RecurrentCase& c, bool backward) {
  const ember::nn::RNNOptions o{.num_layers = c.layers, .batch_first = c.batch_first, .dropout = c.dropout};
  ember::Generator gen(7);
  std::shared_ptr<ember::nn::LSTM> lstm = c.lstm ? std::make_shared<ember::nn::LSTM>(c.I, c.H, o) : nullptr;
  std::shared_ptr<ember::nn::GRU> gru = c.lstm ? nullptr : std::make_shared<ember::nn::GRU>(c.I, c.H, o);
  const Tensor x = ember::randn(c.batch_first ? ember::Shape{c.B, c.T, c.I} : ember::Shape{c.T, c.B, c.I},
                                ember::kFloat32, &gen);
  auto run = [&] { return c.lstm ? std::get<0>((*lstm)(x)) : std::get<0>((*gru)(x)); };
  const Tensor g = ember::randn(run().shape(), ember::kFloat32, &gen);
  for (auto _ : state) {
    if (backward) {
      run().backward(g);
    } else {
      ember::NoGradGuard no_grad;
      Tensor y = run();
      benchmark::DoNotOptimize(y.data_ptr());
    }
  }
  set_rates(state, backward ? 3 * c.flops() : c.flops(), 0);
}

[[maybe_unused]] const bool registered_recurrent = [] {
  static const std::vector<RecurrentCase> all = {
      {"lstm_wlm", true, 35, 20, 200, 200, 2, 0.2, false},
      {"gru_wlm", false, 35, 20, 200, 200, 2, 0.2, false},
      {"lstm_mnist", true, 28, 64, 28, 64, 1, 0, true},
  };
  for (const RecurrentCase& c : all)
    for (const bool bwd : {false, true})
      benchmark::RegisterBenchmark(("BM_layer/" + c.name + (bwd ? "/fwdbwd" : "/fwd")).c_str(),
                                   [&c, bwd](benchmark::State& s) { bm_recurrent(s, c, bwd); })
          ->UseRealTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
  return true;
}();

[[maybe_unused]] const bool registered = [] {
  static const std::vector<LayerCase> all = cases();
  for (const LayerCase& c : all) {
    for (const char* pass : {"fwd", "bwd"}) {
      const bool fwd = std::string(pass) == "fwd";
      benchmark::RegisterBenchmark(("BM_layer/" + c.name + "/" + pass).c_str(),
                                   [&c, fwd](benchmark::State& s) { fwd ? bm_forward(s, c) : bm_backward(s, c); })
          ->UseRealTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
