#include "data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"
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

Batch default_collate(std::vector<Example> samples) {
  EMBER_CHECK(!samples.empty(), "default_collate: no samples");
  std::vector<Tensor> data, targets;
  const bool with_targets = samples[0].target.defined();
  for (size_t i = 0; i < samples.size(); ++i) {
    EMBER_CHECK(samples[i].data.defined(), "default_collate: sample ", i, " has no data");
    EMBER_CHECK(samples[i].target.defined() == with_targets, "default_collate: sample ", i,
                with_targets ? " has no target but sample 0 has one" : " has a target but sample 0 has none");
    data.push_back(std::move(samples[i].data));
    if (with_targets) targets.push_back(std::move(samples[i].target));
  }
  return {stack(data), with_targets ? stack(targets) : Tensor()};
}

// ----- the DataLoader's TensorDataset batches -----

namespace internal {
namespace {

class TensorBatches final : public BatchSource {
 public:
  TensorBatches(TensorDataset dataset, const DataLoaderOptions& o)
      : dataset_(std::move(dataset)), transforms_(o.transforms), pin_memory_(o.pin_memory) {}
  int64_t size() const override { return dataset_.size(); }
  // The order on the dataset's device, when that is a GPU: each batch's indices are a
  // view of it, so a batch costs no copy from the host (whose wait for the device would
  // stall the step that the host should be queuing meanwhile).
  void start_epoch(const std::vector<int64_t>& order) override {
    order_on_device_ = dataset_.data().device().is_cuda()
                           ? tensor(std::vector<double>(order.begin(), order.end()), {kInt64, dataset_.data().device()})
                           : Tensor();
  }
  std::any make(const std::vector<int64_t>& order, int64_t start, int64_t n, Generator& gen) const override {
    const Tensor ids = order_on_device_.defined()
                           ? order_on_device_.narrow(0, start, n)
                           : tensor(std::vector<double>(order.begin() + start, order.begin() + start + n),
                                    {kInt64, dataset_.data().device()});
    Batch batch = dataset_.get(ids);
    for (const Transform& t : transforms_) batch.data = t(batch.data, gen);
    if (pin_memory_) batch = {batch.data.pin_memory(), batch.target.pin_memory()};
    return batch;
  }

 private:
  TensorDataset dataset_;
  std::vector<Transform> transforms_;
  bool pin_memory_;
  Tensor order_on_device_;
};

}  // namespace

std::unique_ptr<BatchSource> tensor_batches(TensorDataset dataset, const DataLoaderOptions& options) {
  return std::make_unique<TensorBatches>(std::move(dataset), options);
}

}  // namespace internal

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
