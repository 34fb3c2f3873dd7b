// IDX files (round trips, every kind of damage named with the file), load_fashion_mnist on
// a generated folder, the DataLoader's batching, shuffling and prefetching, and the batch
// transforms against hand computations.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "tests/core/reference.h"
#include "tests/core/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using namespace ember::data;  // NOLINT

class TempDir : public TempDirTest {
 protected:
  // read_idx must fail naming the file and `what`.
  void expect_idx_error(const std::string& p, const std::string& what) {
    const std::string msg = error_message([&] { read_idx(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << "the message should name the file: " << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "want '" << what << "' in: " << msg;
  }
};

// Bytes 0..n-1 mod 251 as a uint8 tensor of `shape`.
Tensor bytes_tensor(const Shape& shape, int64_t salt = 0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + salt) % 251);
  return tensor(v, shape, kUInt8);
}
std::string idx_header(unsigned char type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
  return h;
}

using Idx = TempDir;

TEST_F(Idx, RoundTripPlainAndGzip) {
  for (const Shape& shape : {Shape{7}, Shape{3, 5, 4}, Shape{2, 3, 2, 2}, Shape{0, 28, 28}}) {
    for (bool gz : {false, true}) {
      SCOPED_TRACE(shape_str(shape) + (gz ? " gzip" : " plain"));
      const std::string p = path(gz ? "t.idx.gz" : "t.idx");
      Tensor t = bytes_tensor(shape, 3);
      write_idx(p, t, gz);
      const std::string bytes = read(p);
      if (gz) {
        ASSERT_GE(bytes.size(), 2u);
        EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f);
        EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b);
      } else {
        std::vector<uint32_t> dims(shape.begin(), shape.end());
        EXPECT_EQ(bytes.size(), 4 + 4 * shape.size() + static_cast<size_t>(t.numel()));
        EXPECT_EQ(bytes.substr(0, 4 + 4 * shape.size()), idx_header(0x08, dims));  // big-endian dims
      }
      Tensor back = read_idx(p);
      EXPECT_DTYPE(back, kUInt8);
      EXPECT_EQ(back.shape(), shape);
      EXPECT_EQ(values(back), values(t));
    }
  }
  int64_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 2) << "write_idx left a temporary file";
  EXPECT_EMBER_ERROR(write_idx(path("f.idx"), ones({2}), false), "write_idx", "uint8");
}

TEST_F(Idx, DamagedFilesNameTheFile) {
  const std::string body(6, '\x05');
  write(path("magic.idx"), std::string("\x01\x00\x08\x01", 4) + std::string("\x00\x00\x00\x06", 4) + body);
  expect_idx_error(path("magic.idx"), "magic");
  write(path("type.idx"), idx_header(0x0D, {6}) + std::string(24, '\0'));  // 0x0D: float
  expect_idx_error(path("type.idx"), "type");
  write(path("trunc.idx"), idx_header(0x08, {2, 5}) + std::string(7, '\x01'));
  expect_idx_error(path("trunc.idx"), "truncated");
  write(path("trail.idx"), idx_header(0x08, {2, 5}) + std::string(11, '\x01'));
  expect_idx_error(path("trail.idx"), "beyond");
  write(path("short.idx"), std::string("\x00\x00", 2));
  expect_idx_error(path("short.idx"), "short");
  write(path("hdr.idx"), idx_header(0x08, {2, 5}).substr(0, 9));
  expect_idx_error(path("hdr.idx"), "header");
  write(path("dims.idx"), idx_header(0x08, {}));
  expect_idx_error(path("dims.idx"), "dims");
  expect_idx_error(path("missing.idx"), "cannot open");
  // A gzip file cut short.
  write_idx(path("cut.idx.gz"), bytes_tensor({40, 28, 28}), true);
  std::string gz = read(path("cut.idx.gz"));
  write(path("cut.idx.gz"), gz.substr(0, gz.size() / 2));
  expect_idx_error(path("cut.idx.gz"), "truncated");
}

// read_idx_bytes is read_idx without the file; a header that promises more data than the
// bytes hold fails before allocating it (60000 x 60000 here).
TEST(IdxBytes, InMemoryAndLyingHeaders) {
  const std::string labels = std::string("\x00\x00\x08\x01\x00\x00\x00\x03", 8) + "\x01\x02\x03";
  EXPECT_EQ(read_idx_bytes(labels, "labels").shape(), (Shape{3}));
  const std::string huge = std::string("\x00\x00\x08\x02\x00\x00\xea\x60\x00\x00\xea\x60", 12);
  try {
    read_idx_bytes(huge, "huge");
    ADD_FAILURE() << "accepted a header with no data";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'huge' is truncated"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_idx_bytes(std::string("\x1f\x8b\x08\x00garbage", 11), "gz"), Error);
  // Found by fuzz_idx: a zero dim kept the element count at 0 while the other dims'
  // strides overflowed int64 (dims 0 x 0xfa0201ff x 0x140000ff x 0xff000000).
  const std::string zero_dim = std::string("\x00\x00\x08\x04\x00\x00\x00\x00\xfa\x02\x01\xff"
                                           "\x14\x00\x00\xff\xff\x00\x00\x00", 20);
  EXPECT_THROW(read_idx_bytes(zero_dim, "zero dim"), Error);
  // Also found by fuzz_idx: the product of the dims wrapped past 2^64 to 0 before it was
  // checked (dims 0x8000 x 0x40000 x 0x80000000 x 0).
  const std::string wraps = std::string("\x00\x00\x08\x04\x00\x00\x80\x00\x00\x04\x00\x00"
                                        "\x80\x00\x00\x00\x00\x00\x00\x00", 20);
  try {
    read_idx_bytes(wraps, "wraps");
    ADD_FAILURE() << "accepted dims whose product wraps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("implausible size"), std::string::npos) << e.what();
  }
}

// A Fashion-MNIST-like folder: n images of 28x28 with bytes (i * 7 + k) % 251, labels i % 10.
void write_fake_mnist(const std::string& dir, const std::string& prefix, int64_t n, int64_t labels, bool gz) {
  const std::string ext = gz ? ".gz" : "";
  write_idx(dir + "/" + prefix + "-images-idx3-ubyte" + ext, bytes_tensor({n, 28, 28}, 0), gz);
  std::vector<double> l;
  for (int64_t i = 0; i < labels; ++i) l.push_back(static_cast<double>(i % 10));
  write_idx(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, tensor(l, kUInt8), gz);
}

using FashionMnist = TempDir;

TEST_F(FashionMnist, LoadsGeneratedFolder) {
  write_fake_mnist(dir_.string(), "train", 50, 50, true);
  write_fake_mnist(dir_.string(), "t10k", 20, 20, false);  // plain files are found too
  TensorDataset train = load_fashion_mnist(dir_.string(), true);
  EXPECT_EQ(train.size(), 50);
  EXPECT_DTYPE(train.data(), kFloat32);
  EXPECT_EQ(train.data().shape(), (Shape{50, 1, 28, 28}));
  EXPECT_DTYPE(train.targets(), kInt64);
  std::vector<double> want = values(bytes_tensor({50, 28, 28}, 0));
  for (double& v : want) v /= 255.0;
  EXPECT_CLOSE(train.data(), want, (Shape{50, 1, 28, 28}), 1e-6, 0);
  const std::vector<double> x = values(train.data());
  EXPECT_GE(*std::min_element(x.begin(), x.end()), 0.0);
  EXPECT_LE(*std::max_element(x.begin(), x.end()), 1.0);
  std::vector<int64_t> labels = train.targets().to_vector<int64_t>();
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(labels[i], i % 10);
  TensorDataset test = load_fashion_mnist(dir_.string(), false);
  EXPECT_EQ(test.data().shape(), (Shape{20, 1, 28, 28}));
  EXPECT_EQ(test.head(5).size(), 5);
}

TEST_F(FashionMnist, Errors) {
  write_fake_mnist(dir_.string(), "train", 50, 49, true);
  EXPECT_EMBER_ERROR(load_fashion_mnist(dir_.string(), true), "train-labels-idx1-ubyte", "49", "50");
  const std::string dir = dir_.string();
  EXPECT_EMBER_ERROR(load_fashion_mnist(dir, false), "t10k-images-idx3-ubyte", dir.c_str());
  write_idx(path("t10k-images-idx3-ubyte"), bytes_tensor({4, 28}), false);
  write_idx(path("t10k-labels-idx1-ubyte"), bytes_tensor({4}), false);
  EXPECT_EMBER_ERROR(load_fashion_mnist(dir_.string(), false), "t10k-images-idx3-ubyte", "[4, 28]");
}

// The header's dims against the images the model expects: a file declaring 14 x 56
// images (784 bytes each, as 28 x 28) trained both examples without a word.
TEST_F(FashionMnist, ImagesOfAnotherSizeAreRefusedNamingTheFile) {
  write_fake_mnist(dir_.string(), "train", 50, 50, false);
  const std::string images = path("train-images-idx3-ubyte");
  write_idx(images, bytes_tensor({50, 14, 56}), false);
  EXPECT_EMBER_ERROR(load_fashion_mnist(dir_.string(), true), images.c_str(),
                     "holds images of 14 x 56 pixels, expected 28 x 28");
  // What the caller asks for instead, and 0 for any size.
  EXPECT_EQ(load_fashion_mnist(dir_.string(), true, {.rows = 14, .cols = 56}).data().shape(), (Shape{50, 1, 14, 56}));
  EXPECT_EQ(load_fashion_mnist(dir_.string(), true, {.rows = 0, .cols = 0}).size(), 50);
}

// Labels against the class count, test labels too (they were never checked).
TEST_F(FashionMnist, LabelsOutsideTheClassesAreRefusedNamingTheFileAndTheImage) {
  write_fake_mnist(dir_.string(), "t10k", 20, 20, false);
  std::vector<double> l(20, 3.0);
  l[13] = 12;
  const std::string labels = path("t10k-labels-idx1-ubyte");
  write_idx(labels, tensor(l, kUInt8), false);
  EXPECT_EMBER_ERROR(load_fashion_mnist(dir_.string(), false), labels.c_str(),
                     "label 12 of image 13 is not one of the 10 classes (0 to 9)");
  EXPECT_EQ(load_fashion_mnist(dir_.string(), false, {.classes = 13}).size(), 20);
}

// A folder that cannot be searched, and a symlink loop, were filesystem_errors that ended
// the program (exit 134).
TEST_F(FashionMnist, AFolderThatCannotBeSearchedOrALoopIsAnError) {
  fs::create_symlink("loop-b", dir_ / "loop-a");
  fs::create_symlink("loop-a", dir_ / "loop-b");
  const std::string loop = path("loop-a");
  EXPECT_EMBER_ERROR(load_fashion_mnist(loop, true), "load_fashion_mnist: cannot look for", loop.c_str(),
                     "Too many levels of symbolic links");
  fs::create_directory(dir_ / "locked");
  write_fake_mnist(path("locked"), "train", 5, 5, false);
  ::chmod(path("locked").c_str(), 0);
  // Root reads any folder: it drops to nobody's rights for the load (effective uid only).
  const bool root = ::geteuid() == 0;
  if (root) ASSERT_EQ(::seteuid(65534), 0);
  const std::string msg = error_message([&] { load_fashion_mnist(path("locked"), true); });
  if (root) ASSERT_EQ(::seteuid(0), 0);
  ::chmod(path("locked").c_str(), 0755);
  EXPECT_NE(msg.find("load_fashion_mnist: cannot look for train-images-idx3-ubyte.gz in '" + path("locked") +
                     "': Permission denied"),
            std::string::npos)
      << msg;
}

// ----- DataLoader -----

// n samples: data[i] = [i, i, i] (float32), target i.
TensorDataset numbered(int64_t n) {
  std::vector<double> d, t;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k) d.push_back(static_cast<double>(i));
    t.push_back(static_cast<double>(i));
  }
  return {tensor(d, {n, 3}), tensor(t, kInt64)};
}
// One epoch's batches.
std::vector<Batch> epoch(DataLoader& dl, int64_t e) {
  dl.start_epoch(e);
  std::vector<Batch> out;
  while (auto b = dl.next()) out.push_back(*b);
  return out;
}
std::vector<int64_t> targets(const std::vector<Batch>& bs) {
  std::vector<int64_t> out;
  for (const Batch& b : bs)
    for (int64_t t : b.target.to_vector<int64_t>()) out.push_back(t);
  return out;
}

TEST(DataLoader, BatchSizesAndDropLast) {
  DataLoader dl(numbered(10), {.batch_size = 4});
  EXPECT_EQ(dl.batches_per_epoch(), 3);
  EXPECT_EQ(dl.dataset_size(), 10);
  auto bs = epoch(dl, 0);
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].data.shape(), (Shape{4, 3}));
  EXPECT_EQ(bs[2].data.shape(), (Shape{2, 3}));
  EXPECT_FALSE(dl.next().has_value());  // stays done
  DataLoader dd(numbered(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dd.batches_per_epoch(), 2);
  auto bd = epoch(dd, 0);
  ASSERT_EQ(bd.size(), 2u);
  for (const Batch& b : bd) EXPECT_EQ(b.target.numel(), 4);
  EXPECT_EMBER_ERROR(DataLoader(numbered(3), {.batch_size = 0}), "batch_size");
  EXPECT_EMBER_ERROR(DataLoader(numbered(3), {.prefetch = -2}), "prefetch");
}

TEST(DataLoader, EachSampleOncePerEpochInOrder) {
  DataLoader dl(numbered(100), {.batch_size = 7, .seed = 5});
  for (int64_t e = 0; e < 3; ++e) {
    auto bs = epoch(dl, e);
    std::vector<int64_t> got = targets(bs), sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(sorted[i], i) << "epoch " << e;
    EXPECT_EQ(got, dl.order(e)) << "order() must be the yielded order";
    for (const Batch& b : bs)  // data rows travel with their targets
      EXPECT_EQ(values(b.data.select(1, 0)), values(b.target.to(kFloat64)));
  }
  EXPECT_NE(dl.order(0), dl.order(1));
  DataLoader same(numbered(100), {.batch_size = 9, .seed = 5});
  EXPECT_EQ(targets(epoch(same, 1)), dl.order(1));  // seed and epoch decide, not batch size
  DataLoader other(numbered(100), {.batch_size = 7, .seed = 6});
  EXPECT_NE(other.order(1), dl.order(1));
  DataLoader plain(numbered(10), {.batch_size = 3, .shuffle = false});
  EXPECT_EQ(targets(epoch(plain, 4)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(DataLoader, RestartMidEpoch) {
  DataLoader dl(numbered(20), {.batch_size = 4, .seed = 1});
  dl.start_epoch(0);
  ASSERT_TRUE(dl.next().has_value());
  EXPECT_EQ(targets(epoch(dl, 1)), dl.order(1));
}

// Images 1..16 per plane, so that zeros can only come from padding.
TensorDataset images(int64_t n) {
  std::vector<double> d, t;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 16; ++k) d.push_back(static_cast<double>(k + 1 + 16 * (i % 5)));
    t.push_back(static_cast<double>(i));
  }
  return {tensor(d, {n, 1, 4, 4}), tensor(t, kInt64)};
}

TEST(DataLoader, PrefetchDoesNotChangeBatches) {
  for (bool random : {false, true}) {
    SCOPED_TRACE(random ? "random transforms" : "no transforms");
    std::vector<Transform> tr;
    if (random) tr = {random_crop(4, 1), random_horizontal_flip(0.5)};
    DataLoader a(images(40), {.batch_size = 6, .seed = 3, .prefetch = 0, .transforms = tr});
    DataLoader b(images(40), {.batch_size = 6, .seed = 3, .prefetch = 2, .transforms = tr});
    for (int64_t e = 0; e < 2; ++e) {
      auto ba = epoch(a, e), bb = epoch(b, e);
      ASSERT_EQ(ba.size(), bb.size());
      std::vector<size_t> differ;
      for (size_t k = 0; k < ba.size(); ++k) {
        EXPECT_EQ(values(ba[k].target), values(bb[k].target)) << "epoch " << e << " batch " << k;
        if (values(ba[k].data) != values(bb[k].data)) differ.push_back(k);
      }
      EXPECT_TRUE(differ.empty()) << "epoch " << e << ": " << differ.size() << " of " << ba.size()
                                  << " batches differ between prefetch 0 and 2, the first is batch "
                                  << (differ.empty() ? 0 : differ[0]);
      auto again = epoch(b, e);  // and an epoch replays exactly
      for (size_t k = 0; k < again.size(); ++k) EXPECT_EQ(values(again[k].data), values(bb[k].data));
    }
  }
}

// A dataset on a GPU takes each batch's indices from the epoch's order, copied there once:
// the batches are the CPU's, and a batch waits for no copy from the host.
TEST(DataLoader, ADatasetOnACudaDeviceGivesTheCpusBatches) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)";
  const TensorDataset host = images(40);
  const TensorDataset device(host.data().to(Device::cuda()), host.targets().to(Device::cuda()));
  for (int prefetch : {0, 2}) {
    DataLoader a(host, {.batch_size = 6, .seed = 3, .prefetch = prefetch});
    DataLoader b(device, {.batch_size = 6, .seed = 3, .prefetch = prefetch});
    for (int64_t e = 0; e < 2; ++e) {
      auto ba = epoch(a, e), bb = epoch(b, e);
      ASSERT_EQ(ba.size(), bb.size());
      for (size_t k = 0; k < ba.size(); ++k) {
        EXPECT_TRUE(bb[k].data.device().is_cuda());
        EXPECT_EQ(values(ba[k].data), values(bb[k].data)) << "epoch " << e << " batch " << k;
        EXPECT_EQ(values(ba[k].target), values(bb[k].target)) << "epoch " << e << " batch " << k;
      }
    }
  }
}

TEST(DataLoader, TransformErrorsReachTheCaller) {
  Transform bad = [](const Tensor& x, Generator&) -> Tensor { EMBER_FAIL("bad transform"); };
  for (int prefetch : {0, 2}) {
    DataLoader dl(numbered(10), {.batch_size = 4, .prefetch = prefetch, .transforms = {bad}});
    dl.start_epoch(0);
    EXPECT_EMBER_ERROR(dl.next(), "bad transform");
  }
}

// ----- transforms -----

TEST(Transforms, Normalize) {
  Tensor x = random_tensor({2, 3, 2, 2}, kFloat32);
  Generator g;
  Tensor y = normalize({0.1, 0.2, 0.3}, {0.5, 1, 2})(x, g);
  std::vector<double> xv = values(x), want(xv.size());
  const double m[] = {0.1, 0.2, 0.3}, s[] = {0.5, 1, 2};
  for (size_t i = 0; i < xv.size(); ++i) want[i] = (xv[i] - m[(i / 4) % 3]) / s[(i / 4) % 3];
  EXPECT_CLOSE(y, want, x.shape(), 1e-6, 1e-6);
  EXPECT_EMBER_ERROR(normalize({0.1}, {0.5})(x, g), "normalize", "1 channels");
  EXPECT_EMBER_ERROR(normalize({0.1}, {0.0}), "std");
}

TEST(Transforms, RandomCropIsAShiftedWindow) {
  const int64_t B = 64, pad = 2;
  Tensor x = images(B).data();
  Generator g(11);
  Tensor y = random_crop(4, pad)(x, g);
  EXPECT_EQ(y.shape(), x.shape());
  std::set<std::pair<int64_t, int64_t>> offsets;
  const std::vector<double> xv = values(x), yv = values(y);
  for (int64_t b = 0; b < B; ++b) {
    bool found = false;
    for (int64_t di = -pad; di <= pad && !found; ++di)
      for (int64_t dj = -pad; dj <= pad && !found; ++dj) {
        bool ok = true;
        for (int64_t i = 0; i < 4 && ok; ++i)
          for (int64_t j = 0; j < 4 && ok; ++j) {
            const int64_t si = i + di, sj = j + dj;
            const double want = (si >= 0 && si < 4 && sj >= 0 && sj < 4) ? xv[b * 16 + si * 4 + sj] : 0.0;
            ok = yv[b * 16 + i * 4 + j] == want;
          }
        if (ok) offsets.insert({di, dj}), found = true;
      }
    EXPECT_TRUE(found) << "sample " << b << " is not a zero-padded window of its image";
  }
  EXPECT_GT(offsets.size(), 5u) << "crops should land at many offsets";
  Tensor same = random_crop(4, 0)(x, g);  // no room to move
  EXPECT_EQ(values(same), xv);
  EXPECT_EMBER_ERROR(random_crop(9, 2)(x, g), "random_crop", "9");
}

TEST(Transforms, HorizontalFlip) {
  Tensor x = images(50).data();
  Generator g(2);
  const std::vector<double> xv = values(x);
  std::vector<double> mirrored(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) mirrored[i] = xv[(i / 4) * 4 + 3 - i % 4];
  EXPECT_EQ(values(random_horizontal_flip(1.0)(x, g)), mirrored);
  EXPECT_EQ(values(random_horizontal_flip(0.0)(x, g)), xv);
  const std::vector<double> half = values(random_horizontal_flip(0.5)(x, g));
  int flipped = 0;
  for (int64_t b = 0; b < 50; ++b) {
    auto first = half.begin() + b * 16;
    const bool same = std::equal(first, first + 16, xv.begin() + b * 16);
    const bool mirror = std::equal(first, first + 16, mirrored.begin() + b * 16);
    EXPECT_TRUE(same || mirror) << "sample " << b;
    flipped += mirror;
  }
  EXPECT_GT(flipped, 10);
  EXPECT_LT(flipped, 40);
}

TEST(Transforms, ResizeBilinear) {
  Generator g;
  Tensor x = random_tensor({2, 3, 5, 4}, kFloat32);
  EXPECT_EQ(values(resize(5, 4)(x, g)), values(x));  // same size: identity
  Tensor c = full({1, 2, 8, 6}, 0.7);
  EXPECT_CLOSE(resize(4, 3)(c, g), std::vector<double>(24, 0.7f), (Shape{1, 2, 4, 3}), 1e-6, 0);
  // align_corners=false: src = (i + 0.5) in / out - 0.5, clamped at 0 (PyTorch's F.interpolate).
  Tensor sq = tensor({0, 1, 2, 3}, {1, 1, 2, 2});
  EXPECT_CLOSE(resize(4, 4)(sq, g),
               (std::vector<double>{0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3}),
               (Shape{1, 1, 4, 4}), 1e-6, 1e-7);
  Tensor ramp = tensor({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {1, 1, 3, 4});
  // W 4 -> 2: src 0.5, 2.5; H 3 -> 2: src 0.25, 1.75.
  EXPECT_CLOSE(resize(2, 2)(ramp, g), (std::vector<double>{3, 5, 18, 20}), (Shape{1, 1, 2, 2}), 1e-6, 1e-6);
  EXPECT_EMBER_ERROR(resize(0, 3), "resize");
}

}  // namespace
}  // namespace ember::test
