// ZeroOptimizer (ZeRO stages 1 and 2): after 10 steps every rank's parameters equal
// unsharded DDP's, at world sizes 2 and 3, with parameter and bucket sizes that do not
// divide by the world size, for Adam and momentum SGD (and on two CUDA devices, NCCL,
// where there are: emulated ones in the emulated build); a missing all-gather fails that
// comparison; stage 2 keeps only gradient shards; a checkpoint saved at world size 3
// resumes at 2 (ZeRO) and at 1 (a plain optimizer) with the uninterrupted run's next step.
//
// Tolerance: 1e-6 relative, between the two things it must tell apart. The sharded update
// is the same elementwise fused op on the same values; only the gradient reduction may
// add in another order (reduce-scatter against all-reduce), ~1e-16 in float64 (measured:
// the runs agree bit for bit on Gloo). A missing all-gather leaves (N-1)/N of the
// parameters at their previous values: off by a learning-rate-sized step, 1e-3 and more.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <unistd.h>

#include "base/error.h"
#include "comm/zero.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/memory.h"
#include "optim/checkpoint.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/ddp_test_util.h"

namespace ember::comm {
namespace {

using namespace testing;
constexpr int64_t kGlobal = 12;  // samples per step, split over 1, 2 or 3 ranks
constexpr double kRtol = 1e-6, kAtol = 1e-12;

enum class Opt { kAdam, kSgd };
enum class Variant { kRight, kNoAllGather };

// 8 -> 13 -> 5 -> 4: 117, 70 and 24 elements per layer, odd bucket sizes.
std::shared_ptr<nn::Module> odd_model() {
  manual_seed(7);
  using Modules = std::initializer_list<std::shared_ptr<nn::Module>>;
  auto m = std::make_shared<nn::Sequential>(Modules{std::make_shared<nn::Linear>(8, 13), std::make_shared<nn::Tanh>(),
                                                    std::make_shared<nn::Linear>(13, 5), std::make_shared<nn::Tanh>(),
                                                    std::make_shared<nn::Linear>(5, 4)});
  m->to(kFloat64);
  return m;
}

// One model per rank, made here: the ranks' threads drawing from the global generator at
// once would interleave, and rank 0's initial values (which DDP broadcasts) would vary.
std::vector<std::shared_ptr<nn::Module>> odd_models(int world) {
  std::vector<std::shared_ptr<nn::Module>> out;
  for (int r = 0; r < world; ++r) out.push_back(odd_model());
  return out;
}

std::unique_ptr<optim::Optimizer> make_opt(Opt o, std::vector<Tensor> p) {
  if (o == Opt::kAdam) return std::make_unique<optim::Adam>(std::move(p), optim::Adam::Options{.lr = 0.01});
  return std::make_unique<optim::SGD>(std::move(p), optim::SGD::Options{.lr = 0.1, .momentum = 0.9});
}

const DdpOptions kBuckets{.bucket_cap_bytes = 600, .first_bucket_bytes = 200};  // several buckets, odd sizes

// One step on this rank's share of step s's global batch, on device d.
void backward_step(DistributedDataParallel& ddp, int s, int rank, int world, Device d = Device::cpu()) {
  auto [x, y] = batch(s, kGlobal, kFloat64);
  const int64_t n = kGlobal / world;
  loss_of(ddp.module(), x.narrow(0, rank * n, n).to(d), y.narrow(0, rank * n, n).to(d)).backward();
}

std::vector<Tensor> copy_params(nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().to(Device::cpu()).clone());
  return out;
}

// `steps` steps at `world` ranks; stage 0 is unsharded DDP. Returns every rank's parameters.
// cuda: rank r on cuda:r (NCCL).
std::vector<std::vector<Tensor>> train(int world, int stage, Opt o, int steps = 10, Variant v = Variant::kRight,
                                       bool cuda = false) {
  std::vector<std::vector<Tensor>> out(world);
  const auto models = odd_models(world);
  run_ranks(world, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    const Device d = cuda ? Device::cuda(pg.rank()) : Device::cpu();
    auto model = models[pg.rank()];
    model->to(d);
    DistributedDataParallel ddp(model, pgp, kBuckets);
    std::unique_ptr<optim::Optimizer> opt =
        stage == 0 ? make_opt(o, model->parameters())
                   : std::make_unique<ZeroOptimizer>(ddp, stage, [o](std::vector<Tensor> p) { return make_opt(o, p); });
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      backward_step(ddp, s, pg.rank(), world, d);
      const std::vector<Tensor> before = copy_params(*model);
      opt->step();
      if (v == Variant::kNoAllGather) {  // put back what this rank does not own: a missing all-gather
        const auto params = model->parameters();
        for (const auto& ids : ddp.buckets()) {
          int64_t numel = 0, offset = 0;
          for (size_t i : ids) numel += params[i].numel();
          const int64_t shard = (numel + world - 1) / world, lo = pg.rank() * shard, hi = lo + shard;
          NoGradGuard no_grad;
          for (size_t i : ids) {
            Tensor flat = params[i].detach().reshape({-1}), old = before[i].reshape({-1});
            for (int64_t k = 0; k < params[i].numel(); ++k)
              if (offset + k < lo || offset + k >= hi) flat.narrow(0, k, 1).copy_(old.narrow(0, k, 1));
            offset += params[i].numel();
          }
        }
      }
    }
    out[pg.rank()] = copy_params(*model);
  });
  return out;
}

class ZeroEquivalence : public ::testing::TestWithParam<std::tuple<int, int, Opt>> {};

TEST_P(ZeroEquivalence, TenStepsMatchUnshardedDdp) {
  const auto [world, stage, o] = GetParam();
  const auto reference = train(world, 0, o);
  const auto sharded = train(world, stage, o);
  for (int r = 0; r < world; ++r) {
    const double worst = worst_ratio(sharded[r], reference[0], kAtol, kRtol);
    EXPECT_LE(worst, 1.0) << "rank " << r << " uses " << worst << " of the tolerance";
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroEquivalence,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 2),
                                            ::testing::Values(Opt::kAdam, Opt::kSgd)),
                         [](const auto& info) {
                           return "World" + std::to_string(std::get<0>(info.param)) + "Stage" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) == Opt::kAdam ? "Adam" : "Sgd");
                         });

// The same on CUDA tensors (two emulated devices in the emulated build; NCCL's true
// reduce-scatter) against unsharded DDP on the CPU.
TEST(Zero, OnCudaMatchesUnshardedDdp) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const auto reference = train(2, 0, Opt::kAdam);
  for (int stage : {1, 2}) {
    const auto sharded = train(2, stage, Opt::kAdam, 10, Variant::kRight, /*cuda=*/true);
    for (int r = 0; r < 2; ++r) EXPECT_LE(worst_ratio(sharded[r], reference[0], kAtol, kRtol), 1.0) << stage << r;
  }
}

TEST(Zero, MissingAllGatherIsCaught) {
  const auto reference = train(3, 0, Opt::kAdam, 3);
  const auto wrong = train(3, 1, Opt::kAdam, 3, Variant::kNoAllGather);
  EXPECT_GT(worst_ratio(wrong[0], reference[0], kAtol, kRtol), 1e3);
}

TEST(Zero, Stage2KeepsOnlyGradientShards) {
  const auto models = odd_models(3);
  run_ranks(3, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    auto model = models[pg.rank()];
    DistributedDataParallel ddp(model, pgp, kBuckets);
    ZeroOptimizer opt(ddp, 2, [](std::vector<Tensor> p) { return make_opt(Opt::kAdam, p); });
    backward_step(ddp, 0, pg.rank(), 3);
    for (const Tensor& b : ddp.bucket_buffers()) EXPECT_FALSE(b.defined());
    for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
    opt.step();
    // 211 parameters in float64: Adam's two moments, a third of them (padded) on each rank.
    EXPECT_EQ(opt.full_state_bytes(), 2 * 211 * 8);
    EXPECT_LE(opt.state_bytes(), opt.full_state_bytes() / 3 + 2 * 8 * int64_t(ddp.buckets().size()));
    EXPECT_LE(opt.gradient_bytes(), opt.full_gradient_bytes() / 3 + 8 * int64_t(ddp.buckets().size()));
    EXPECT_NE(opt.memory_summary().find("ZeRO-2 over 3 ranks"), std::string::npos) << opt.memory_summary();
    EXPECT_NE(opt.memory_summary().find("saved on this rank"), std::string::npos) << opt.memory_summary();
    // The device's memory report carries it (the summary wraps it into rows; the OOM report keeps it whole).
    const std::string summary = memory_summary(model->parameters()[0].device());
    EXPECT_NE(summary.find("| ZeRO-2 over 3 ranks: optimizer state on this rank"), std::string::npos) << summary;
  });
  EXPECT_EQ(memory_summary(Device::cpu()).find("ZeRO-"), std::string::npos) << "a destroyed optimizer's note stayed";
}

TEST(Zero, StateDictNeedsConsolidation) {
  const auto models = odd_models(2);
  run_ranks(2, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    auto model = models[pg.rank()];
    DistributedDataParallel ddp(model, pgp, kBuckets);
    ZeroOptimizer opt(ddp, 1, [](std::vector<Tensor> p) { return make_opt(Opt::kAdam, p); });
    backward_step(ddp, 0, pg.rank(), 2);
    opt.step();
    EXPECT_THROW(opt.state_dict(), Error);
    opt.consolidate_state_dict();
    // lr, step, the group's indices and Adam's 5 options (as an unsharded Adam saves them), two moments each
    EXPECT_EQ(opt.state_dict().size(), 2 + 6 + 2 * model->parameters().size());
  });
}

// Saved at world size 3 after 5 steps, resumed at 2 (ZeRO-1) and 1 (plain Adam): step 6
// equals the uninterrupted run's.
TEST(Zero, CheckpointResumesAtAnotherWorldSize) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("ember_zero_" + std::to_string(::getpid()) + ".safetensors");
  const auto uninterrupted = train(3, 2, Opt::kAdam, 6);
  const auto models3 = odd_models(3);
  run_ranks(3, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    auto model = models3[pg.rank()];
    DistributedDataParallel ddp(model, pgp, kBuckets);
    ZeroOptimizer opt(ddp, 2, [](std::vector<Tensor> p) { return make_opt(Opt::kAdam, p); });
    for (int s = 0; s < 5; ++s) {
      opt.zero_grad();
      backward_step(ddp, s, pg.rank(), 3);
      opt.step();
    }
    opt.consolidate_state_dict();
    if (pg.rank() == 0) optim::save_checkpoint(path.string(), *model, &opt);
    pg.barrier()->wait();
  });
  std::vector<Tensor> at2;
  const auto models2 = odd_models(2);
  run_ranks(2, [&](ProcessGroup& pg) {
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    auto model = models2[pg.rank()];
    DistributedDataParallel ddp(model, pgp, kBuckets);
    ZeroOptimizer opt(ddp, 1, [](std::vector<Tensor> p) { return make_opt(Opt::kAdam, p); });
    optim::load_checkpoint(path.string(), *model, &opt);
    backward_step(ddp, 5, pg.rank(), 2);
    opt.step();
    if (pg.rank() == 1) at2 = copy_params(*model);
  });
  auto model = odd_model();
  optim::Adam plain(model->parameters(), {.lr = 0.01});
  optim::load_checkpoint(path.string(), *model, &plain);
  auto [x, y] = batch(5, kGlobal, kFloat64);
  loss_of(*model, x, y).backward();
  plain.step();
  fs::remove(path);
  EXPECT_LE(worst_ratio(at2, uninterrupted[0], kAtol, kRtol), 1.0);
  EXPECT_LE(worst_ratio(copy_params(*model), uninterrupted[0], kAtol, kRtol), 1.0);
}

}  // namespace
}  // namespace ember::comm
