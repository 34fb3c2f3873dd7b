// Tensors and the caching allocator of the device the tests run on: every storage is
// accounted, an op that runs out of memory names itself and its output's shape, and
// backward allocations carry their op.
#include <gtest/gtest.h>

#include "tests/device.h"
#include "ember.h"
#include "memory/caching_allocator.h"

namespace ember {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

memory::CachingAllocator& test_allocator() { return device_allocator(test::test_device()); }

// Caps the test device's allocator for one test and lifts the cap afterwards.
struct HostCap {
  // From an empty cache: a block cached by an earlier test may serve a request the cap
  // alone would refuse (seen on an H200, after cuDNN's workspaces).
  explicit HostCap(std::size_t bytes) {
    test_allocator().empty_cache();
    test_allocator().set_memory_limit(bytes);
  }
  ~HostCap() {
    test_allocator().set_memory_limit(0);
    test_allocator().empty_cache();
  }
};

TEST(MemoryAccounting, EveryTensorIsCounted) {
  memory::CachingAllocator& a = test_allocator();
  const int64_t before = a.stats().allocated_bytes[memory::kAllPools].current;
  const int64_t requested_before = a.stats().requested_bytes[memory::kAllPools].current;
  {
    Tensor t = empty({1000}, kFloat32);  // 4000 bytes, rounded to 4096
    EXPECT_EQ(a.stats().allocated_bytes[memory::kAllPools].current - before, 4096);
    EXPECT_EQ(a.stats().requested_bytes[memory::kAllPools].current - requested_before, 4000);
  }
  EXPECT_EQ(a.stats().allocated_bytes[memory::kAllPools].current, before);
}

TEST(MemoryAccounting, AnOpThatRunsOutNamesItselfAndItsShape) {
  Tensor x = randn({64, 16, 32, 32});
  Tensor w = randn({128, 16, 3, 3});
  HostCap cap(24 * MiB);
  try {
    Tensor y = conv2d(x, w, {}, {1, 1}, {1, 1});  // 64 * 128 * 32 * 32 floats = 32 MiB
    FAIL() << "conv2d fit under the cap";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().op, "conv2d");
    EXPECT_EQ(e.report().shape, "[64, 128, 32, 32]");
    EXPECT_EQ(e.report().requested, 32 * MiB);
    EXPECT_EQ(e.report().device, test::test_device().str());
    EXPECT_EQ(e.report().verdict, memory::OomVerdict::kImplausibleRequest);  // alone larger than the cap
  }
}

TEST(MemoryAccounting, BackwardAllocationsCarryTheirOp) {
  memory::CachingAllocator& a = test_allocator();
  a.record_history(10000);
  Tensor w = randn({64, 32}).requires_grad_();
  Tensor x = randn({16, 64});
  sum(relu(matmul(x, w))).backward();
  const memory::Snapshot snap = a.snapshot();
  a.record_history(0);
  bool forward = false, backward = false;
  for (const memory::TraceEvent& e : snap.history) {
    if (e.action != memory::TraceEvent::Action::kAlloc) continue;
    forward |= e.op == "matmul" && e.shape == "[1, 16, 32]";            // as a batch of one
    backward |= e.op == "matmul backward" && e.shape == "[1, 64, 32]";  // the weight's gradient
  }
  EXPECT_TRUE(forward);
  EXPECT_TRUE(backward);
}

TEST(MemoryAccounting, MemorySizesAsUsersWriteThem) {
  EXPECT_EQ(parse_memory_size("1048576"), 1048576u);
  EXPECT_EQ(parse_memory_size("64MiB"), 64 * MiB);
  EXPECT_EQ(parse_memory_size("64 MB"), 64 * MiB);
  EXPECT_EQ(parse_memory_size("1.5GiB"), 1536 * MiB);
  EXPECT_EQ(parse_memory_size("512k"), 512 * 1024u);
  const std::size_t total = device_allocator(Device::cpu()).source().info().total_bytes;
  EXPECT_EQ(parse_memory_size("50%"), total / 2);
  for (const char* bad : {"", "lots", "-5MiB", "64 parsecs", "150%", "0", "1e30", "20000000TiB"}) {
    try {
      parse_memory_size(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("memory size '") + bad + "'"), std::string::npos) << e.what();
    }
  }
  // A NUL inside the text ends a C string, but not the text: "64" followed by junk.
  EXPECT_THROW(parse_memory_size(std::string("64\0junk", 7)), Error);
  EXPECT_THROW(parse_memory_size(std::string("64MiB\0", 6)), Error);
}

TEST(MemoryAccounting, ShortcutsReachTheDevicesAllocator) {
  const Device d = test::test_device();
  reset_peak_memory_stats(d);
  { Tensor t = empty({3, 1024, 1024}); }  // 12 MiB
  EXPECT_GE(memory_stats(d).at("allocated_bytes.all.peak"), int64_t(12 * MiB));
  EXPECT_NE(memory_summary(d).find("ember memory summary, " + d.str()), std::string::npos);
  empty_cache(d);
  EXPECT_EQ(memory_stats(d).at("reserved_bytes.large_pool.current"),
            memory_stats(d).at("allocated_bytes.large_pool.current") + memory_stats(d).at("inactive_split_bytes.large_pool.current"));
  EXPECT_THROW(device_allocator(Device::cuda(cuda_device_count())), Error);  // one past the last GPU
}

}  // namespace
}  // namespace ember
