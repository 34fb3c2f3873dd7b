// Datasets, the DataLoader that batches them, and batch transforms.
//
// A TensorDataset holds all samples as one tensor (dim 0 indexes samples) and its
// targets; a batch is two index_selects (data::DataLoader). A map-style Dataset<Sample>
// gives one sample of the user's type per index, and a collate function makes a batch of
// the user's type from a batch's samples (PyTorch's Dataset + DataLoader(collate_fn),
// libtorch's torch::data::Dataset):
//
//   struct Pair { Tensor a, b; };
//   class Pairs : public data::Dataset<Pair> {
//    public:
//     Pair get(int64_t i) const override;
//     int64_t size() const override;
//   };
//   auto collate = [](std::vector<Pair> s) { ...; return MyBatch{...}; };
//   data::BasicDataLoader loader(std::make_shared<Pairs>(), collate, {.batch_size = 32, .seed = 1});
//   for (auto& batch : loader) { ... }   // one epoch: batch is a MyBatch&
//
// Both kinds share the loader's machinery: a seeded permutation per epoch (the same seed
// and epoch give the same order) or a Sampler's order, drop_last, and a background thread
// that prepares the next batches while the caller computes on the current one.
#pragma once

#include <any>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
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

// A map-style dataset: sample `index` of [0, size()). get() runs on the loader's prefetch
// thread when there is one (one call at a time): it should draw random numbers from a
// Generator of its own, not from the process-wide one the training thread uses.
template <class Sample>
class Dataset {
 public:
  using sample_type = Sample;
  virtual ~Dataset() = default;
  virtual Sample get(int64_t index) const = 0;
  virtual int64_t size() const = 0;
};

// A (data, target) sample, and the collate that stacks such samples into a Batch along a
// new dim 0 (PyTorch's default_collate for (data, target) pairs; libtorch's Stack<>).
// Targets may all be undefined (the batch's is then undefined).
struct Example {
  Tensor data;
  Tensor target;
};
Batch default_collate(std::vector<Example> samples);

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
  // Rewrite each TensorDataset batch's data, in order (a map-style dataset transforms in
  // get() or its collate).
  std::vector<Transform> transforms{};
  // TensorDataset batches in page-locked host memory, so copies to a CUDA device are
  // asynchronous (DevicePrefetcher, data/prefetch.h). Needs a build with CUDA.
  bool pin_memory = false;
  // The sample order of each epoch instead of the loader's own (shuffle and seed are
  // then unused): a DistributedSampler for this rank's share.
  std::shared_ptr<const Sampler> sampler{};
};

namespace internal {

// Where a loader's batches come from: a TensorDataset's index_selects, or a map-style
// dataset's get() and collate. make() may run on the prefetch thread.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t size() const = 0;
  // Before an epoch's first make(), with its sample order (no make() is running).
  virtual void start_epoch(const std::vector<int64_t>& order) { (void)order; }
  // The batch of order[start, start + n), its random choices drawn from gen.
  virtual std::any make(const std::vector<int64_t>& order, int64_t start, int64_t n, Generator& gen) const = 0;
};

std::unique_ptr<BatchSource> tensor_batches(TensorDataset dataset, const DataLoaderOptions& options);
// Errors for a null dataset, for what only TensorDataset batches have (transforms,
// pin_memory), and for an index outside the dataset.
void check_map_style(bool has_dataset, const DataLoaderOptions& options);
void check_sample_index(int64_t index, int64_t size);

template <class Sample, class BatchT>
class MapBatches final : public BatchSource {
 public:
  MapBatches(std::shared_ptr<const Dataset<Sample>> dataset, std::function<BatchT(std::vector<Sample>)> collate)
      : dataset_(std::move(dataset)), collate_(std::move(collate)) {}
  int64_t size() const override { return dataset_->size(); }
  std::any make(const std::vector<int64_t>& order, int64_t start, int64_t n, Generator&) const override {
    std::vector<Sample> samples;
    samples.reserve(static_cast<size_t>(n));
    for (int64_t i = start; i < start + n; ++i) {
      check_sample_index(order[i], size());
      samples.push_back(dataset_->get(order[i]));
    }
    return collate_(std::move(samples));
  }

 private:
  std::shared_ptr<const Dataset<Sample>> dataset_;
  std::function<BatchT(std::vector<Sample>)> collate_;
};

// The part of a DataLoader that does not depend on the batch type: the epochs and their
// order, and the prefetch thread, over type-erased batches.
class LoaderEngine {
 public:
  LoaderEngine(std::unique_ptr<BatchSource> source, DataLoaderOptions options);
  ~LoaderEngine();
  LoaderEngine(const LoaderEngine&) = delete;
  LoaderEngine& operator=(const LoaderEngine&) = delete;

  void start_epoch(int64_t epoch);
  std::optional<std::any> next();
  // For range-for: starts the next epoch (0 first), unless start_epoch() has just started
  // one that nothing has read from yet.
  void begin_iteration();
  int64_t batches_per_epoch() const;
  int64_t dataset_size() const { return source_->size(); }
  std::vector<int64_t> order(int64_t epoch) const;

 private:
  std::any make_batch(int64_t b, const std::vector<int64_t>& order) const;
  void stop_worker();

  std::unique_ptr<BatchSource> source_;
  DataLoaderOptions opt_;
  std::vector<int64_t> order_;
  int64_t next_batch_ = 0;
  int64_t epoch_ = 0;
  bool started_ = false;
  bool fresh_ = false;  // started by start_epoch(), not read from yet

  // Background prefetching.
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::any> ready_;
  std::exception_ptr error_;
  int64_t produced_ = 0;
  bool stop_ = false;
};

}  // namespace internal

// Batches of type BatchT. data::DataLoader is the TensorDataset loader (BatchT = Batch);
// a map-style dataset and a collate make a BasicDataLoader of the collate's result type.
template <class BatchT>
class BasicDataLoader {
 public:
  BasicDataLoader(TensorDataset dataset, DataLoaderOptions options)
    requires std::same_as<BatchT, Batch>
      : engine_(internal::tensor_batches(std::move(dataset), options), options) {}  // (not moved: both read it)
  // collate(samples) -> BatchT, with the samples dataset->get() gives for the batch's indices.
  template <class D, class Collate>
    requires std::derived_from<D, Dataset<typename D::sample_type>>
  BasicDataLoader(std::shared_ptr<D> dataset, Collate collate, DataLoaderOptions options)
      : engine_(map_style(std::move(dataset), std::move(collate), options), options) {}

  // Starts epoch `epoch` (its order depends on seed and epoch only, or on the sampler).
  void start_epoch(int64_t epoch) { engine_.start_epoch(epoch); }
  // The next batch of the epoch, or nothing when the epoch is done.
  std::optional<BatchT> next() {
    std::optional<std::any> b = engine_.next();
    if (!b) return std::nullopt;
    return std::any_cast<BatchT>(std::move(*b));
  }
  int64_t batches_per_epoch() const { return engine_.batches_per_epoch(); }
  int64_t dataset_size() const { return engine_.dataset_size(); }
  // The sample order of an epoch.
  std::vector<int64_t> order(int64_t epoch) const { return engine_.order(epoch); }

  // `for (auto& batch : loader)` runs one epoch: the one start_epoch() has just started,
  // else the next (0 first), as each pass over a PyTorch DataLoader is a new epoch.
  class iterator {
   public:
    using value_type = BatchT;
    using difference_type = std::ptrdiff_t;
    BatchT& operator*() const { return *batch_; }
    iterator& operator++() {
      batch_ = loader_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !batch_.has_value(); }

   private:
    friend class BasicDataLoader;
    explicit iterator(BasicDataLoader* loader) : loader_(loader), batch_(loader->next()) {}
    BasicDataLoader* loader_;
    mutable std::optional<BatchT> batch_;
  };
  iterator begin() {
    engine_.begin_iteration();
    return iterator(this);
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  template <class D, class Collate>
  static std::unique_ptr<internal::BatchSource> map_style(std::shared_ptr<D> dataset, Collate collate,
                                                        const DataLoaderOptions& options) {
    using Sample = typename D::sample_type;
    static_assert(std::is_invocable_r_v<BatchT, Collate&, std::vector<Sample>>,
                  "collate must take std::vector<Sample> and return the loader's batch type");
    internal::check_map_style(dataset != nullptr, options);
    return std::make_unique<internal::MapBatches<Sample, BatchT>>(std::shared_ptr<const Dataset<Sample>>(std::move(dataset)),
                                                               std::move(collate));
  }

  internal::LoaderEngine engine_;
};

template <class D, class Collate>
BasicDataLoader(std::shared_ptr<D>, Collate, DataLoaderOptions)
    -> BasicDataLoader<std::invoke_result_t<Collate&, std::vector<typename D::sample_type>>>;

using DataLoader = BasicDataLoader<Batch>;

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
