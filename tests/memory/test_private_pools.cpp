// The caching allocator's private pools for CUDA graph capture (Note [Private pools] in
// memory/caching_allocator.h), over the fake device: what a capture allocates is no one
// else's, nothing goes back to the source during a capture, and release_pool returns it.
#include <gtest/gtest.h>

#include "memory/caching_allocator.h"
#include "tests/memory/fake_device.h"
#include "tests/memory/invariants.h"

namespace ember::memory {
namespace {

using testing::FakeDevice;
using testing::FakeDeviceState;

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;
constexpr StreamId kCapture = 7, kOther = 9;

class PrivatePoolTest : public ::testing::Test {
 protected:
  CachingAllocator& make(std::size_t capacity) {
    dev.capacity = capacity;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<FakeDevice>(dev));
    return *alloc;
  }
  // The private pool of the segment that holds `p` (0: the shared pools).
  PoolId pool_holding(const void* p) const {
    const auto a = reinterpret_cast<std::size_t>(p);
    for (const SegmentInfo& s : alloc->snapshot().segments)
      if (a >= s.address && a < s.address + s.size) return s.private_pool;
    ADD_FAILURE() << "no segment holds " << p;
    return 0;
  }
  FakeDeviceState dev;
  std::unique_ptr<CachingAllocator> alloc;
};

TEST_F(PrivatePoolTest, CaptureAllocationsComeFromAPoolThatOnlyTheCaptureReuses) {
  CachingAllocator& a = make(64 * MiB);
  Allocation cached = a.allocate(4 * KiB, kCapture);
  a.free(cached.block);  // a free block of the capture's stream, in the shared pool

  const PoolId pool = a.begin_allocate_to_pool(kCapture);
  EXPECT_NE(pool, 0u);
  Allocation x = a.allocate(4 * KiB, kCapture);
  EXPECT_NE(x.ptr, cached.ptr) << "a capture took a block of the shared pool";
  EXPECT_EQ(pool_holding(x.ptr), pool);
  a.free(x.block);
  Allocation y = a.allocate(4 * KiB, kCapture);
  EXPECT_EQ(y.ptr, x.ptr) << "a block freed during the capture is reused by the capture";
  Allocation other = a.allocate(4 * KiB, kOther);  // another stream, eager
  EXPECT_EQ(pool_holding(other.ptr), 0u);
  a.end_allocate_to_pool(pool);

  a.free(y.block);  // back to the private pool, not to eager work
  Allocation eager = a.allocate(4 * KiB, kCapture);
  EXPECT_EQ(eager.ptr, cached.ptr);
  EXPECT_EQ(pool_holding(eager.ptr), 0u);
  testing::expect_consistent(a);
  a.free(eager.block);
  a.free(other.block);
  a.release_pool(pool);
  testing::expect_consistent(a);
}

TEST_F(PrivatePoolTest, NothingGoesBackToTheSourceDuringACaptureAndAnOomSaysSo) {
  CachingAllocator& a = make(24 * MiB);
  Allocation big = a.allocate(16 * MiB, kOther);
  a.free(big.block);  // 16 MiB cached: a release would make room
  const int64_t frees = dev.raw_frees;

  const PoolId pool = a.begin_allocate_to_pool(kCapture);
  try {
    a.allocate(12 * MiB, kCapture);
    ADD_FAILURE() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_TRUE(e.report().capturing);
    EXPECT_NE(std::string(e.what()).find("during CUDA graph capture"), std::string::npos) << e.what();
    EXPECT_NE(e.report().advice.find("empty_cache() before capture_begin"), std::string::npos) << e.report().advice;
  }
  EXPECT_EQ(dev.raw_frees, frees) << "a segment went back to the source during a capture";
  try {
    a.empty_cache();
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("while a CUDA graph is being captured"), std::string::npos) << e.what();
  }
  a.end_allocate_to_pool(pool);

  Allocation after = a.allocate(12 * MiB, kCapture);  // now the cache is released and it fits
  EXPECT_GT(dev.raw_frees, frees);
  a.free(after.block);
  a.release_pool(pool);
  testing::expect_consistent(a);
}

TEST_F(PrivatePoolTest, ALiveGraphsSegmentsStayUntilReleasePool) {
  CachingAllocator& a = make(256 * MiB);
  const MemoryStats before = a.stats();
  const PoolId pool = a.begin_allocate_to_pool(kCapture);
  Allocation small = a.allocate(100 * KiB, kCapture);
  Allocation large = a.allocate(30 * MiB, kCapture);
  Allocation kept = a.allocate(3 * MiB, kCapture);  // a tensor the graph's user still holds
  a.free(small.block);
  a.free(large.block);
  a.end_allocate_to_pool(pool);
  const int64_t reserved = a.stats().reserved_bytes[kAllPools].current;
  EXPECT_EQ(reserved, int64_t(2 * MiB + 30 * MiB + 20 * MiB));

  a.empty_cache();  // the graph lives: its memory is not cached memory
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, reserved);

  a.release_pool(pool);  // the free segments go; the one that holds `kept` stays
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(20 * MiB));
  testing::expect_consistent(a);
  a.free(kept.block);
  a.empty_cache();
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.reserved_bytes[kAllPools].current, before.reserved_bytes[kAllPools].current);
  EXPECT_EQ(after.allocated_bytes[kAllPools].current, before.allocated_bytes[kAllPools].current);
  EXPECT_EQ(after.segment[kAllPools].current, 0);
  EXPECT_EQ(dev.raw_allocs, dev.raw_frees);
}

TEST_F(PrivatePoolTest, EventsOfBlocksFreedDuringACaptureAreRecordedAfterIt) {
  CachingAllocator& a = make(64 * MiB);
  Allocation shared = a.allocate(4 * KiB, kOther);
  a.record_stream(shared.block, 3);
  const PoolId pool = a.begin_allocate_to_pool(kCapture);
  a.free(shared.block);
  EXPECT_TRUE(dev.events.empty()) << "an event was recorded during the capture";
  const Snapshot during = a.snapshot();
  ASSERT_EQ(during.segments.size(), 1u);
  EXPECT_EQ(during.segments[0].blocks[0].state, BlockInfo::State::kAwaitingStreams);
  a.end_allocate_to_pool(pool);
  EXPECT_EQ(dev.events.size(), 1u);
  Allocation again = a.allocate(4 * KiB, kOther);  // stream 3 is done: the block is reused
  EXPECT_EQ(again.ptr, shared.ptr);
  a.free(again.block);
  a.release_pool(pool);
  testing::expect_consistent(a);
}

TEST_F(PrivatePoolTest, OneCaptureAtATimePerStream) {
  CachingAllocator& a = make(64 * MiB);
  const PoolId pool = a.begin_allocate_to_pool(kCapture);
  EXPECT_THROW(a.begin_allocate_to_pool(kCapture), Error);
  EXPECT_THROW(a.release_pool(pool), Error);  // still being captured into
  a.end_allocate_to_pool(pool);
  a.release_pool(pool);
}

}  // namespace
}  // namespace ember::memory
