// DevicePrefetcher (data/prefetch.h) on a CUDA device (the emulated one in CI; skipped
// without one): the loader's batches, in order and with their contents; the compute
// stream's use of a batch ordered after its copy on the prefetcher's stream (the event
// wait); and a batch's memory kept from the next copies while the compute stream still
// reads it (record_stream). The emulated device runs each stream asynchronously on a
// worker of its own, so either mistake gives a wrong batch when one stream lags far
// behind the other, as each test here arranges.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "core/device.h"
#include "data/dataset.h"
#include "data/prefetch.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

using namespace ember::data;  // NOLINT

#define NEED_CUDA(n)                        \
  if (cuda_device_count() < (n))            \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s) (EMBER_CUDA=EMULATED gives them; its data tests have 2)"

// n samples of 2 x 3 floats, sample i all i + 0.5, with target i: every batch differs.
TensorDataset samples(int64_t n) {
  std::vector<double> d, t;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 6; ++k) d.push_back(static_cast<double>(i) + 0.5);
    t.push_back(static_cast<double>(i));
  }
  return {tensor(d, {n, 2, 3}), tensor(t, kInt64)};
}

// Queues work that keeps `device`'s current stream busy far longer than the host takes
// to queue the test's next steps (on the emulated device on a Zen 4 core, 30 ms against
// 0.1 ms to queue it).
void keep_busy(Device device) {
  Tensor x = ones({1 << 20}, {kFloat32, device});
  for (int i = 0; i < 8; ++i) x = mul(x, Scalar(1.0));
}

TEST(DevicePrefetcher, GivesTheLoadersBatchesInOrder) {
  NEED_CUDA(1);
  const TensorDataset host = samples(30);  // 3 batches of 8 and one of 6
  for (bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "pinned" : "pageable");
    DataLoader reference(host, {.batch_size = 8, .seed = 4, .prefetch = 0});
    DataLoader loader(host, {.batch_size = 8, .seed = 4, .pin_memory = pinned});
    DevicePrefetcher batches(loader, Device::cuda());
    for (int64_t e = 0; e < 2; ++e) {
      reference.start_epoch(e);
      batches.start_epoch(e);
      int64_t k = 0;
      while (std::optional<Batch> b = batches.next()) {
        const std::optional<Batch> want = reference.next();
        ASSERT_TRUE(want.has_value()) << "epoch " << e << ": more batches than the loader's";
        EXPECT_EQ(b->data.device(), Device::cuda());
        EXPECT_EQ(values(b->data), values(want->data)) << "epoch " << e << " batch " << k;
        EXPECT_EQ(values(b->target), values(want->target)) << "epoch " << e << " batch " << k;
        ++k;
      }
      EXPECT_EQ(k, 4) << "epoch " << e;
      EXPECT_FALSE(batches.next().has_value()) << "stays done";
    }
  }
}

// Batches from a dataset on cuda:1: each one's copy to cuda:0, on the prefetcher's stream,
// waits for cuda:1's queued work (its gather, after a long wait here), while cuda:0's
// compute stream is idle. Reading a batch must still wait for its copy.
TEST(DevicePrefetcher, TheComputeStreamReadsABatchAfterItsCopy) {
  NEED_CUDA(2);
  const TensorDataset host = samples(32);
  const TensorDataset on_1(host.data().to(Device::cuda(1)), host.targets().to(Device::cuda(1)));
  DataLoader reference(host, {.batch_size = 8, .seed = 4, .prefetch = 0});
  // prefetch 0: each batch is gathered on this thread's stream of cuda:1, behind keep_busy.
  DataLoader loader(on_1, {.batch_size = 8, .seed = 4, .prefetch = 0});
  DevicePrefetcher batches(loader, Device::cuda(0));
  reference.start_epoch(0);
  keep_busy(Device::cuda(1));
  batches.start_epoch(0);
  for (int k = 0; k < 4; ++k) {
    keep_busy(Device::cuda(1));  // the next batch's copy waits behind this
    const std::optional<Batch> b = batches.next();
    const std::optional<Batch> want = reference.next();
    ASSERT_TRUE(b.has_value() && want.has_value());
    EXPECT_EQ(values(b->data), values(want->data)) << "batch " << k;
    EXPECT_EQ(values(b->target), values(want->target)) << "batch " << k;
  }
}

// The host drops each batch as soon as it has queued the compute stream's read of it,
// behind a long wait; the copy stream meanwhile copies the next batches, and must not
// copy them into that batch's memory.
TEST(DevicePrefetcher, ABatchIsNotReusedWhileTheComputeStreamReadsIt) {
  NEED_CUDA(1);
  const TensorDataset host = samples(48);
  DataLoader reference(host, {.batch_size = 8, .seed = 4, .prefetch = 0});
  DataLoader loader(host, {.batch_size = 8, .seed = 4});
  DevicePrefetcher batches(loader, Device::cuda());
  reference.start_epoch(0);
  batches.start_epoch(0);
  std::vector<Tensor> read;  // what the compute stream read of each batch
  std::vector<Batch> want;
  while (std::optional<Batch> b = batches.next()) {
    keep_busy(Device::cuda());
    read.push_back(cat({b->data.flatten(), b->target.to(kFloat32)}));
    want.push_back(*reference.next());
  }
  ASSERT_EQ(read.size(), 6u);
  for (size_t k = 0; k < read.size(); ++k) {
    std::vector<double> expected = values(want[k].data);
    for (double t : values(want[k].target)) expected.push_back(t);
    EXPECT_EQ(values(read[k]), expected) << "batch " << k;
  }
}

}  // namespace
}  // namespace ember::test
