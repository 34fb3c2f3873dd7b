// DistributedSampler: disjoint shards that cover the epoch, the same permutation on
// every rank (seed + epoch), padding or drop_last, and the DataLoader's use of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "core/ops.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ember::data {
namespace {

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheEpoch) {
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {12, 13, 1}) {
      std::multiset<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, r, world, {.seed = 7});
        auto idx = s.indices(3);
        EXPECT_EQ(static_cast<int64_t>(idx.size()), (n + world - 1) / world);
        seen.insert(idx.begin(), idx.end());
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), (n + world - 1) / world * world);
      for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i << " missing";
      // Padding repeats only as many samples as needed.
      EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(seen.begin(), seen.end()).size()), n);
    }
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  std::set<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(14, r, 3, {.drop_last = true});
    EXPECT_EQ(s.size(), 4);
    auto idx = s.indices(0);
    seen.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(seen.size(), 12u);  // disjoint, 2 samples dropped
}

TEST(DistributedSampler, EpochAndSeedChangeTheOrderEveryRankAgrees) {
  DistributedSampler a(100, 0, 2, {.seed = 1}), b(100, 0, 2, {.seed = 1}), c(100, 0, 2, {.seed = 2});
  a.set_epoch(5);
  b.set_epoch(5);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), a.indices(6));
  EXPECT_NE(a.indices(5), c.indices(5));
  DistributedSampler plain(10, 1, 2, {.shuffle = false});
  EXPECT_EQ(plain.indices(), (std::vector<int64_t>{1, 3, 5, 7, 9}));
}

// With a per-rank batch of B / N, step k of the N ranks covers the samples of step k of
// one DataLoader with batch B and the same seed (Note [Distributed sharding]).
TEST(DistributedSampler, RanksTogetherTakeTheSingleProcessSteps) {
  const int64_t n = 40, B = 8;
  const int world = 4;
  TensorDataset ds(arange(0, n, 1, kFloat32).view({n, 1}), arange(n));
  DataLoader single(ds, {.batch_size = B, .shuffle = true, .seed = 3, .prefetch = 0});
  single.start_epoch(2);
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < world; ++r) {
    auto s = std::make_shared<DistributedSampler>(n, r, world, DistributedSamplerOptions{.seed = 3});
    ranks.push_back(
        std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = B / world, .prefetch = 0, .sampler = s}));
    ranks.back()->start_epoch(2);
    EXPECT_EQ(ranks.back()->batches_per_epoch(), n / B);
  }
  while (auto whole = single.next()) {
    std::vector<int64_t> want = whole->target.to_vector<int64_t>(), got;
    for (auto& l : ranks) {
      auto part = l->next();
      ASSERT_TRUE(part.has_value());
      for (int64_t t : part->target.to_vector<int64_t>()) got.push_back(t);
    }
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(want, got);
  }
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(-1, 0, 1), Error);
  EXPECT_THROW(DistributedSampler(0, 0, 2), Error);
}

}  // namespace
}  // namespace ember::data
