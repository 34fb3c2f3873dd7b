// Snapshots and the event history: the JSON is well-formed and agrees with the
// statistics, the history is a bounded ring tagged with ops, and the Chrome trace's
// counters end where the allocator is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "memory/export.h"
#include "memory/site.h"
#include "tests/memory/fake_device.h"

namespace ember::memory {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

struct Fixture {
  testing::FakeDeviceState dev;
  std::unique_ptr<CachingAllocator> alloc;
  Fixture() {
    dev.capacity = 256 * MiB;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<testing::FakeDevice>(dev));
  }
};

TEST(Snapshot, JsonAgreesWithTheStatistics) {
  Fixture f;
  CachingAllocator& a = *f.alloc;
  a.record_history(1000);
  std::vector<Allocation> live;
  {
    const int64_t shape[] = {128, 512};
    SiteScope site("linear", shape, 2);
    for (std::size_t n : {std::size_t(1000), 3 * MiB, 700 * std::size_t(1024), 12 * MiB}) live.push_back(a.allocate(n));
  }
  a.free(live[1].block);
  a.record_stream(live[2].block, 5);
  f.dev.busy.insert(5);
  a.free(live[2].block);  // awaiting stream 5

  const nlohmann::json j = nlohmann::json::parse(to_json(a.snapshot()));
  const MemoryStats s = a.stats();
  EXPECT_EQ(j["device"], "fake:0");
  int64_t reserved = 0, allocated = 0, awaiting = 0, blocks_allocated = 0;
  for (const auto& seg : j["segments"]) {
    reserved += seg["size"].get<int64_t>();
    int64_t covered = 0;
    for (const auto& b : seg["blocks"]) {
      covered += b["size"].get<int64_t>();
      if (b["state"] == "allocated") {
        allocated += b["size"].get<int64_t>();
        ++blocks_allocated;
        EXPECT_EQ(b["op"], "linear");
        EXPECT_EQ(b["shape"], "[128, 512]");
      }
      if (b["state"] == "awaiting_streams") awaiting += b["size"].get<int64_t>();
    }
    EXPECT_EQ(covered, seg["size"].get<int64_t>());
  }
  EXPECT_EQ(reserved, s.reserved_bytes[kAllPools].current);
  EXPECT_EQ(allocated, s.allocated_bytes[kAllPools].current);
  EXPECT_EQ(blocks_allocated, s.allocation[kAllPools].current);
  EXPECT_EQ(awaiting, s.active_bytes[kAllPools].current - s.allocated_bytes[kAllPools].current);
  EXPECT_EQ(j["stats"]["allocated_bytes.all.current"], s.allocated_bytes[kAllPools].current);

  int64_t allocs = 0, segment_allocs = 0;
  for (const auto& e : j["history"]) {
    allocs += e["action"] == "alloc";
    segment_allocs += e["action"] == "segment_alloc";
  }
  EXPECT_EQ(allocs, s.allocation[kAllPools].allocated);
  EXPECT_EQ(segment_allocs, s.num_device_alloc);
  for (auto& x : live) {
    if (x.block != live[1].block && x.block != live[2].block) a.free(x.block);
  }
}

TEST(Snapshot, HistoryIsABoundedRingOfTheLatestEvents) {
  Fixture f;
  CachingAllocator& a = *f.alloc;
  a.record_history(10);
  for (int i = 0; i < 20; ++i) {
    SiteScope site(i < 19 ? "early" : "last");
    a.free(a.allocate(1024).block);
  }
  const Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.history.size(), 10u);
  EXPECT_EQ(snap.history.back().action, TraceEvent::Action::kFreeCompleted);
  EXPECT_EQ(snap.history.back().op, "last");
  for (size_t i = 1; i < snap.history.size(); ++i) EXPECT_LE(snap.history[i - 1].time_ns, snap.history[i].time_ns);
  a.record_history(0);
  a.free(a.allocate(1024).block);
  EXPECT_TRUE(a.snapshot().history.empty());
}

TEST(Snapshot, ChromeTraceCountersEndAtTheAllocatorsFigures) {
  Fixture f;
  CachingAllocator& a = *f.alloc;
  a.record_history(1000);
  Allocation x = a.allocate(5 * MiB), y = a.allocate(100);
  a.free(x.block);
  EXPECT_THROW(a.allocate(1024 * MiB), OutOfMemoryError);
  const nlohmann::json t = nlohmann::json::parse(to_chrome_trace(a.snapshot()));
  const auto& events = t["traceEvents"];
  ASSERT_FALSE(events.empty());
  nlohmann::json last_counter;
  bool oom = false;
  for (const auto& e : events) {
    if (e["ph"] == "C") last_counter = e;
    oom |= e["cat"] == "oom";
  }
  EXPECT_TRUE(oom);
  EXPECT_EQ(last_counter["args"]["allocated"], a.stats().allocated_bytes[kAllPools].current);
  EXPECT_EQ(last_counter["args"]["reserved"], a.stats().reserved_bytes[kAllPools].current);
  a.free(y.block);
}

}  // namespace
}  // namespace ember::memory
