// Rank-agreed micro-batching under DDP (Note [Automatic micro-batching] in
// optim/microbatch.h): only rank 1's memory is capped so that its shard does not fit
// whole; rank 0's fits. Both must split alike (the same micro-batch size and piece count,
// rank 0 retrying with its peer although its own attempt succeeded), and the steps they
// take together are those of one process on the global batch.
//
// The ranks are processes: threads of one process share the CPU's caching allocator
// (memory/caching_allocator.h: host_allocator() is one per process), so a cap there would
// cap every rank.
//
// Tolerance: as in test_ddp.cpp, float64 and only the order of the sums differs. Each
// gradient element sums one term per sample of the global batch (1024), so reordering
// (the shards, then the pieces) changes it by at most 1024 * 2^-53 ~ 1.1e-13 of the sum
// of its terms' magnitudes; three momentum-SGD steps of lr 0.1 add a few such errors per
// parameter. 1e-10 relative (plus 1e-12 absolute) leaves about three orders of magnitude,
// and a piece dropped or counted twice, or a wrong scale of the pieces' losses, moves the
// parameters by 1e-3 or more.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/ddp.h"
#include "comm/rendezvous.h"
#include "core/memory.h"
#include "optim/microbatch.h"
#include "tests/comm/ddp_test_util.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

using namespace testing;
constexpr int64_t kShard = 512;  // samples per rank and step
constexpr int kSteps = 3;
constexpr double kAtol = 1e-12, kRtol = 1e-10;
constexpr std::size_t MiB = 1024 * 1024;

// One rank. Rank 1 caps its allocator 8 MiB above what it holds once the model, its
// optimizer state, DDP's buckets and the data are in place. A whole shard's step needs
// about 20 MiB beyond that (its [512, 1024] activations and their gradients are 4 MiB
// each), so rank 1 must split its shard; rank 0, uncapped, fits it whole.
TEST(DdpMicroBatch, Worker) {
  if (!is_worker()) GTEST_SKIP() << "runs as a child of DdpMicroBatch.ARankOutOfMemorySplitsEveryRank";
  auto pg = init_process_group_from_env();
  const int r = pg->rank();
  auto model = make_model(r == 0 ? 1 : 7, kFloat64, ModelKind::kWide);  // DDP broadcasts rank 0's
  DistributedDataParallel ddp(model, pg);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::MicroBatcher batcher(model->parameters(), Device::cpu(), {.agree = min_over_ranks(pg)});
  std::vector<std::pair<Tensor, Tensor>> shards;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, kShard * pg->size(), kFloat64, ModelKind::kWide);
    shards.emplace_back(x.narrow(0, r * kShard, kShard), y.narrow(0, r * kShard, kShard));
  }
  // The momentum buffers now (a step on zero gradients moves nothing), so that they count
  // in what the cap is measured from.
  for (const Tensor& p : model->parameters()) p.set_grad(zeros_like(p));
  opt.step();
  memory::CachingAllocator& host = device_allocator(Device::cpu());
  host.empty_cache();
  const auto reserved = static_cast<std::size_t>(host.stats().reserved_bytes[memory::kAllPools].current);
  if (r == 1) host.set_memory_limit(reserved + 8 * MiB);
  std::vector<int64_t> mine;  // per step: micro-batch size, pieces, retries
  for (const auto& [x, y] : shards) {
    optim::MicroBatchResult step;
    {
      auto local = ddp.no_sync();
      step = batcher.backward(x, y, [&](const Tensor& a, const Tensor& b) { return loss_of(*model, a, b); });
    }
    ddp.sync_gradients();
    opt.step();
    mine.insert(mine.end(), {step.micro_batch, step.pieces, step.retries});
  }
  host.set_memory_limit(0);

  Tensor all = zeros({2, static_cast<int64_t>(mine.size())}, kInt64);
  pg->all_gather(all, tensor(std::vector<double>(mine.begin(), mine.end()), kInt64))->wait();
  if (r == 0) {
    const std::vector<int64_t> got = all.to_vector<int64_t>();
    const auto half = got.begin() + static_cast<std::ptrdiff_t>(mine.size());
    const std::vector<int64_t> rank0(got.begin(), half), rank1(half, got.end());
    EXPECT_EQ(rank0, rank1) << "(micro-batch, pieces, retries) per step differ between the ranks";
    const int64_t mb = rank1[0];
    EXPECT_LT(mb, kShard) << "rank 1's shard should not fit whole";
    EXPECT_EQ(rank1[1], (kShard + mb - 1) / mb);
    EXPECT_GE(rank0[2], 1) << "rank 0, whose shard fits, retried with its peer";
    for (int s = 1; s < kSteps; ++s) {
      EXPECT_EQ(rank0[3 * s], mb) << "step " << s << ": the agreed size is kept";
      EXPECT_EQ(rank0[3 * s + 2], 0) << "step " << s;
    }
    std::printf("both ranks: micro-batches of %lld (shard %lld) in %lld pieces after %lld retries\n",
                static_cast<long long>(mb), static_cast<long long>(kShard), static_cast<long long>(rank0[1]),
                static_cast<long long>(rank0[2]));
  }
  const std::vector<Tensor> single = train_single(kShard * pg->size(), kFloat64, kSteps, ModelKind::kWide);
  std::vector<Tensor> got;
  for (const Tensor& p : model->parameters()) got.push_back(p.detach().clone());
  const double worst = worst_ratio(got, single, kAtol, kRtol);
  EXPECT_LE(worst, 1.0) << "rank " << r << ": worst |ddp - single| / (atol + rtol |single|)";
  if (r == 0) {
    std::printf("worst |ddp - single| / (atol + rtol |single|): %.3g\n", worst);
    // A distinct run (one step fewer) is far outside the bound: the comparison has teeth.
    EXPECT_GT(worst_ratio(train_single(kShard * pg->size(), kFloat64, kSteps - 1, ModelKind::kWide), single, kAtol,
                          kRtol), 1e3);
  }
  pg->barrier()->wait();
}

TEST(DdpMicroBatch, ARankOutOfMemorySplitsEveryRank) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn_self("DdpMicroBatch.Worker", {"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                                        "MASTER_PORT=" + std::to_string(port),
                                                        "EMBER_COMM_TIMEOUT_S=30"}));
  EXPECT_EQ(wait_all(pids), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace ember::comm
