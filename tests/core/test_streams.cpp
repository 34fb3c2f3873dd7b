// CUDA devices, streams, events and copies (core/stream.h, Tensor::to, pin_memory,
// record_stream), and the errors of using devices wrongly. They need a CUDA device: in CI
// the emulated one, whose streams really are asynchronous (each runs on a worker thread),
// so a read that does not wait for a stream's work gets a wrong value, not a lucky one.
// Without a device they skip, except the error tests, which hold everywhere.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "reference.h"
#include "ember.h"

namespace ember {
namespace {

using test::error_message;

#define NEED_CUDA(n)                                                                               \
  do {                                                                                             \
    if (cuda_device_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s) (emulated: EMBER_CUDA=EMULATED)"; \
  } while (0)

std::vector<double> ramp(int64_t n, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<double>(i % 1000) - 3.0;
  return v;
}

TEST(Copies, RoundTripEveryDtypeAndLayout) {
  NEED_CUDA(1);
  for (DType t : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    const Tensor host = tensor(ramp(6 * 35), {6, 35}, {t, Device::cpu()});
    const Tensor dev = host.to(Device::cuda());
    EXPECT_EQ(dev.device(), Device::cuda());
    EXPECT_EQ(dev.dtype(), t);
    EXPECT_EQ(test::values(dev), test::values(host)) << dtype_name(t);
    // A strided view goes over as its values, contiguous on the other side.
    const Tensor view = host.t().narrow(0, 3, 20);
    EXPECT_EQ(test::values(view.to(Device::cuda())), test::values(view)) << dtype_name(t);
    EXPECT_EQ(test::values(dev.t().narrow(0, 3, 20).to(Device::cpu())), test::values(view)) << dtype_name(t);
  }
  const Tensor none = empty({0, 5}, {kFloat32, Device::cpu()}).to(Device::cuda());
  EXPECT_EQ(none.shape(), (Shape{0, 5}));
  EXPECT_TRUE(none.to(Device::cpu()).to_vector<float>().empty());
}

TEST(Copies, AReadWaitsForTheWorkQueuedBeforeIt) {
  NEED_CUDA(1);
  // Queued on the compute stream, which runs on its own thread: to_vector must wait for it.
  Tensor x = empty({1 << 20}, {kFloat32, Device::cuda()});
  for (int i = 0; i < 8; ++i) x.fill_(static_cast<double>(i));
  const std::vector<float> v = x.to_vector<float>();
  EXPECT_EQ(v.front(), 7.0f);
  EXPECT_EQ(v.back(), 7.0f);
}

TEST(Copies, NonBlockingFromPinnedMemory) {
  NEED_CUDA(1);
  const Tensor pageable = tensor(ramp(4096, 0.5), {4096}, {kFloat32, Device::cpu()});
  EXPECT_FALSE(pageable.is_pinned());
  const Tensor pinned = pageable.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_TRUE(pinned.pin_memory().shares_storage_with(pinned)) << "pinning a pinned tensor copies nothing";
  EXPECT_EQ(pinned.to_vector<float>(), pageable.to_vector<float>());
  const Tensor dev = pinned.to(Device::cuda(), /*non_blocking=*/true);
  // Later work on the stream sees the data; the host sees it through a synchronizing copy.
  EXPECT_EQ(dev.to(Device::cpu()).to_vector<float>(), pageable.to_vector<float>());
  // And back: non-blocking into pinned memory is complete once the stream is.
  const Tensor back = dev.to(Device::cpu(), /*non_blocking=*/true);
  Stream::current(Device::cuda()).synchronize();
  EXPECT_EQ(back.to_vector<float>(), pageable.to_vector<float>());
}

// From pageable memory a non-blocking copy is a plain one: CUDA stages the source before
// the call returns, so there is no stream to keep its memory for.
TEST(Copies, NonBlockingFromPageableMemory) {
  NEED_CUDA(1);
  const Tensor pageable = tensor(ramp(4096, 0.5), {4096}, {kFloat32, Device::cpu()});
  const Tensor dev = pageable.to(Device::cuda(), /*non_blocking=*/true);
  EXPECT_EQ(dev.to_vector<float>(), pageable.to_vector<float>());
}

TEST(Streams, CurrentComputeAndGuard) {
  NEED_CUDA(1);
  const Device cuda = Device::cuda();
  const Stream compute = Stream::compute(cuda);
  EXPECT_EQ(Stream::current(cuda), compute);
  EXPECT_NE(compute.id(), 0u);
  const Stream side = Stream::create(cuda);
  EXPECT_FALSE(side == compute);
  {
    StreamGuard on(side);
    EXPECT_EQ(Stream::current(cuda), side);
  }
  EXPECT_EQ(Stream::current(cuda), compute);
  EXPECT_EQ(Stream::current(Device::cpu()).id(), 0u);
  EXPECT_TRUE(Stream::current(Device::cpu()).query());
}

TEST(Streams, WorkOnASideStreamIsOrderedByWait) {
  NEED_CUDA(1);
  const Device cuda = Device::cuda();
  const Stream side = Stream::create(cuda);
  Tensor x = empty({1 << 18}, {kFloat32, cuda});
  x.fill_(1.0);
  Stream::current(cuda).synchronize();
  {
    StreamGuard on(side);
    side.wait(Stream::compute(cuda));  // x's fill is done before side touches it
    for (int i = 2; i <= 6; ++i) x.fill_(static_cast<double>(i));
  }
  x.record_stream(side);
  // The compute stream waits for the side stream's fills, then copies x.
  Stream::current(cuda).wait(side);
  Tensor y = empty({1 << 18}, {kFloat32, cuda});
  y.copy_(x);
  const std::vector<float> v = y.to_vector<float>();
  EXPECT_EQ(v.front(), 6.0f);
  EXPECT_EQ(v.back(), 6.0f);
}

TEST(Streams, RecordStreamDelaysReuseUntilTheStreamIsDone) {
  NEED_CUDA(1);
  const Device cuda = Device::cuda();
  const Stream side = Stream::create(cuda);
  const int64_t n = 1 << 20;
  Tensor big = empty({n}, {kFloat32, cuda});
  big.fill_(0.0);
  int checked = 0;
  for (int attempt = 0; attempt < 5 && checked == 0; ++attempt) {
    Tensor x = empty({n}, {kFloat32, cuda});
    x.fill_(0.0);
    const void* x_ptr = x.data_ptr();
    {
      StreamGuard on(side);
      side.wait(Stream::compute(cuda));
      for (int i = 0; i < 16; ++i) big.copy_(x);  // side reads x for a while
    }
    x.record_stream(side);
    x = Tensor();  // freed while side may still read it
    Tensor y = empty({n}, {kFloat32, cuda});
    // Only while side is still busy does the answer say anything; a fast machine may have
    // finished already, and then the attempt is repeated.
    if (!side.query()) {
      EXPECT_NE(y.data_ptr(), x_ptr) << "a block used on another stream was reused before that stream was done";
      ++checked;
    }
    side.synchronize();
  }
  if (checked == 0) GTEST_SKIP() << "the side stream finished before it could be observed busy";
}

TEST(Events, RecordQuerySynchronizeAndTime) {
  NEED_CUDA(1);
  const Device cuda = Device::cuda();
  Event start(cuda, /*timing=*/true), end(cuda, /*timing=*/true);
  EXPECT_TRUE(start.query()) << "an event never recorded has completed";
  start.record();
  Tensor x = empty({1 << 20}, {kFloat32, cuda});
  for (int i = 0; i < 4; ++i) x.fill_(1.0);
  end.record();
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_GE(start.elapsed_ms(end), 0.0f);
  Event untimed(cuda);
  untimed.record();
  untimed.synchronize();
  EXPECT_THROW(untimed.elapsed_ms(end), Error);
  Event moved = std::move(untimed);
  EXPECT_TRUE(moved.query());
  synchronize(cuda);
}

TEST(Devices, MisuseIsAClearError) {
  // These hold in every build: without a device the messages say so.
  const int count = cuda_device_count();
  const std::string missing = error_message([&] { empty({2}, Device::cuda(count + 3)); });
  EXPECT_TRUE(test::contains(missing, "cuda:" + std::to_string(count + 3))) << missing;
  if (count == 0) return;
  const Tensor a = ones({3}, Device::cpu()), b = ones({3}, Device::cuda());
  const std::string mixed = error_message([&] { add(a, b); });
  EXPECT_TRUE(test::contains(mixed, "cpu") && test::contains(mixed, "cuda:0")) << mixed;
  EXPECT_THROW(b.pin_memory(), Error);
  EXPECT_THROW(Stream::create(Device::cpu()), Error);
  const std::string copy = error_message([&] { a.copy_(b); });
  EXPECT_TRUE(test::contains(copy, "cuda:0")) << copy;
}

// Run by ctest with EMBER_EMU_CHECK_HOST_ACCESS=1 (tests/CMakeLists.txt): on a GPU, host
// code that dereferences a device pointer faults; the emulated device's checking mode
// makes it fault there too, instead of reading host memory that happens to hold the data.
TEST(HostAccessCheckDeathTest, DereferencingDeviceMemoryOnTheHostFaults) {
  NEED_CUDA(1);
  if (!std::getenv("EMBER_EMU_CHECK_HOST_ACCESS")) GTEST_SKIP() << "run with EMBER_EMU_CHECK_HOST_ACCESS=1";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor x = full({16}, 2.0, {kFloat32, Device::cuda()});
  EXPECT_EQ(x.to_vector<float>()[15], 2.0f) << "copies still read it";
  EXPECT_DEATH((void)*static_cast<volatile float*>(x.data_ptr()), "the host touched emulated device memory");
}

// Run by ctest with EMBER_EMU_DEVICES=3 CUDA_VISIBLE_DEVICES=2,0 (tests/CMakeLists.txt).
TEST(TwoDevices, CopiesBetweenDevicesAndVisibleDevices) {
  NEED_CUDA(2);
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"))
    EXPECT_EQ(cuda_device_count(), 2) << "CUDA_VISIBLE_DEVICES=" << visible << " shows two of three devices";
  Tensor x = tensor(ramp(1000), {1000}, Device::cuda(0));
  for (int i = 0; i < 4; ++i) x = add(x, Scalar(1.0));
  const Tensor y = x.to(Device::cuda(1));  // waits for cuda:0's work first
  EXPECT_EQ(y.device(), Device::cuda(1));
  EXPECT_EQ(test::values(y), test::values(x));
  // Each device has its own memory and statistics.
  EXPECT_GT(memory_stats(Device::cuda(1)).at("allocated_bytes.all.current"), 0);
  const std::string mixed = error_message([&] { add(x, y); });
  EXPECT_TRUE(test::contains(mixed, "cuda:0") && test::contains(mixed, "cuda:1")) << mixed;
  {
    CudaDeviceGuard on(1);
    EXPECT_EQ(current_cuda_device(), 1);
  }
  EXPECT_EQ(current_cuda_device(), 0);
}

// Note [Restoring the current device]: a rank that works on cuda:1 only must not switch
// back to device 0 after each op, which on a GPU would make a context there. Checked in a
// fresh process, where nothing has used device 0.
TEST(TwoDevicesDeathTest, WorkOnOneDeviceNeverSwitchesBackToAnUnusedOne) {
  NEED_CUDA(2);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const Tensor y = add(full({64}, 1.0, {kFloat32, Device::cuda(1)}), Scalar(1.0));
        const bool right = test::values(y)[63] == 2.0;
        { CudaDeviceGuard on(1); }
        std::exit(right && current_cuda_device() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  // Where device 0 has been used, a guard restores it.
  (void)test::values(full({4}, 1.0, {kFloat32, Device::cuda(0)}));
  { CudaDeviceGuard on(1); }
  EXPECT_EQ(current_cuda_device(), 0);
}

// A non-blocking copy to another device reads its source when the destination's stream
// gets to it; the source's memory, freed at once, must not be rewritten before that.
TEST(TwoDevices, ANonBlockingCopyKeepsItsSourceUntilTheCopyHasReadIt) {
  NEED_CUDA(2);
  Tensor busy = full({1 << 18}, 1.0, {kFloat32, Device::cuda(1)});
  for (int i = 0; i < 8; ++i) busy = mul(busy, Scalar(1.0));  // cuda:1's stream lags behind the host
  Tensor y;
  {
    const Tensor x = tensor(ramp(1000), {1000}, Device::cuda(0));
    y = x.to(Device::cuda(1), /*non_blocking=*/true);
  }
  // x's block is free: the next request on cuda:0 takes it and overwrites it.
  const Tensor poison = full({1000}, -7.0, {y.dtype(), Device::cuda(0)});
  EXPECT_EQ(test::values(y), test::values(tensor(ramp(1000), {1000}, Device::cpu())));
  EXPECT_EQ(test::values(poison)[0], -7.0);
}

// Run by ctest with EMBER_EMU_DEVICE_MEMORY=64MiB (tests/CMakeLists.txt).
TEST(SmallDevice, RunningOutIsAnOutOfMemoryErrorWithItsVerdict) {
  NEED_CUDA(1);
  const char* capacity = std::getenv("EMBER_EMU_DEVICE_MEMORY");
  if (!capacity) GTEST_SKIP() << "run with EMBER_EMU_DEVICE_MEMORY=64MiB";
  Tensor keep = empty({8 << 20}, {kFloat32, Device::cuda()});  // 32 MiB
  try {
    empty({16 << 20}, {kFloat32, Device::cuda()});  // 64 MiB more: cannot fit
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(test::contains(msg, "cuda:0")) << msg;
    EXPECT_EQ(e.report().device_total, size_t(64) << 20) << "the capacity comes from cudaMemGetInfo";
  }
  keep = Tensor();
  EXPECT_NO_THROW(empty({16 << 20}, {kFloat16, Device::cuda()}));
}

}  // namespace
}  // namespace ember
