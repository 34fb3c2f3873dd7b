// Samplers (data/sampler.h).
#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "core/ops.h"
#include "core/random.h"

namespace ember::data {

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  if (n == 0) return idx;
  // Sorting by one Philox key per sample gives a uniform permutation (ties are broken by
  // index; with 64-bit-range keys they are rare).
  Generator gen(seed * 1000003u + static_cast<uint64_t>(epoch));
  const std::vector<int64_t> keys = randint(0, int64_t(1) << 53, {n}, kInt64, &gen).to_vector<int64_t>();
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  return idx;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), rank_(rank), world_size_(world_size), options_(options) {
  EMBER_CHECK(world_size >= 1, "DistributedSampler: world size must be at least 1, got ", world_size);
  EMBER_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is outside [0, ", world_size, ")");
  EMBER_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size);
  EMBER_CHECK(options.drop_last || dataset_size > 0 || world_size == 1,
              "DistributedSampler: an empty dataset cannot be padded to ", world_size, " ranks");
  num_samples_ = options.drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = shuffled_order(dataset_size_, options_.seed, epoch);
  } else {
    all.resize(static_cast<size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), 0);
  }
  const size_t total = static_cast<size_t>(total_size());
  if (all.size() > total) {
    all.resize(total);
  } else {
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % static_cast<size_t>(dataset_size_)]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(world_size_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace ember::data
