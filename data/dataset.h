// In-memory datasets, the DataLoader that batches them, and batch transforms.
//
// A TensorDataset holds all samples as one tensor (dim 0 indexes samples) and its
// targets; a batch is two index_selects. The DataLoader shuffles with a seeded
// permutation per epoch (the same seed and epoch give the same order), and a background
// thread prepares the next batches while the caller computes on the current one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "data/sampler.h"

namespace ember::data {

struct Batch {
  Tensor data;    // [B, ...]
  Tensor target;  // [B]
};

class TensorDataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const { return data_.size(0); }
  Batch get(const Tensor& indices) const;  // int64 indices [B]
  // The first n samples (for --limit-train).
  TensorDataset head(int64_t n) const;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

// A transform rewrites a whole batch; it gets a generator for its random choices.
using Transform = std::function<Tensor(const Tensor& batch, Generator& gen)>;

// (x - mean[c]) / std[c] over dim 1.
Transform normalize(std::vector<double> mean, std::vector<double> stddev);
// Zero-pads H and W by `padding`, then takes a random size x size window per sample.
Transform random_crop(int64_t size, int64_t padding);
// Mirrors each sample along W with probability p.
Transform random_horizontal_flip(double p = 0.5);
// Bilinear resize of [B, C, H, W] to [B, C, height, width] (align_corners = false).
Transform resize(int64_t height, int64_t width);

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  // Batches prepared ahead by a background thread; 0: none, made on next()'s caller.
  // kAutoPrefetch: 2 when the machine has a core the compute threads leave free, else 0
  // (measured: with both of 2 cores computing, a prefetching thread made the MLP's epoch
  // 6-10% slower than making each batch inline).
  static constexpr int kAutoPrefetch = -1;
  int prefetch = kAutoPrefetch;
  std::vector<Transform> transforms;
  // Batches in page-locked host memory, so copies to a CUDA device are asynchronous
  // (DevicePrefetcher, data/prefetch.h). Needs a build with CUDA.
  bool pin_memory = false;
  // The sample order of each epoch instead of the loader's own (shuffle and seed are
  // then unused): a DistributedSampler for this rank's share.
  std::shared_ptr<const Sampler> sampler;
};

class DataLoader {
 public:
  DataLoader(TensorDataset dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts epoch `epoch` (its shuffle order depends on seed and epoch only).
  void start_epoch(int64_t epoch);
  // The next batch of the epoch, or nothing when the epoch is done.
  std::optional<Batch> next();
  int64_t batches_per_epoch() const;
  int64_t dataset_size() const { return dataset_.size(); }
  // The sample order of an epoch.
  std::vector<int64_t> order(int64_t epoch) const;

 private:
  Batch make_batch(int64_t b, const std::vector<int64_t>& order) const;
  void stop_worker();

  TensorDataset dataset_;
  DataLoaderOptions opt_;
  std::vector<int64_t> order_;
  // order_ on the dataset's device, when that is a GPU: each batch's indices are a view of
  // it, so a batch costs no copy from the host (whose wait for the device would stall
  // the step that the host should be queuing meanwhile).
  Tensor order_on_device_;
  int64_t next_batch_ = 0;
  int64_t epoch_ = 0;
  bool started_ = false;

  // Background prefetching.
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  int64_t produced_ = 0;
  bool stop_ = false;
};

// What a loader expects of an image set's files: the images' rows and columns, and the
// number of classes the labels index (0: any).
struct ImageSetShape {
  int64_t rows = 28, cols = 28;
  int64_t classes = 10;
};

// Fashion-MNIST from DIR's IDX files (train-*/t10k-*, gzipped or not): images as
// float32 [N, 1, rows, cols] scaled to [0, 1], labels int64 [N]. The files' headers must
// give images of `expect`'s size (Fashion-MNIST's 28 x 28 unless asked otherwise) and one
// label per image, each below `expect.classes`; an ember::Error names the file otherwise,
// and a folder that cannot be searched or a symlink loop is an error naming it.
TensorDataset load_fashion_mnist(const std::string& dir, bool train, const ImageSetShape& expect = {});

}  // namespace ember::data
