// The fused ops on the CPU against the composed ops they replaced (the old forms are
// restated here, as layers/functional.cpp and optim/optimizer.cpp wrote them), forward
// and backward, at the MLP's and CNN's sizes (batch 128): cross entropy of [128, 10],
// layer norm of [128, 512], batch norm of the CNN's first conv output [128, 32, 28, 28],
// an embedding gradient, dropout of [128, 512], and an Adam step over the MLP's six
// parameters (535,818 values). Each pair is `Old/...` and `New/...`.
#include <benchmark/benchmark.h>

#include <vector>

#include "ember.h"

namespace {

using namespace ember;

Tensor randn_f(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, kFloat32, &g);
}

void forward_backward(benchmark::State& state, const std::vector<Tensor>& leaves, const auto& fn) {
  for (auto _ : state) {
    for (const Tensor& t : leaves) t.set_grad({});
    Tensor y = fn();
    sum(y).backward();
    benchmark::DoNotOptimize(leaves[0].grad().data_ptr());
  }
}

void CrossEntropy(benchmark::State& state, bool fused) {
  const Tensor x = randn_f({128, 10}, 1).requires_grad_();
  Generator g(2);
  const Tensor t = randint(0, 10, {128}, kInt64, &g);
  forward_backward(state, {x}, [&] {
    if (fused) return cross_entropy(x, t);
    // nll_loss(log_softmax(x)) as composed before (its target check included).
    return nn::functional::nll_loss(log_softmax(x, 1), t);
  });
}

void LayerNorm(benchmark::State& state, bool fused) {
  const Tensor x = randn_f({128, 512}, 1).requires_grad_();
  const Tensor w = ones({512}).requires_grad_(), b = zeros({512}).requires_grad_();
  forward_backward(state, {x, w, b}, [&] {
    if (fused) return layer_norm(x, 1, w, b);
    return add(mul(mul(sub(x, mean(x, {1}, true)), rsqrt(add(var(x, {1}, 0, true), Scalar(1e-5)))), w), b);
  });
}

void BatchNorm(benchmark::State& state, bool fused) {
  const Tensor x = randn_f({128, 32, 28, 28}, 1).requires_grad_();
  const Tensor w = ones({32}).requires_grad_(), b = zeros({32}).requires_grad_();
  const Tensor rm = zeros({32}), rv = ones({32});
  forward_backward(state, {x, w, b}, [&] {
    if (fused) return batch_norm_training(x, w, b, rm, rv, 0.1, 1e-5);
    const std::vector<int64_t> dims{0, 2, 3};
    const Tensor m = mean(x, dims, true), v = var(x, dims, 0, true);
    {
      NoGradGuard no_grad;
      rm.copy_(add(mul(rm, Scalar(0.9)), mul(m.detach().reshape({32}), Scalar(0.1))));
      rv.copy_(add(mul(rv, Scalar(0.9)), mul(mul(v.detach().reshape({32}), Scalar(100352.0 / 100351)), Scalar(0.1))));
    }
    return add(mul(mul(sub(x, m), rsqrt(add(v, Scalar(1e-5)))), w.reshape({1, 32, 1, 1})), b.reshape({1, 32, 1, 1}));
  });
}

void Embedding(benchmark::State& state, bool fused) {
  const Tensor w = randn_f({1000, 128}, 1).requires_grad_();
  Generator g(2);
  const Tensor idx = randint(0, 1000, {128, 32}, kInt64, &g);
  forward_backward(state, {w}, [&] {
    if (fused) return embedding(idx, w);
    return index_select(w, 0, idx.reshape({-1})).view({128, 32, 128});
  });
}

void Dropout(benchmark::State& state, bool fused) {
  const Tensor x = randn_f({128, 512}, 1).requires_grad_();
  forward_backward(state, {x}, [&] {
    if (fused) return dropout(x, 0.5, true);
    const Tensor keep = ge(rand(x.shape(), x.dtype()), Scalar(0.5)).to(x.dtype());
    return mul(x, mul(keep, Scalar(2.0)));
  });
}

void AdamStep(benchmark::State& state, bool fused) {
  std::vector<Tensor> p, g, m, v;
  for (const Shape& s : {Shape{512, 784}, Shape{512}, Shape{256, 512}, Shape{256}, Shape{10, 256}, Shape{10}}) {
    p.push_back(randn_f(s, p.size()));
    g.push_back(randn_f(s, 100 + p.size()));
    m.push_back(zeros(s));
    v.push_back(zeros(s));
  }
  int64_t step = 0;
  for (auto _ : state) {
    const AdamStepOptions o{.step = ++step};
    if (fused)
      adam_step_(p, g, m, v, o);
    else
      for (size_t i = 0; i < p.size(); ++i) adam_step_(p[i], g[i], m[i], v[i], o);
  }
}

#define EMBER_BENCH_PAIR(name)                                         \
  BENCHMARK_CAPTURE(name, Old, false)->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(name, New, true)->Unit(benchmark::kMicrosecond);
EMBER_BENCH_PAIR(CrossEntropy)
EMBER_BENCH_PAIR(LayerNorm)
EMBER_BENCH_PAIR(BatchNorm)
EMBER_BENCH_PAIR(Embedding)
EMBER_BENCH_PAIR(Dropout)
EMBER_BENCH_PAIR(AdamStep)

}  // namespace
