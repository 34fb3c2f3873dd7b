// Checks that a caching allocator's snapshot is consistent with itself and with its
// statistics: segments disjoint and covered by their blocks, free neighbours merged, and
// every figure equal to a recount.
#pragma once

#include <gtest/gtest.h>

#include "memory/caching_allocator.h"

namespace ember::memory::testing {

inline void expect_consistent(const CachingAllocator& a) {
  const Snapshot snap = a.snapshot();
  const MemoryStats& s = snap.stats;
  int64_t reserved[3] = {}, segments[3] = {}, allocated[3] = {}, allocations[3] = {}, active[3] = {};
  int64_t split_bytes[3] = {}, split_blocks[3] = {};
  std::size_t last_end = 0;
  for (const SegmentInfo& seg : snap.segments) {
    const int pool = seg.small_pool ? kSmallPool : kLargePool;
    ASSERT_GE(seg.address, last_end) << "segments overlap";
    last_end = seg.address + seg.size;
    reserved[pool] += static_cast<int64_t>(seg.size);
    segments[pool] += 1;
    std::size_t at = seg.address;
    const BlockInfo* prev = nullptr;
    for (const BlockInfo& b : seg.blocks) {
      ASSERT_EQ(b.address, at) << "blocks do not tile their segment";
      ASSERT_GT(b.size, 0u);
      ASSERT_EQ(b.size % 512, 0u);
      at += b.size;
      if (b.state == BlockInfo::State::kAllocated) {
        allocated[pool] += static_cast<int64_t>(b.size);
        allocations[pool] += 1;
        EXPECT_LE(b.requested, b.size);
      }
      if (b.state != BlockInfo::State::kFree) active[pool] += static_cast<int64_t>(b.size);
      if (b.state == BlockInfo::State::kFree) {
        EXPECT_FALSE(prev && prev->state == BlockInfo::State::kFree) << "two free neighbours were not merged";
        if (seg.blocks.size() > 1) {
          split_bytes[pool] += static_cast<int64_t>(b.size);
          split_blocks[pool] += 1;
        }
      }
      prev = &b;
    }
    ASSERT_EQ(at, seg.address + seg.size) << "blocks do not cover their segment";
  }
  for (int p : {kSmallPool, kLargePool}) {
    reserved[kAllPools] += reserved[p];
    segments[kAllPools] += segments[p];
    allocated[kAllPools] += allocated[p];
    allocations[kAllPools] += allocations[p];
    active[kAllPools] += active[p];
    split_bytes[kAllPools] += split_bytes[p];
    split_blocks[kAllPools] += split_blocks[p];
  }
  for (int p = 0; p < kNumStatPools; ++p) {
    SCOPED_TRACE(p == kAllPools ? "all pools" : p == kSmallPool ? "small pool" : "large pool");
    EXPECT_EQ(s.reserved_bytes[p].current, reserved[p]);
    EXPECT_EQ(s.segment[p].current, segments[p]);
    EXPECT_EQ(s.allocated_bytes[p].current, allocated[p]);
    EXPECT_EQ(s.allocation[p].current, allocations[p]);
    EXPECT_EQ(s.active_bytes[p].current, active[p]);
    EXPECT_EQ(s.inactive_split_bytes[p].current, split_bytes[p]);
    EXPECT_EQ(s.inactive_split[p].current, split_blocks[p]);
    EXPECT_LE(s.allocated_bytes[p].current, s.reserved_bytes[p].current);
    EXPECT_GE(s.reserved_bytes[p].peak, s.reserved_bytes[p].current);
    EXPECT_EQ(s.reserved_bytes[p].allocated - s.reserved_bytes[p].freed, s.reserved_bytes[p].current);
    EXPECT_EQ(s.allocated_bytes[p].allocated - s.allocated_bytes[p].freed, s.allocated_bytes[p].current);
  }
}

}  // namespace ember::memory::testing
