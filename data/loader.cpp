// The DataLoader's machinery (data/dataset.h, internal::LoaderEngine): the order of each
// epoch, batch b's generator, and the prefetch thread, over type-erased batches.
#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "core/autograd.h"
#include "core/runtime.h"
#include "data/dataset.h"

namespace ember::data::internal {

void check_map_style(bool has_dataset, const DataLoaderOptions& o) {
  EMBER_CHECK(has_dataset, "DataLoader: the dataset is null");
  EMBER_CHECK(o.transforms.empty(), "DataLoader: transforms rewrite TensorDataset batches; a map-style dataset "
              "transforms its samples in get() or its batches in the collate function");
  EMBER_CHECK(!o.pin_memory, "DataLoader: pin_memory pins TensorDataset batches; a map-style dataset's collate "
              "function can return pinned tensors (Tensor::pin_memory)");
}

void check_sample_index(int64_t index, int64_t size) {
  EMBER_CHECK(index >= 0 && index < size, "DataLoader: sample index ", index, " is out of range for a dataset of ",
              size, " samples");
}

LoaderEngine::LoaderEngine(std::unique_ptr<BatchSource> source, DataLoaderOptions options)
    : source_(std::move(source)), opt_(std::move(options)) {
  EMBER_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opt_.batch_size);
  EMBER_CHECK(opt_.prefetch >= 0 || opt_.prefetch == DataLoaderOptions::kAutoPrefetch,
              "DataLoader: prefetch must be >= 0 (or kAutoPrefetch), got ", opt_.prefetch);
  EMBER_CHECK(source_->size() >= 0, "DataLoader: the dataset's size is negative (", source_->size(), ")");
  if (opt_.prefetch == DataLoaderOptions::kAutoPrefetch)
    opt_.prefetch = static_cast<int>(std::thread::hardware_concurrency()) > get_num_threads() ? 2 : 0;
}

LoaderEngine::~LoaderEngine() { stop_worker(); }

int64_t LoaderEngine::batches_per_epoch() const {
  const int64_t n = opt_.sampler ? opt_.sampler->size() : source_->size(), b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> LoaderEngine::order(int64_t epoch) const {
  if (opt_.sampler) return opt_.sampler->indices(epoch);
  if (!opt_.shuffle) {
    std::vector<int64_t> idx(static_cast<size_t>(source_->size()));
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
  }
  return shuffled_order(source_->size(), opt_.seed, epoch);
}

// Batches draw from a generator of (seed, epoch, batch) alone, so prefetching, or not,
// gives the same batches.
std::any LoaderEngine::make_batch(int64_t b, const std::vector<int64_t>& order) const {
  Generator gen(opt_.seed * 7919u + static_cast<uint64_t>(epoch_) + 1);
  gen.set_offset(static_cast<uint64_t>(b) << 32);
  const int64_t start = b * opt_.batch_size;
  const int64_t n = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(order.size()) - start);
  return source_->make(order, start, n, gen);
}

void LoaderEngine::stop_worker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  error_ = nullptr;
  stop_ = false;
}

void LoaderEngine::begin_iteration() {
  if (!fresh_) start_epoch(started_ ? epoch_ + 1 : 0);
  fresh_ = false;
}

void LoaderEngine::start_epoch(int64_t epoch) {
  stop_worker();
  epoch_ = epoch;
  order_ = order(epoch);
  source_->start_epoch(order_);
  next_batch_ = 0;
  produced_ = 0;
  started_ = true;
  fresh_ = true;
  if (opt_.prefetch == 0) return;
  worker_ = std::thread([this, total = batches_per_epoch()] {
    NoGradGuard no_grad;
    SingleThreadedScope alone;  // a batch's gather must not wait for the pool, nor hold it
    for (int64_t b = 0; b < total; ++b) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < opt_.prefetch; });
        if (stop_) return;
      }
      try {
        std::any batch = make_batch(b, order_);
        std::lock_guard lock(mu_);
        ready_.push_back(std::move(batch));
        ++produced_;
      } catch (...) {
        std::lock_guard lock(mu_);
        error_ = std::current_exception();
        ++produced_;
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  });
}

std::optional<std::any> LoaderEngine::next() {
  EMBER_CHECK(started_, "DataLoader::next: call start_epoch() first (or iterate: for (auto& batch : loader))");
  fresh_ = false;
  if (next_batch_ >= batches_per_epoch()) return std::nullopt;
  if (opt_.prefetch == 0) {
    NoGradGuard no_grad;
    return make_batch(next_batch_++, order_);
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  std::any b = std::move(ready_.front());
  ready_.pop_front();
  ++next_batch_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace ember::data::internal
