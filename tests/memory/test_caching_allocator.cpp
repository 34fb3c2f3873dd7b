// The caching allocator's policy: rounding, pools, best fit, splitting and merging,
// oversize blocks, streams, release-and-retry, caps, garbage collection, statistics.
#include <gtest/gtest.h>

#include "memory/caching_allocator.h"
#include "tests/memory/fake_device.h"
#include "tests/memory/invariants.h"

namespace ember::memory {
namespace {

using testing::FakeDevice;
using testing::FakeDeviceState;

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

class CachingAllocatorTest : public ::testing::Test {
 protected:
  CachingAllocator& make(std::size_t capacity, AllocatorConfig config = {}) {
    dev.capacity = capacity;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<FakeDevice>(dev), config);
    return *alloc;
  }
  FakeDeviceState dev;
  std::unique_ptr<CachingAllocator> alloc;
};

TEST_F(CachingAllocatorTest, SmallRequestsRoundTo512AndShareA2MiBSegment) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(1);
  Allocation y = a.allocate(513);
  EXPECT_EQ(x.size, 512u);
  EXPECT_EQ(y.size, 1024u);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes[kAllPools].current, int64_t(2 * MiB));
  EXPECT_EQ(s.reserved_bytes[kSmallPool].current, int64_t(2 * MiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, 1536);
  EXPECT_EQ(s.requested_bytes[kAllPools].current, 514);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(static_cast<char*>(y.ptr) - static_cast<char*>(x.ptr), 512);
  testing::expect_consistent(a);
  a.free(x.block);
  a.free(y.block);
  testing::expect_consistent(a);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAllPools].current, int64_t(2 * MiB));  // cached, not returned
  EXPECT_EQ(s.inactive_split[kAllPools].current, 0);                 // merged back whole
}

TEST_F(CachingAllocatorTest, ZeroBytesGetsARealBlock) {
  CachingAllocator& a = make(64 * MiB);
  Allocation z = a.allocate(0);
  EXPECT_NE(z.ptr, nullptr);
  EXPECT_EQ(z.size, 512u);
  a.free(z.block);
}

TEST_F(CachingAllocatorTest, LargePoolSegmentSizes) {
  CachingAllocator& a = make(256 * MiB);
  Allocation big = a.allocate(11 * MiB + 5);  // >= 10 MiB: its own segment, rounded to 2 MiB
  EXPECT_EQ(a.stats().reserved_bytes[kLargePool].current, int64_t(12 * MiB));
  EXPECT_EQ(big.size, 12 * MiB);  // the remainder (under 1 MiB) stays with it
  Allocation m = a.allocate(MiB + 1);  // large pool, under 10 MiB: a 20 MiB segment
  EXPECT_EQ(a.stats().reserved_bytes[kLargePool].current, int64_t(32 * MiB));
  EXPECT_EQ(m.size, MiB + 512);
  Allocation tiny = a.allocate(MiB);  // exactly 1 MiB stays in the small pool
  EXPECT_EQ(a.stats().reserved_bytes[kSmallPool].current, int64_t(2 * MiB));
  testing::expect_consistent(a);
  for (auto* b : {m.block, big.block, tiny.block}) a.free(b);
  testing::expect_consistent(a);
}

TEST_F(CachingAllocatorTest, CachedBlocksAreReusedWithoutRawAllocations) {
  CachingAllocator& a = make(256 * MiB);
  for (int i = 0; i < 100; ++i) {
    Allocation x = a.allocate(3 * MiB);
    Allocation y = a.allocate(100 * KiB);
    a.free(x.block);
    a.free(y.block);
  }
  EXPECT_EQ(a.stats().num_device_alloc, 2);
  EXPECT_EQ(dev.raw_allocs, 2);
}

TEST_F(CachingAllocatorTest, BestFitTakesTheSmallestSufficientBlock) {
  CachingAllocator& a = make(256 * MiB);
  // Three separate 12, 16 and 14 MiB segments (each >= 10 MiB gets its own).
  Allocation a12 = a.allocate(12 * MiB), a16 = a.allocate(16 * MiB), a14 = a.allocate(14 * MiB);
  a.free(a12.block);
  a.free(a16.block);
  a.free(a14.block);
  Allocation x = a.allocate(13 * MiB);
  EXPECT_EQ(x.ptr, a14.ptr);  // 14 MiB is the best fit for 13 MiB
  Allocation y = a.allocate(11 * MiB);
  EXPECT_EQ(y.ptr, a12.ptr);
  EXPECT_EQ(a.stats().num_device_alloc, 3);
  a.free(x.block);
  a.free(y.block);
}

TEST_F(CachingAllocatorTest, SplitsAndMergesNeighbours) {
  CachingAllocator& a = make(256 * MiB);
  Allocation x = a.allocate(2 * MiB), y = a.allocate(2 * MiB), z = a.allocate(2 * MiB);  // one 20 MiB segment
  EXPECT_EQ(a.stats().segment[kAllPools].current, 1);
  EXPECT_EQ(static_cast<char*>(y.ptr), static_cast<char*>(x.ptr) + 2 * MiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.inactive_split[kAllPools].current, 1);  // the 14 MiB tail
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].current, int64_t(14 * MiB));
  a.free(y.block);  // a hole between two live blocks
  s = a.stats();
  EXPECT_EQ(s.inactive_split[kAllPools].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].current, int64_t(16 * MiB));
  testing::expect_consistent(a);
  a.free(z.block);  // merges with the hole and the tail
  s = a.stats();
  EXPECT_EQ(s.inactive_split[kAllPools].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].current, int64_t(18 * MiB));
  testing::expect_consistent(a);
  a.free(x.block);  // the whole segment is one free block again
  s = a.stats();
  EXPECT_EQ(s.inactive_split[kAllPools].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].current, 0);
  const Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_EQ(snap.segments[0].blocks.size(), 1u);
}

TEST_F(CachingAllocatorTest, LargePoolKeepsRemaindersOnlyAbove1MiB) {
  CachingAllocator& a = make(256 * MiB);
  Allocation x = a.allocate(19 * MiB + 512 * KiB);  // its own segment, rounded up to 20 MiB
  EXPECT_EQ(x.size, 20 * MiB);  // the 0.5 MiB remainder is not worth keeping apart
  a.free(x.block);
  // A 9 MiB request in the 20 MiB segment leaves 11 MiB: split.
  Allocation y = a.allocate(9 * MiB);
  EXPECT_EQ(y.size, 9 * MiB);
  a.free(y.block);
  // A 19.5 MiB request leaves 0.5 MiB (not worth keeping): the whole block is handed out.
  Allocation z = a.allocate(19 * MiB + 512 * KiB);
  EXPECT_EQ(a.stats().inactive_split[kAllPools].current, 0);
  a.free(z.block);
  testing::expect_consistent(a);
}

TEST_F(CachingAllocatorTest, OversizeBlocksAreNeverSplitNorGivenToSmallRequests) {
  AllocatorConfig c;
  c.max_split_size = 32 * MiB;
  CachingAllocator& a = make(512 * MiB, c);
  Allocation big = a.allocate(40 * MiB);
  a.free(big.block);
  Allocation small = a.allocate(5 * MiB);  // must not carve the 40 MiB block
  EXPECT_NE(small.ptr, big.ptr);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
  Allocation again = a.allocate(39 * MiB);  // close enough in size: reuses it, unsplit
  EXPECT_EQ(again.ptr, big.ptr);
  EXPECT_EQ(again.size, 40 * MiB);
  EXPECT_EQ(a.stats().oversize_allocations[kAllPools].current, 1);
  EXPECT_EQ(a.stats().oversize_segments[kAllPools].current, 1);
  a.free(again.block);
  Allocation far = a.allocate(33 * MiB);  // 40 < 33 + 20 MiB: close enough, reused whole
  EXPECT_EQ(far.ptr, big.ptr);
  a.free(far.block);
  a.free(small.block);
  testing::expect_consistent(a);
}

TEST_F(CachingAllocatorTest, RoundupPower2Divisions) {
  AllocatorConfig c;
  c.roundup_power2_divisions = 4;
  CachingAllocator& a = make(512 * MiB, c);
  // 1200 bytes lies between 1024 and 2048: steps of 256 would be below 512, so 512-steps.
  EXPECT_EQ(a.allocate(1200).size, 1536u);
  // 5 MiB + 1 lies between 4 and 8 MiB: four steps of 1 MiB, so 6 MiB.
  EXPECT_EQ(a.allocate(5 * MiB + 1).size, 6 * MiB);
  EXPECT_EQ(a.allocate(8 * MiB).size, 8 * MiB);  // a power of two stays
}

TEST_F(CachingAllocatorTest, BlocksBelongToTheirStream) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(4 * KiB, /*stream=*/1);
  a.free(x.block);
  Allocation y = a.allocate(4 * KiB, /*stream=*/2);  // not stream 1's cached block
  EXPECT_NE(y.ptr, x.ptr);
  EXPECT_EQ(a.stats().segment[kAllPools].current, 2);
  Allocation z = a.allocate(4 * KiB, /*stream=*/1);
  EXPECT_EQ(z.ptr, x.ptr);
  a.free(y.block);
  a.free(z.block);
}

TEST_F(CachingAllocatorTest, RecordStreamDelaysReuseUntilTheEventCompletes) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(4 * KiB, 1);
  a.record_stream(x.block, 7);
  dev.busy.insert(7);  // stream 7 still has work queued
  a.free(x.block);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.active_bytes[kAllPools].current, 4096);  // freed but awaiting stream 7
  testing::expect_consistent(a);
  Allocation y = a.allocate(4 * KiB, 1);
  EXPECT_NE(y.ptr, x.ptr);
  dev.busy.erase(7);  // stream 7 caught up
  a.free(y.block);
  Allocation z = a.allocate(4 * KiB, 1);  // the first allocation after completion reuses it
  EXPECT_EQ(z.ptr, x.ptr);
  EXPECT_EQ(dev.events_released, 1);
  a.free(z.block);
  testing::expect_consistent(a);
}

TEST_F(CachingAllocatorTest, EmptyCacheWaitsForStreamsAndReturnsWholeSegments) {
  CachingAllocator& a = make(64 * MiB);
  Allocation keep = a.allocate(KiB);
  Allocation x = a.allocate(3 * MiB, 0);
  a.record_stream(x.block, 3);
  dev.busy.insert(3);
  a.free(x.block);
  a.empty_cache();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.reserved_bytes[kLargePool].current, 0);               // returned after the wait
  EXPECT_EQ(s.reserved_bytes[kSmallPool].current, int64_t(2 * MiB));  // holds a live block
  EXPECT_EQ(dev.raw_frees, 1);
  a.free(keep.block);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, 0);
  EXPECT_EQ(dev.used, 0u);
}

TEST_F(CachingAllocatorTest, FailedRawAllocationReleasesTheCacheAndRetries) {
  CachingAllocator& a = make(64 * MiB);
  std::vector<Block*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(a.allocate(12 * MiB).block);  // 3 segments of 12 MiB
  for (Block* b : blocks) a.free(b);
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(36 * MiB));
  Allocation big = a.allocate(40 * MiB);  // 36 + 40 > 64: release the cache, then it fits
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(40 * MiB));
  EXPECT_EQ(a.stats().num_ooms, 0);
  a.free(big.block);
  testing::expect_consistent(a);
}

TEST_F(CachingAllocatorTest, ASmallerSegmentIsTriedWhenAStandardOneNoLongerFits) {
  CachingAllocator& a = make(64 * MiB);
  a.set_memory_limit(30 * MiB);
  Allocation hold = a.allocate(16 * MiB);
  Allocation x = a.allocate(5 * MiB);  // a 20 MiB segment would pass the cap; a 6 MiB one does not
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(16 * MiB + 6 * MiB));
  a.free(x.block);
  a.free(hold.block);
}

TEST_F(CachingAllocatorTest, CapsLimitReservedMemory) {
  CachingAllocator& a = make(100 * MiB);
  EXPECT_EQ(a.memory_limit(), 100 * MiB);
  a.set_memory_fraction(0.5);
  EXPECT_EQ(a.memory_limit(), 50 * MiB);
  a.set_memory_limit(40 * MiB);  // the smaller cap is in force
  EXPECT_EQ(a.memory_limit(), 40 * MiB);
  EXPECT_THROW(a.allocate(41 * MiB), OutOfMemoryError);
  Allocation x = a.allocate(39 * MiB);
  a.free(x.block);
  a.set_memory_limit(0);
  EXPECT_EQ(a.memory_limit(), 50 * MiB);
  a.set_memory_fraction(1.0);
  EXPECT_EQ(a.memory_limit(), 100 * MiB);
  EXPECT_THROW(a.set_memory_fraction(0), Error);
  EXPECT_THROW(a.set_memory_fraction(1.5), Error);
}

TEST_F(CachingAllocatorTest, GarbageCollectionReturnsTheOldestCachedSegmentsFirst) {
  AllocatorConfig c;
  c.garbage_collection_threshold = 0.5;
  CachingAllocator& a = make(100 * MiB, c);
  Allocation old = a.allocate(12 * MiB), newer = a.allocate(14 * MiB), newest = a.allocate(16 * MiB);
  a.free(old.block);
  a.free(newer.block);
  a.free(newest.block);  // 42 MiB cached, under the 50 MiB threshold
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(42 * MiB));
  Allocation x = a.allocate(18 * MiB);  // needs a segment: 60 > 50, so the oldest (12 MiB) goes
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes[kAllPools].current, int64_t((14 + 16 + 18) * MiB));
  EXPECT_EQ(s.num_alloc_retries, 0);
  Allocation y = a.allocate(14 * MiB);  // the 14 MiB one survived and is reused
  EXPECT_EQ(y.ptr, newer.ptr);
  a.free(x.block);
  a.free(y.block);
}

TEST_F(CachingAllocatorTest, PeakStatsReset) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(8 * MiB);
  a.free(x.block);
  EXPECT_EQ(a.stats().allocated_bytes[kAllPools].peak, int64_t(8 * MiB));
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().allocated_bytes[kAllPools].peak, 0);
  EXPECT_EQ(a.stats().reserved_bytes[kAllPools].peak, int64_t(20 * MiB));  // still reserved
  EXPECT_EQ(a.stats().allocated_bytes[kAllPools].allocated, int64_t(8 * MiB));  // cumulative stays
}

TEST_F(CachingAllocatorTest, StatsMapHasPyTorchsKeys) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(1000);
  auto m = a.stats().to_map();
  EXPECT_EQ(m.at("allocated_bytes.all.current"), 1024);
  EXPECT_EQ(m.at("allocated_bytes.small_pool.current"), 1024);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 1000);
  EXPECT_EQ(m.at("reserved_bytes.all.peak"), int64_t(2 * MiB));
  EXPECT_EQ(m.at("segment.large_pool.current"), 0);
  EXPECT_EQ(m.at("num_device_alloc"), 1);
  EXPECT_EQ(m.at("limit_bytes"), int64_t(64 * MiB));
  a.free(x.block);
}

TEST_F(CachingAllocatorTest, SummaryIsATable) {
  CachingAllocator& a = make(64 * MiB);
  Allocation x = a.allocate(3 * MiB);
  const std::string s = a.summary();
  EXPECT_NE(s.find("ember memory summary, fake:0"), std::string::npos) << s;
  EXPECT_NE(s.find("allocated memory"), std::string::npos) << s;
  EXPECT_NE(s.find("3072 KiB"), std::string::npos) << s;
  EXPECT_NE(s.find("20 MiB"), std::string::npos) << s;
  a.free(x.block);
}

TEST_F(CachingAllocatorTest, DestructorReturnsEverything) {
  {
    CachingAllocator& a = make(64 * MiB);
    a.allocate(3 * MiB);
    a.free(a.allocate(KiB).block);
    alloc.reset();
  }
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(dev.raw_frees, dev.raw_allocs);
}

}  // namespace
}  // namespace ember::memory
