// 100,000 random allocations and frees on several threads and streams, with the
// allocator's invariants checked after each phase and everything coalescing back at the
// end.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "memory/caching_allocator.h"
#include "tests/memory/fake_device.h"
#include "tests/memory/invariants.h"

namespace ember::memory {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

// Sizes from a few bytes to 24 MiB, skewed small as in training (many small tensors,
// fewer large ones).
std::size_t random_size(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 10);
  if (kind < 5) return rng() % 4096 + 1;
  if (kind < 8) return rng() % (1 * MiB) + 1;
  if (kind < 9) return rng() % (8 * MiB) + 1;
  return rng() % (24 * MiB) + 1;
}

TEST(AllocatorStress, RandomTrafficKeepsEveryInvariant) {
  testing::FakeDeviceState dev;
  dev.capacity = 1024 * MiB;
  AllocatorConfig config;
  config.max_split_size = 64 * MiB;
  CachingAllocator a(std::make_unique<testing::FakeDevice>(dev), config);
  a.set_memory_limit(512 * MiB);  // tight enough that releases and retries happen

  constexpr int kThreads = 4, kPhases = 5, kOpsPerThreadPhase = 5000;  // 100,000 operations
  struct Live {
    Block* block;
    unsigned char* ptr;
    std::size_t size;
    unsigned char tag;
  };
  std::vector<std::vector<Live>> live(kThreads);
  std::atomic<int64_t> ooms{0};
  std::atomic<bool> corrupt{false};
  for (int phase = 0; phase < kPhases; ++phase) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(1000 * phase + t);
        auto& mine = live[t];
        const StreamId stream = static_cast<StreamId>(t % 2);  // two streams
        for (int i = 0; i < kOpsPerThreadPhase; ++i) {
          const bool alloc = mine.empty() || (mine.size() < 64 && rng() % 2 == 0);
          if (alloc) {
            const std::size_t n = random_size(rng);
            try {
              Allocation x = a.allocate(n, stream);
              // Mark the first and last byte: a block handed out twice would be overwritten.
              const auto tag = static_cast<unsigned char>(rng());
              auto* p = static_cast<unsigned char*>(x.ptr);
              p[0] = tag;
              p[n - 1] = tag;
              if (rng() % 8 == 0) a.record_stream(x.block, 2 + rng() % 2);  // also used on a side stream
              mine.push_back({x.block, p, n, tag});
            } catch (const OutOfMemoryError&) {
              ++ooms;
            }
          } else {
            const std::size_t k = rng() % mine.size();
            const Live& l = mine[k];
            if (l.ptr[0] != l.tag || l.ptr[l.size - 1] != l.tag) corrupt = true;
            a.free(l.block);
            mine[k] = mine.back();
            mine.pop_back();
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_FALSE(corrupt) << "a live block was handed out twice (phase " << phase << ")";
    SCOPED_TRACE("after phase " + std::to_string(phase));
    testing::expect_consistent(a);
    EXPECT_LE(a.stats().reserved_bytes[kAllPools].peak, int64_t(512 * MiB));
    if (phase % 2 == 1) a.empty_cache();
  }
  for (auto& mine : live)
    for (const Live& l : mine) a.free(l.block);
  testing::expect_consistent(a);
  // Blocks used on side streams wait for their events, which are looked at on the next
  // allocation: one more (freed at once) lets them all merge back.
  a.free(a.allocate(1).block);
  // Everything freed: every segment is one free block again, and all of it can go back.
  const Snapshot snap = a.snapshot();
  for (const SegmentInfo& seg : snap.segments) {
    EXPECT_EQ(seg.blocks.size(), 1u);
    if (!seg.blocks.empty()) EXPECT_NE(seg.blocks[0].state, BlockInfo::State::kAllocated);
  }
  a.empty_cache();
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.active_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].current, 0);
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(s.num_ooms, ooms.load());
  EXPECT_GT(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_EQ(s.allocation[kAllPools].allocated, s.allocation[kAllPools].freed);
}

}  // namespace
}  // namespace ember::memory
