// Samplers: the sample order of an epoch. DataLoader shuffles by itself; a Sampler given
// in DataLoaderOptions replaces that order (a DistributedSampler gives each rank its share).
//
// Note [Distributed sharding]. DistributedSampler takes the epoch's permutation of the
// whole dataset (the same one a DataLoader with the same seed uses, so every rank agrees
// without talking), pads it by repeating its first indices up to a multiple of the world
// size (or, with drop_last, cuts the tail), and gives rank r the indices r, r + N,
// r + 2N, ... (PyTorch's layout). With a per-rank batch of B / N, the N ranks' step k
// then covers exactly the samples of step k of one process with batch B: a data-parallel
// run takes the same global steps as the single-process one.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::data {

// The permutation of [0, n) for (seed, epoch): one Philox key per sample, sorted.
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The sample indices of `epoch`, in order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // How many indices each epoch has.
  virtual int64_t size() const = 0;
};

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // Drop the tail that does not divide evenly among ranks, instead of padding it by
  // repeating samples from the start.
  bool drop_last = false;
};

class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }
  // PyTorch's style: the epoch indices() uses when called without one.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const { return indices(epoch_); }
  int64_t total_size() const { return num_samples_ * world_size_; }

 private:
  int64_t dataset_size_;
  int rank_, world_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace ember::data
