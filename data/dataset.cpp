#include "data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "data/idx.h"

namespace ember::data {

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  EMBER_CHECK(data_.defined() && targets_.defined() && data_.dim() >= 1 && targets_.dim() >= 1,
              "TensorDataset: data and targets must be tensors of at least one dim");
  EMBER_CHECK(data_.size(0) == targets_.size(0), "TensorDataset: ", data_.size(0), " samples but ", targets_.size(0),
              " targets");
}

Batch TensorDataset::get(const Tensor& indices) const {
  return {index_select(data_, 0, indices), index_select(targets_, 0, indices)};
}

TensorDataset TensorDataset::head(int64_t n) const {
  EMBER_CHECK(n >= 0, "TensorDataset::head: n must be >= 0, got ", n);
  n = std::min(n, size());
  return {data_.narrow(0, 0, n), targets_.narrow(0, 0, n)};
}

// ----- transforms -----

Transform normalize(std::vector<double> mean, std::vector<double> stddev) {
  EMBER_CHECK(!mean.empty() && mean.size() == stddev.size(), "normalize: mean and std need one value per channel");
  for (double s : stddev) EMBER_CHECK(s > 0, "normalize: std must be positive, got ", s);
  return [mean, stddev](const Tensor& x, Generator&) {
    EMBER_CHECK(x.dim() >= 2 && x.size(1) == static_cast<int64_t>(mean.size()), "normalize: batch ",
                shape_str(x.shape()), " does not have ", mean.size(), " channels in dim 1");
    Shape s(static_cast<size_t>(x.dim()), 1);
    s[1] = static_cast<int64_t>(mean.size());
    Tensor m = tensor(mean, s, {x.dtype(), x.device()}), sd = tensor(stddev, s, {x.dtype(), x.device()});
    return div(sub(x, m), sd);
  };
}

Transform random_crop(int64_t size, int64_t padding) {
  EMBER_CHECK(size > 0 && padding >= 0, "random_crop: needs size > 0 and padding >= 0");
  return [size, padding](const Tensor& x, Generator& gen) {
    EMBER_CHECK(x.dim() == 4, "random_crop: expects [B, C, H, W], got ", shape_str(x.shape()));
    const int64_t B = x.size(0), H = x.size(2) + 2 * padding, W = x.size(3) + 2 * padding;
    EMBER_CHECK(size <= H && size <= W, "random_crop: crop ", size, " is larger than the padded image ", H, "x", W);
    Tensor padded = zeros({B, x.size(1), H, W}, {x.dtype(), x.device()});
    padded.narrow(2, padding, x.size(2)).narrow(3, padding, x.size(3)).copy_(x);
    Tensor offsets = randint(0, (H - size + 1) * (W - size + 1), {B}, kInt64, &gen);
    const std::vector<int64_t> off = offsets.to_vector<int64_t>();
    Tensor out = empty({B, x.size(1), size, size}, {x.dtype(), x.device()});
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = off[b] / (W - size + 1), j = off[b] % (W - size + 1);
      out.select(0, b).copy_(padded.select(0, b).narrow(1, i, size).narrow(2, j, size));
    }
    return out;
  };
}

Transform random_horizontal_flip(double p) {
  EMBER_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [p](const Tensor& x, Generator& gen) {
    EMBER_CHECK(x.dim() == 4, "random_horizontal_flip: expects [B, C, H, W], got ", shape_str(x.shape()));
    const int64_t W = x.size(3);
    Tensor flipped = index_select(x, 3, arange(static_cast<double>(W - 1), -1, -1, {kInt64, x.device()}));
    Tensor pick = lt(rand({x.size(0), 1, 1, 1}, {kFloat32, x.device()}, &gen), Scalar(p));
    return where(pick, flipped, x);
  };
}

Transform resize(int64_t height, int64_t width) {
  EMBER_CHECK(height > 0 && width > 0, "resize: size must be positive, got ", height, "x", width);
  // Source coordinates of the output centres, and the two neighbours' weights, per axis.
  auto axis = [](int64_t in, int64_t out, Device dev, DType dt) {
    std::vector<double> lo(out), hi(out), w(out);
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    for (int64_t i = 0; i < out; ++i) {
      const double src = std::max(0.0, (static_cast<double>(i) + 0.5) * scale - 0.5);
      const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
      lo[i] = static_cast<double>(i0);
      hi[i] = static_cast<double>(std::min<int64_t>(i0 + 1, in - 1));
      w[i] = src - static_cast<double>(i0);
    }
    return std::tuple{tensor(lo, {kInt64, dev}), tensor(hi, {kInt64, dev}), tensor(w, {dt, dev})};
  };
  return [height, width, axis](const Tensor& x, Generator&) {
    EMBER_CHECK(x.dim() == 4, "resize: expects [B, C, H, W], got ", shape_str(x.shape()));
    auto [h0, h1, wh] = axis(x.size(2), height, x.device(), x.dtype());
    auto [w0, w1, ww] = axis(x.size(3), width, x.device(), x.dtype());
    Tensor a = index_select(x, 2, h0), b = index_select(x, 2, h1);
    Tensor wh4 = wh.view({1, 1, height, 1});
    Tensor rows = add(a, mul(sub(b, a), wh4));
    Tensor c = index_select(rows, 3, w0), d = index_select(rows, 3, w1);
    return add(c, mul(sub(d, c), ww.view({1, 1, 1, width})));
  };
}

// ----- DataLoader -----

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), opt_(std::move(options)) {
  EMBER_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opt_.batch_size);
  EMBER_CHECK(opt_.prefetch >= 0 || opt_.prefetch == DataLoaderOptions::kAutoPrefetch,
              "DataLoader: prefetch must be >= 0 (or kAutoPrefetch), got ", opt_.prefetch);
  if (opt_.prefetch == DataLoaderOptions::kAutoPrefetch)
    opt_.prefetch = static_cast<int>(std::thread::hardware_concurrency()) > get_num_threads() ? 2 : 0;
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = opt_.sampler ? opt_.sampler->size() : dataset_.size(), b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  if (opt_.sampler) return opt_.sampler->indices(epoch);
  if (!opt_.shuffle) {
    std::vector<int64_t> idx(static_cast<size_t>(dataset_.size()));
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
  }
  return shuffled_order(dataset_.size(), opt_.seed, epoch);
}

// Transforms draw from a generator of (seed, epoch, batch) alone, so prefetching, or
// not, gives the same batches.
Batch DataLoader::make_batch(int64_t b, const std::vector<int64_t>& order) const {
  Generator gen(opt_.seed * 7919u + static_cast<uint64_t>(epoch_) + 1);
  gen.set_offset(static_cast<uint64_t>(b) << 32);
  const int64_t start = b * opt_.batch_size;
  const int64_t n = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(order.size()) - start);
  const Tensor ids = order_on_device_.defined()
                        ? order_on_device_.narrow(0, start, n)
                        : tensor(std::vector<double>(order.begin() + start, order.begin() + start + n),
                                 {kInt64, dataset_.data().device()});
  Batch batch = dataset_.get(ids);
  for (const Transform& t : opt_.transforms) batch.data = t(batch.data, gen);
  if (opt_.pin_memory) batch = {batch.data.pin_memory(), batch.target.pin_memory()};
  return batch;
}

void DataLoader::stop_worker() {
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

void DataLoader::start_epoch(int64_t epoch) {
  stop_worker();
  epoch_ = epoch;
  order_ = order(epoch);
  order_on_device_ = dataset_.data().device().is_cuda()
                         ? tensor(std::vector<double>(order_.begin(), order_.end()), {kInt64, dataset_.data().device()})
                         : Tensor();
  next_batch_ = 0;
  produced_ = 0;
  started_ = true;
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
        Batch batch = make_batch(b, order_);
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

std::optional<Batch> DataLoader::next() {
  EMBER_CHECK(started_, "DataLoader::next: call start_epoch() first");
  if (next_batch_ >= batches_per_epoch()) return std::nullopt;
  if (opt_.prefetch == 0) {
    NoGradGuard no_grad;
    return make_batch(next_batch_++, order_);
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  ++next_batch_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

TensorDataset load_fashion_mnist(const std::string& dir, bool train, const ImageSetShape& expect) {
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const std::string& name : {stem + ".gz", stem}) {
      const std::string p = (std::filesystem::path(dir) / name).string();
      std::error_code ec;  // the throwing overload's filesystem_error would escape as a crash
      const bool found = std::filesystem::exists(p, ec);
      EMBER_CHECK(!ec, "load_fashion_mnist: cannot look for ", name, " in '", dir, "': ", ec.message());
      if (found) return p;
    }
    EMBER_FAIL("load_fashion_mnist: neither ", stem, ".gz nor ", stem, " is in '", dir,
               "' (Debian's dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist)");
  };
  const std::string images_path = find(prefix + "-images-idx3-ubyte");
  const std::string labels_path = find(prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(images_path);
  EMBER_CHECK(images.dim() == 3, "load_fashion_mnist: '", images_path, "' has dims ", shape_str(images.shape()),
              ", expected [N, rows, cols]");
  EMBER_CHECK((expect.rows == 0 || images.size(1) == expect.rows) && (expect.cols == 0 || images.size(2) == expect.cols),
              "load_fashion_mnist: '", images_path, "' holds images of ", images.size(1), " x ", images.size(2),
              " pixels, expected ", expect.rows, " x ", expect.cols, " (its header's dims are ",
              shape_str(images.shape()), ")");
  Tensor labels = read_idx(labels_path);
  EMBER_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), "load_fashion_mnist: '", labels_path, "' has ",
              labels.numel(), " labels for ", images.size(0), " images");
  if (expect.classes > 0) {
    const auto* l = static_cast<const uint8_t*>(labels.data_ptr());  // read_idx's: contiguous, on the CPU
    for (int64_t i = 0; i < labels.numel(); ++i)
      EMBER_CHECK(l[i] < expect.classes, "load_fashion_mnist: '", labels_path, "': label ", int(l[i]), " of image ",
                  i, " is not one of the ", expect.classes, " classes (0 to ", expect.classes - 1, ")");
  }
  const int64_t N = images.size(0);
  Tensor x = div(images.to(kFloat32), Scalar(255.0)).view({N, 1, images.size(1), images.size(2)});
  return {x, labels.to(kInt64)};
}

}  // namespace ember::data
