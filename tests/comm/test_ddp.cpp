// DistributedDataParallel: N ranks (threads) with batch b end 10 SGD steps with the
// parameters of one process with batch N·b, for the MLP and the CNN without batch norm
// (tests/comm/ddp_test_util.h), also with no_sync accumulation and with the MicroBatcher;
// bf16 compression; bucket assignment and overlap; the errors.
//
// Tolerance: in float64 the only difference is the order of the sums (each rank sums its
// shard's gradient, the all-reduce adds the ranks' partial sums, then divides by N; one
// process sums the whole batch, then divides by the batch). Each gradient element is a
// sum of at most a few hundred terms (the MLP's: one per sample, at most 12; the CNN's
// convolution weights: one per sample and output position, at most 12 · 36 = 432), so
// the reordering changes it by about n · 2^-53 · sum|terms| ~ 1e-13 relative at worst;
// ten momentum-SGD steps of lr 0.1 add up a few such errors per parameter. 1e-10
// relative (plus 1e-12 absolute) leaves three orders of magnitude of room (measured: the
// worst parameter uses 1.2e-4 of the bound, the CNN at world size 2; the MLP 3e-5), and
// any real mistake (a missing division by N, a bucket reduced twice or not at all, a
// wrong shard) moves parameters by 1e-3 or more.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

#include "base/error.h"
#include "comm/ddp.h"
#include "comm/rendezvous.h"
#include "optim/microbatch.h"
#include "tests/comm/process_util.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/ddp_test_util.h"

namespace ember::comm {
namespace {

using namespace testing;
constexpr int64_t kShard = 4;  // samples per rank and step
constexpr double kAtol = 1e-12, kRtol = 1e-10;

enum class Mode { kPlain, kNoSync, kMicroBatcher, kBf16 };

// Ten steps of rank pg.rank() with `model` (any initial values: DDP broadcasts rank 0's).
// die_at >= 0: rank 1 exits abruptly at that step (a crashed rank).
void train_rank(ProcessGroup& pg, const std::shared_ptr<nn::Module>& model, Mode mode, DType dt, int die_at = -1,
                ModelKind kind = ModelKind::kMlp) {
  const int r = pg.rank(), world = pg.size();
  auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
  DdpOptions o{.bucket_cap_bytes = 1024, .first_bucket_bytes = 256};  // several buckets for this small model
  if (mode == Mode::kBf16) o.comm_hook = bf16_compress_hook;
  DistributedDataParallel ddp(model, pgp, o);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 10; ++s) {
    if (r == 1 && s == die_at) std::_Exit(9);
    auto [x, y] = batch(s, kShard * world, dt, kind);
    Tensor xs = x.narrow(0, r * kShard, kShard), ys = y.narrow(0, r * kShard, kShard);
    opt.zero_grad();
    if (mode == Mode::kNoSync) {  // two halves: the first accumulates locally
      {
        auto guard = ddp.no_sync();
        (loss_of(*model, xs.narrow(0, 0, 2), ys.narrow(0, 0, 2)) * 0.5).backward();
      }
      (loss_of(ddp.module(), xs.narrow(0, 2, 2), ys.narrow(0, 2, 2)) * 0.5).backward();
    } else if (mode == Mode::kMicroBatcher) {
      optim::MicroBatcher mb(model->parameters(), Device::cpu(), {.agree = min_over_ranks(pgp)});
      {
        auto guard = ddp.no_sync();
        mb.backward(xs, ys, [&](const Tensor& a, const Tensor& b) { return loss_of(*model, a, b); });
      }
      ddp.sync_gradients();
    } else {
      loss_of(ddp.module(), xs, ys).backward();
    }
    ddp.synchronize();
    opt.step();
  }
}

// Ten steps on `world` ranks (threads); returns rank 0's final parameters.
std::vector<Tensor> train_ddp(int world, Mode mode, DType dt = kFloat64, ModelKind kind = ModelKind::kMlp) {
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < world; ++r)
    models.push_back(make_model(r == 0 ? 1 : 100 + r, dt, kind));  // broadcast fixes ranks > 0
  run_ranks(world, [&](ProcessGroup& pg) { train_rank(pg, models[pg.rank()], mode, dt, -1, kind); });
  std::vector<Tensor> result;
  for (const Tensor& p : models[0]->parameters()) result.push_back(p.detach().clone());
  return result;
}

// (model, world size)
class DdpEquivalence : public ::testing::TestWithParam<std::tuple<ModelKind, int>> {
 protected:
  ModelKind kind() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  std::vector<Tensor> single(int steps = 10) const { return train_single(kShard * world(), kFloat64, steps, kind()); }
  double worst(Mode mode) const {
    return worst_ratio(train_ddp(world(), mode, kFloat64, kind()), single(), kAtol, kRtol);
  }
};

TEST_P(DdpEquivalence, SameParametersAsOneProcessOnTheWholeBatch) {
  EXPECT_LE(worst(Mode::kPlain), 1.0) << "worst |ddp - single| / (atol + rtol |single|)";
  // A distinct run changes them: the comparison has teeth.
  EXPECT_GT(worst_ratio(single(9), single(), kAtol, kRtol), 1e3);
}

TEST_P(DdpEquivalence, NoSyncAccumulation) { EXPECT_LE(worst(Mode::kNoSync), 1.0); }

TEST_P(DdpEquivalence, WithTheMicroBatcher) { EXPECT_LE(worst(Mode::kMicroBatcher), 1.0); }

INSTANTIATE_TEST_SUITE_P(ModelAndWorldSize, DdpEquivalence,
                         ::testing::Combine(::testing::Values(ModelKind::kMlp, ModelKind::kCnn),
                                            ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return to_string(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param));
                         });

// bf16 keeps 8 bits of mantissa: each averaged gradient is off by up to 2^-8 relative,
// so after ten steps the parameters agree to about 1e-2, not to 1e-10.
TEST(Ddp, Bf16CompressionIsClose) {
  const auto single = train_single(kShard * 2, kFloat32);
  EXPECT_LE(worst_ratio(train_ddp(2, Mode::kBf16, kFloat32), single, 1e-2, 2e-2), 1.0);
}

TEST(Ddp, BucketsReverseOrderCapsAndDtypes) {
  std::vector<Tensor> ps = {zeros({100}), zeros({100}), zeros({300}), zeros({10}, kFloat64), zeros({50})};
  // float32 bytes: 400, 400, 1200, _, 200. First bucket closes at >= 500 bytes, then >= 1000.
  auto b = assign_buckets(ps, 500, 1000);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{4, 2}));  // 200 + 1200 >= 500
  EXPECT_EQ(b[1], (std::vector<size_t>{3}));     // float64: its own bucket
  EXPECT_EQ(b[2], (std::vector<size_t>{1, 0}));
  EXPECT_THROW(assign_buckets(ps, 0, 10), Error);
}

TEST(Ddp, AllReducesStartBeforeBackwardEnds) {
  auto models = std::vector{make_model(1, kFloat32), make_model(2, kFloat32)};
  run_ranks(2, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    DistributedDataParallel ddp(models[pg.rank()], pgp, {.bucket_cap_bytes = 1024, .first_bucket_bytes = 256});
    ASSERT_GE(ddp.buckets().size(), 3u);
    auto [x, y] = batch(0, 4, kFloat32);
    loss_of(ddp.module(), x, y).backward();
    const auto log = ddp.launch_log();
    ASSERT_EQ(log.size(), ddp.buckets().size());
    const int64_t params = static_cast<int64_t>(models[pg.rank()]->parameters().size());
    EXPECT_LT(log[0], params) << "the first bucket waited for the whole backward";
    for (size_t i = 1; i < log.size(); ++i) EXPECT_LE(log[i - 1], log[i]);
  });
}

TEST(Ddp, DifferentModelsAreNamed) {
  std::vector<std::shared_ptr<nn::Module>> models = {
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Linear>(4, 5)};
  std::vector<std::string> errors(2);
  run_ranks(2, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    try {
      DistributedDataParallel ddp(models[pg.rank()], pgp);
    } catch (const Error& e) {
      errors[pg.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("parameter 'weight' is [3, 4] float32 on rank 0 but [5, 4] float32 on rank 1"),
              std::string::npos)
        << e;
  }
}

// fc2 takes no part in the loss.
class TwoHeads : public nn::Callable<TwoHeads> {
 public:
  TwoHeads() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 2));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) { return fc1->forward(x); }
  std::string name() const override { return "TwoHeads"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

TEST(Ddp, UnusedParameterIsNamedOrHandled) {
  auto models = std::vector<std::shared_ptr<nn::Module>>{std::make_shared<TwoHeads>(), std::make_shared<TwoHeads>()};
  run_ranks(2, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    {
      DistributedDataParallel ddp(models[pg.rank()], pgp, {.first_bucket_bytes = 16});
      sum(ddp(ones({1, 3}))).backward();
      try {
        ddp.synchronize();
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'fc2.weight'"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("'fc1.weight'"), std::string::npos) << e.what();
      }
    }
    for (const Tensor& p : models[pg.rank()]->parameters()) p.set_grad({});
    DistributedDataParallel ddp(models[pg.rank()], pgp, {.first_bucket_bytes = 16, .find_unused_parameters = true});
    for (int it = 0; it < 2; ++it) {
      sum(ddp(full({1, 3}, pg.rank() + 1.0))).backward();  // done when backward returns
      auto* m = static_cast<TwoHeads*>(models[pg.rank()].get());
      EXPECT_EQ(sum(abs(m->fc2->parameters()[0].grad())).item<double>(), 0.0);
      EXPECT_NEAR(m->fc1->parameters()[0].grad().to_vector<double>()[0], 1.5, 1e-6);  // mean of 1 and 2
      for (const Tensor& p : models[pg.rank()]->parameters()) p.set_grad({});
    }
  });
}

// Worker: one rank of a real two-process job; rank 0 checks the result.
TEST(DdpProcesses, Worker) {
  if (!is_worker()) GTEST_SKIP() << "runs as a child of DdpProcesses.TwoProcessesOverTcpStore";
  auto pg = init_process_group_from_env();
  auto model = make_model(pg->rank() == 0 ? 1 : 7, kFloat64);
  train_rank(*pg, model, Mode::kPlain, kFloat64);
  if (pg->rank() == 0) {
    std::vector<Tensor> got;
    for (const Tensor& p : model->parameters()) got.push_back(p.detach().clone());
    EXPECT_LE(worst_ratio(got, train_single(kShard * pg->size(), kFloat64), kAtol, kRtol), 1.0);
  }
  pg->barrier()->wait();
}

// Worker: rank 1 dies at step 3; rank 0 must fail with an error naming the collective.
TEST(DdpProcesses, WorkerPeerDies) {
  if (!is_worker()) GTEST_SKIP() << "runs as a child of DdpProcesses.ARankDyingFailsTheOthers";
  auto pg = init_process_group_from_env();
  try {
    train_rank(*pg, make_model(1, kFloat64), Mode::kPlain, kFloat64, 3);
  } catch (const Error& e) {
    std::printf("rank %d: %s\n", pg->rank(), e.what());
    std::fflush(stdout);
    std::_Exit(std::string(e.what()).find("all_reduce (avg) of") != std::string::npos ? 3 : 4);
  }
  std::_Exit(5);  // rank 0 finished training without its peer
}

TEST(DdpProcesses, ARankDyingFailsTheOthers) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn_self("DdpProcesses.WorkerPeerDies", {"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                                              "MASTER_PORT=" + std::to_string(port),
                                                              "EMBER_COMM_TIMEOUT_S=5"}));
  EXPECT_EQ(wait_all(pids), (std::vector<int>{3, 9}));  // rank 0: the named error; rank 1: its crash
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5 + 10));
}

TEST(DdpProcesses, TwoProcessesOverTcpStore) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn_self("DdpProcesses.Worker", {"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                                       "MASTER_PORT=" + std::to_string(port), "EMBER_COMM_TIMEOUT_S=30"}));
  EXPECT_EQ(wait_all(pids), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace ember::comm
