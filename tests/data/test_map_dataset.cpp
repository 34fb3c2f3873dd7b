// Map-style datasets with the user's own sample and batch types (data::Dataset<Sample> and a
// collate function, PyTorch's Dataset + DataLoader(collate_fn)): every sample once per
// epoch in the loader's order, shuffling by seed and epoch, the prefetch thread and a
// sampler giving the same batches, default_collate for (data, target) samples, range-for
// over a loader (TensorDataset's too), and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

using namespace ember::data;  // NOLINT

// A user's sample: a word id and a tag, not tensors.
struct Word {
  int64_t id;
  std::string tag;
};
struct WordBatch {
  std::vector<int64_t> ids;
  std::string tags;
};

class Words final : public Dataset<Word> {
 public:
  explicit Words(int64_t n) : n_(n) {}
  Word get(int64_t index) const override { return {index * 10, "w" + std::to_string(index)}; }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

WordBatch join(std::vector<Word> words) {
  WordBatch b;
  for (const Word& w : words) {
    b.ids.push_back(w.id);
    b.tags += w.tag + ",";
  }
  return b;
}

TEST(MapDataset, UserTypesThroughCollateEverySampleOncePerEpoch) {
  BasicDataLoader loader(std::make_shared<Words>(10), join, {.batch_size = 4, .seed = 3, .prefetch = 0});
  static_assert(std::is_same_v<decltype(loader), BasicDataLoader<WordBatch>>);
  EXPECT_EQ(loader.dataset_size(), 10);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  for (int64_t epoch : {0, 1}) {
    loader.start_epoch(epoch);
    std::vector<int64_t> seen;
    std::vector<size_t> sizes;
    while (auto b = loader.next()) {
      sizes.push_back(b->ids.size());
      for (int64_t id : b->ids) seen.push_back(id / 10);
    }
    EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 2}));
    EXPECT_EQ(seen, loader.order(epoch));  // the loader's order: seed and epoch alone
  }
  EXPECT_NE(loader.order(0), loader.order(1));
}

TEST(MapDataset, RangeForRunsOneEpochEachAndFollowsStartEpoch) {
  BasicDataLoader loader(std::make_shared<Words>(7), join, {.batch_size = 3, .drop_last = true, .seed = 5});
  auto epoch_ids = [&] {
    std::vector<int64_t> ids;
    for (auto& batch : loader) {
      static_assert(std::is_same_v<decltype(batch), WordBatch&>);
      for (int64_t id : batch.ids) ids.push_back(id / 10);
    }
    return ids;
  };
  auto first_six = [&](int64_t e) {
    std::vector<int64_t> o = loader.order(e);
    o.resize(6);  // drop_last: two batches of 3
    return o;
  };
  EXPECT_EQ(epoch_ids(), first_six(0));  // the first pass is epoch 0
  EXPECT_EQ(epoch_ids(), first_six(1));  // each pass the next epoch
  loader.start_epoch(4);
  EXPECT_EQ(epoch_ids(), first_six(4));  // a pass right after start_epoch runs that epoch
  EXPECT_EQ(epoch_ids(), first_six(5));
  // Leaving a pass early, then passing again, starts the next epoch.
  for ([[maybe_unused]] auto& b : loader) break;
  EXPECT_EQ(epoch_ids(), first_six(7));
}

TEST(MapDataset, PrefetchAndSamplerGiveTheSameBatches) {
  auto ds = std::make_shared<Words>(23);
  auto collect = [&](DataLoaderOptions o) {
    BasicDataLoader loader(ds, join, o);
    std::vector<std::string> out;
    for (int64_t e = 0; e < 2; ++e) {
      loader.start_epoch(e);
      while (auto b = loader.next()) out.push_back(b->tags);
    }
    return out;
  };
  EXPECT_EQ(collect({.batch_size = 5, .seed = 2, .prefetch = 0}), collect({.batch_size = 5, .seed = 2, .prefetch = 3}));
  // A DistributedSampler's share, rank 1 of 3.
  auto sampler = std::make_shared<DistributedSampler>(23, 1, 3, DistributedSamplerOptions{.seed = 2});
  BasicDataLoader loader(ds, join, {.batch_size = 4, .prefetch = 2, .sampler = sampler});
  loader.start_epoch(1);
  std::vector<int64_t> ids;
  while (auto b = loader.next())
    for (int64_t id : b->ids) ids.push_back(id / 10);
  EXPECT_EQ(ids, sampler->indices(1));
}

// (data, target) samples stacked by default_collate: the batch TensorDataset would give.
class Squares final : public Dataset<Example> {
 public:
  Example get(int64_t i) const override {
    return {tensor({double(i), double(i * i)}, {2}), scalar_tensor(i % 3, kInt64)};
  }
  int64_t size() const override { return 9; }
};

TEST(MapDataset, DefaultCollateStacksExamples) {
  DataLoader loader(std::make_shared<Squares>(), default_collate, {.batch_size = 4, .shuffle = false});
  std::vector<Batch> batches;
  for (auto& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].data.shape(), (Shape{4, 2}));
  EXPECT_EQ(values(batches[0].data), (std::vector<double>{0, 0, 1, 1, 2, 4, 3, 9}));
  EXPECT_EQ(batches[2].target.shape(), (Shape{1}));
  EXPECT_EQ(values(batches[1].target), (std::vector<double>{1, 2, 0, 1}));
  EXPECT_DTYPE(batches[1].target, kInt64);
  // Without targets, and mixed.
  EXPECT_FALSE(default_collate({{ones({2}), {}}, {zeros({2}), {}}}).target.defined());
  EXPECT_EMBER_ERROR(default_collate({{ones({2}), ones({})}, {zeros({2}), {}}}), "default_collate",
                     "sample 1 has no target");
  EXPECT_EMBER_ERROR(default_collate({}), "default_collate", "no samples");
  EXPECT_EMBER_ERROR(default_collate({{ones({2}), {}}, {zeros({3}), {}}}), "stack");
}

TEST(MapDataset, TensorDatasetLoaderIteratesToo) {
  TensorDataset ds(iota({5, 2}), tensor({0, 1, 2, 3, 4}, kInt64));
  DataLoader loader(ds, {.batch_size = 2, .shuffle = false, .prefetch = 0});
  std::vector<double> targets;
  for (auto& batch : loader)
    for (double t : values(batch.target)) targets.push_back(t);
  EXPECT_EQ(targets, (std::vector<double>{0, 1, 2, 3, 4}));
}

class Broken final : public Dataset<Word> {
 public:
  Word get(int64_t index) const override {
    EMBER_CHECK(index != 3, "Broken: sample 3 is unreadable");
    return {index, ""};
  }
  int64_t size() const override { return 6; }
};

TEST(MapDataset, Errors) {
  // get()'s error reaches the caller, from the prefetch thread too.
  for (int prefetch : {0, 2}) {
    BasicDataLoader loader(std::make_shared<Broken>(), join, {.batch_size = 2, .shuffle = false, .prefetch = prefetch});
    loader.start_epoch(0);
    EXPECT_NO_THROW(loader.next());
    EXPECT_EMBER_ERROR(loader.next(), "Broken: sample 3 is unreadable");
  }
  // A sampler beyond the dataset.
  auto sampler = std::make_shared<DistributedSampler>(12, 0, 1, DistributedSamplerOptions{.shuffle = false});
  BasicDataLoader loader(std::make_shared<Words>(6), join, {.batch_size = 8, .prefetch = 0, .sampler = sampler});
  loader.start_epoch(0);
  EXPECT_EMBER_ERROR(loader.next(), "DataLoader: sample index 6 is out of range for a dataset of 6 samples");
  EXPECT_EMBER_ERROR(BasicDataLoader(std::shared_ptr<Words>(), join, {}), "the dataset is null");
  EXPECT_EMBER_ERROR(BasicDataLoader(std::make_shared<Words>(3), join, {.transforms = {normalize({0.5}, {0.2})}}),
                     "transforms rewrite TensorDataset batches");
  EXPECT_EMBER_ERROR(BasicDataLoader(std::make_shared<Words>(3), join, {.pin_memory = true}), "pin_memory");
  EXPECT_EMBER_ERROR(BasicDataLoader(std::make_shared<Words>(3), join, {.batch_size = 0}), "batch_size must be positive");
  BasicDataLoader unstarted(std::make_shared<Words>(3), join, {});
  EXPECT_EMBER_ERROR(unstarted.next(), "call start_epoch() first");
}

}  // namespace
}  // namespace ember::test
