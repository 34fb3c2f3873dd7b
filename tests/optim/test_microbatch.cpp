// Automatic micro-batching (Note [Automatic micro-batching] in optim/microbatch.h): under
// a memory cap that the whole batch does not fit, training takes the same steps as an
// uncapped run; the size it settles on is kept; ranks that disagree retry together; one
// sample that does not fit is an error.
//
// Note [Comparing micro-batched and whole-batch training]: the pieces change only the
// order in which each gradient's 1024 per-sample terms are summed. In float32 that
// rounding (up to 1024 * 2^-24 of the sum of |terms| per element, before cancellation)
// is amplified by 20 steps of training into differences that depend on the GEMM kernel's
// summation order: 1e-6 of the parameters on an AVX-512 CPU, 3.6e-5 on an AVX2 one. So
// the comparisons train in float64, where the same amplification of a unit roundoff
// 2^29 times smaller stays below 1e-12; a real error (a piece dropped or counted twice, a
// wrong scale of the pieces' losses) moves the parameters by far more than the bound of
// 1e-10. Memory caps are sized for float64 (twice the float32 bytes).
//
// The 20-step comparisons use SGD with momentum at lr 0.01. With Adam, each parameter's
// step is m / sqrt(v): a gradient component whose true value is near zero takes a full
// step of either sign from rounding alone, so any change of summation order moves such
// parameters apart by whole steps; that Adam gets the same gradient from pieces is checked
// directly instead.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "ember.h"
#include "optim/batch_size.h"
#include "optim/microbatch.h"

namespace ember {
namespace {

constexpr int64_t kBatch = 1024;
constexpr std::size_t MiB = 1024 * 1024;
// Float64 runs of the same training; Note [Comparing micro-batched and whole-batch training].
constexpr double kSameTraining = 1e-10;

std::shared_ptr<nn::Sequential> make_mlp(DType dtype = kFloat32) {
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(256, 512), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 512),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 10)});
  model->to(dtype);
  return model;
}

struct Trained {
  std::vector<Tensor> params;
  std::vector<optim::MicroBatchResult> steps;
};

// 20 SGD steps in float64 on a fixed random batch, with the host allocator capped `budget`
// bytes above what is reserved when training starts (no cap when unset).
Trained train(std::optional<std::size_t> budget, optim::MicroBatchOptions options = {}) {
  auto model = make_mlp(kFloat64);
  optim::SGD opt(model->parameters(), optim::SGD::Options{.lr = 0.01, .momentum = 0.9});
  optim::MicroBatcher batcher(model->parameters(), default_device(), std::move(options));
  Generator gen(5);
  const Tensor data = randn({kBatch, 256}, kFloat64, &gen), target = randint(0, 10, {kBatch}, kInt64, &gen);
  nn::CrossEntropyLoss ce;
  auto loss = [&](const Tensor& x, const Tensor& y) { return ce((*model)(x), y); };
  memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  // The optimizer's state first (a step on zero gradients leaves the parameters as they
  // are), so that it is part of what the cap is measured from, and lies packed beside the
  // model and the data rather than among a step's freed activations.
  for (const Tensor& p : model->parameters()) p.set_grad(zeros_like(p));
  opt.step();
  for (const Tensor& p : model->parameters()) p.set_grad({});
  host.empty_cache();
  if (budget) host.set_memory_limit(static_cast<std::size_t>(host.stats().reserved_bytes[memory::kAllPools].current) + *budget);
  Trained t;
  // 4 steps on cuda instead of 20 (the first retries, the others keep its size): on the
  // emulated device, where CI runs it, a float64 GEMM takes one emulated thread per output.
  const int steps = default_device().is_cuda() ? 4 : 20;
  for (int s = 0; s < steps; ++s) {
    t.steps.push_back(batcher.backward(data, target, loss));
    opt.step();
  }
  host.set_memory_limit(0);
  for (const Tensor& p : model->parameters()) t.params.push_back(p.detach().clone());
  return t;
}

double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    double scale = 0;
    for (double v : y) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::fabs(x[k] - y[k]) / scale);
  }
  return worst;
}

TEST(MicroBatch, CappedTrainingTakesTheUncappedStepsInPieces) {
  const Trained free = train(std::nullopt);
  EXPECT_EQ(free.steps.back().micro_batch, kBatch);  // fits whole: one piece
  EXPECT_EQ(free.steps.back().pieces, 1);
  // A step of the whole batch needs about 28 MiB beyond the model and its optimizer
  // state; 12 MiB fits about half of it.
  const Trained capped = train(12 * MiB);
  const optim::MicroBatchResult& first = capped.steps[0];
  EXPECT_GT(first.retries, 0);
  EXPECT_LT(first.micro_batch, kBatch);
  EXPECT_GT(first.micro_batch, 1);
  for (size_t s = 1; s < capped.steps.size(); ++s) {
    EXPECT_EQ(capped.steps[s].retries, 0) << "step " << s;  // the size that worked is kept
    EXPECT_EQ(capped.steps[s].micro_batch, first.micro_batch);
  }
  for (size_t s = 0; s < capped.steps.size(); ++s)
    EXPECT_NEAR(capped.steps[s].loss, free.steps[s].loss, kSameTraining * std::fabs(free.steps[s].loss))
        << "step " << s;
  EXPECT_LT(max_relative_difference(capped.params, free.params), kSameTraining);
  std::printf("settled on micro-batches of %lld (batch %lld) after %lld retries\n",
              static_cast<long long>(first.micro_batch), static_cast<long long>(kBatch),
              static_cast<long long>(first.retries));
}

TEST(MicroBatch, ARankThatFitsRetriesWithItsPeers) {
  const Trained free = train(std::nullopt);
  // Another rank ran out and proposed 300 in the first step; this one fit the batch.
  int calls = 0;
  optim::MicroBatchOptions o;
  o.agree = [&](int64_t proposal) { return ++calls == 1 ? std::min<int64_t>(proposal, 300) : proposal; };
  const Trained together = train(std::nullopt, o);
  EXPECT_EQ(together.steps[0].retries, 1);
  EXPECT_EQ(together.steps[0].micro_batch, 300);
  EXPECT_EQ(together.steps[0].pieces, 4);  // 300, 300, 300, 124
  EXPECT_LT(max_relative_difference(together.params, free.params), kSameTraining);
}

TEST(MicroBatch, PiecesGiveTheBatchGradient) {
  auto model = make_mlp(kFloat64);
  Generator gen(5);
  const Tensor x = randn({kBatch, 256}, kFloat64, &gen), y = randint(0, 10, {kBatch}, kInt64, &gen);
  nn::CrossEntropyLoss ce;
  auto loss = [&](const Tensor& a, const Tensor& b) { return ce((*model)(a), b); };
  optim::MicroBatcher whole(model->parameters(), default_device());
  whole.backward(x, y, loss);
  std::vector<Tensor> full;
  for (const Tensor& p : model->parameters()) full.push_back(p.grad().clone());
  int calls = 0;
  optim::MicroBatcher pieces(model->parameters(), default_device(),
                             {.agree = [&](int64_t p) { return ++calls == 1 ? std::min<int64_t>(p, 300) : p; }});
  EXPECT_EQ(pieces.backward(x, y, loss).pieces, 4);
  std::vector<Tensor> got;
  for (const Tensor& p : model->parameters()) got.push_back(p.grad());
  // One backward: each element sums 1024 terms in another order, at most 1024 * 2^-53 of
  // their absolute sum apart; 1e-11 of the largest gradient allows that sum to exceed the
  // largest gradient a hundredfold through cancellation.
  EXPECT_LT(max_relative_difference(got, full), 1e-11);
}

TEST(MicroBatch, OneSampleThatDoesNotFitIsAnError) {
  auto model = make_mlp();
  optim::MicroBatcher batcher(model->parameters(), default_device());
  memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  host.empty_cache();
  host.set_memory_limit(static_cast<std::size_t>(host.stats().reserved_bytes[memory::kAllPools].current));
  const Tensor x = zeros({8, 256}), y = zeros({8}, kInt64);
  nn::CrossEntropyLoss ce;
  EXPECT_THROW(batcher.backward(x, y, [&](const Tensor& a, const Tensor& b) { return ce((*model)(a), b); }),
               OutOfMemoryError);
  host.set_memory_limit(0);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());  // rolled back
}

// The batch-size finder: under a cap, the size it returns fits and one more sample does
// not (as far as its bounded search can tell), and the search leaves nothing behind.
TEST(BatchSize, FindsTheLargestBatchThatFitsAndLeavesNothingBehind) {
  auto model = make_mlp();
  nn::CrossEntropyLoss ce;
  Generator gen(5);
  const Tensor data = randn({kBatch, 256}, kFloat32, &gen), target = randint(0, 10, {kBatch}, kInt64, &gen);
  auto step = [&](int64_t b) { ce((*model)(data.narrow(0, 0, b)), target.narrow(0, 0, b)).backward(); };
  memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  step(kBatch);  // warm up, so what a step leaves (nothing) is what the search leaves
  for (const Tensor& p : model->parameters()) p.set_grad({});
  host.empty_cache();
  const int64_t allocated = host.stats().allocated_bytes[memory::kAllPools].current;
  host.set_memory_limit(static_cast<std::size_t>(host.stats().reserved_bytes[memory::kAllPools].current) + 6 * MiB);
  const optim::BatchSizeSearch found = optim::find_max_batch(step, model->parameters(), default_device(), kBatch);
  EXPECT_GT(found.batch, 1);
  EXPECT_LT(found.batch, kBatch);
  EXPECT_LE(found.trials, 24);
  bool next_failed = false;
  for (const auto& [b, ok] : found.tried) {
    if (b <= found.batch) EXPECT_TRUE(ok) << b;
    if (b == found.batch + 1) next_failed = !ok;
  }
  EXPECT_TRUE(next_failed) << "the search should end between two neighbouring sizes";
  EXPECT_EQ(host.stats().allocated_bytes[memory::kAllPools].current, allocated);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_NO_THROW(step(found.batch));
  host.set_memory_limit(0);
  std::printf("largest batch under the cap: %lld after %d trials\n", static_cast<long long>(found.batch), found.trials);
}

}  // namespace
}  // namespace ember
