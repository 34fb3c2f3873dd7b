// OutOfMemoryError: each verdict staged on a fake device, the message's fields, and the
// pressure observers (once per crossing; freeing memory before an OOM).
#include <gtest/gtest.h>

#include <sstream>

#include "memory/caching_allocator.h"
#include "memory/site.h"
#include "tests/memory/fake_device.h"
#include "tests/memory/invariants.h"

namespace ember::memory {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

class OomTest : public ::testing::Test {
 protected:
  CachingAllocator& make(std::size_t capacity) {
    dev.capacity = capacity;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<testing::FakeDevice>(dev));
    return *alloc;
  }
  // The report of the OutOfMemoryError that allocate(bytes) raises.
  OomReport fail(std::size_t bytes) {
    try {
      alloc->allocate(bytes);
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.what(), e.report().message());
      return e.report();
    }
    ADD_FAILURE() << "allocate(" << bytes << ") did not fail";
    return {};
  }
  bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

  testing::FakeDeviceState dev;
  std::unique_ptr<CachingAllocator> alloc;
};

TEST_F(OomTest, ARequestLargerThanTheDeviceIsImplausible) {
  CachingAllocator& a = make(64 * MiB);
  const int64_t shape[] = {1024, 1024, 100};
  SiteScope site("matmul", shape, 3);
  const OomReport r = fail(400 * MiB);
  EXPECT_EQ(r.verdict, OomVerdict::kImplausibleRequest);
  EXPECT_EQ(r.requested, 400 * MiB);
  EXPECT_EQ(r.op, "matmul");
  EXPECT_EQ(r.shape, "[1024, 1024, 100]");
  const std::string m = r.message();
  EXPECT_TRUE(contains(m, "out of memory on fake:0: matmul asked for 400.00 MiB (419430400 bytes) (a [1024, 1024, 100] tensor)")) << m;
  EXPECT_TRUE(contains(m, "device capacity:          64.00 MiB (67108864 bytes)")) << m;
  EXPECT_TRUE(contains(m, "verdict: implausible request")) << m;
  EXPECT_TRUE(contains(m, "larger than the whole device")) << m;
  EXPECT_EQ(a.stats().num_ooms, 1);
}

TEST_F(OomTest, ARequestLargerThanTheCapIsImplausibleAndSaysSo) {
  CachingAllocator& a = make(1024 * MiB);
  a.set_memory_limit(64 * MiB);
  const OomReport r = fail(100 * MiB);
  EXPECT_EQ(r.verdict, OomVerdict::kImplausibleRequest);
  EXPECT_TRUE(r.cap_set);
  EXPECT_EQ(r.cap, 64 * MiB);
  EXPECT_TRUE(contains(r.message(), "cap in force:             64.00 MiB (67108864 bytes)")) << r.message();
  EXPECT_TRUE(contains(r.advice, "raise the cap")) << r.advice;
}

TEST_F(OomTest, MemoryHeldByOthersIsNamed) {
  CachingAllocator& a = make(64 * MiB);
  dev.outside = 40 * MiB;  // another process on the "GPU"
  Allocation mine = a.allocate(8 * MiB);  // ember holds a 20 MiB segment
  const OomReport r = fail(16 * MiB);  // 20 + 16 <= 64 under the cap, but the device is full
  EXPECT_EQ(r.verdict, OomVerdict::kOutsideMemory);
  EXPECT_EQ(r.outside, 40 * MiB);
  EXPECT_EQ(r.reserved, 20 * MiB);
  EXPECT_EQ(r.allocated, 8 * MiB);
  EXPECT_EQ(r.device_free, 4 * MiB);
  EXPECT_TRUE(contains(r.message(), "used outside ember:       40.00 MiB (41943040 bytes)")) << r.message();
  EXPECT_TRUE(contains(r.advice, "held outside ember")) << r.advice;
  a.free(mine.block);
}

// A source's failure that is not lack of memory (a CUDA error other than
// cudaErrorMemoryAllocation) reaches the caller as itself, not as an explained OOM, and
// leaves the allocator as it was.
TEST_F(OomTest, ASourceErrorIsNotAnOom) {
  CachingAllocator& a = make(64 * MiB);
  Allocation held = a.allocate(30 * MiB);
  dev.error = "cudaMalloc(20971520 bytes) on cuda:0 failed: cudaErrorLaunchFailure";
  try {
    a.allocate(8 * MiB);  // needs a new segment
    ADD_FAILURE() << "the source's error was swallowed";
  } catch (const OutOfMemoryError& e) {
    ADD_FAILURE() << "the source's error became an OOM: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), dev.error);
  }
  EXPECT_EQ(a.stats().num_ooms, 0);
  testing::expect_consistent(a);
  dev.error.clear();
  a.free(a.allocate(8 * MiB).block);
  a.free(held.block);
  testing::expect_consistent(a);
}

TEST_F(OomTest, FreeMemoryInPiecesIsFragmentation) {
  CachingAllocator& a = make(64 * MiB);
  std::vector<Allocation> blocks;
  for (int i = 0; i < 30; ++i) blocks.push_back(a.allocate(2 * MiB));  // three 20 MiB segments, full
  ASSERT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(60 * MiB));
  for (int i = 0; i < 30; i += 2) a.free(blocks[i].block);  // 30 MiB free, in 2 MiB holes
  const OomReport r = fail(8 * MiB);
  EXPECT_EQ(r.verdict, OomVerdict::kFragmentation);
  EXPECT_EQ(r.reserved_free, 30 * MiB);
  EXPECT_EQ(r.largest_free, 2 * MiB);
  EXPECT_TRUE(contains(r.advice, "max_split_size_mb")) << r.advice;
  EXPECT_EQ(r.pool_free, 30 * MiB);
  EXPECT_FALSE(r.small_pool);
  EXPECT_TRUE(contains(r.message(), "reserved but unallocated: 30.00 MiB (31457280 bytes); in the request's large pool: "
                                    "30.00 MiB (31457280 bytes), largest block 2.00 MiB"))
      << r.message();
  testing::expect_consistent(a);
  for (int i = 1; i < 30; i += 2) a.free(blocks[i].block);
}

// The 18 MiB free beside `pin` can never serve a small request: what stops it is the cap,
// which leaves no room for the small pool's segment the device has room for.
TEST_F(OomTest, ASmallRequestCannotUseTheLargePoolsFreeBlocks) {
  CachingAllocator& a = make(64 * MiB);
  Allocation pin = a.allocate(2 * MiB), big = a.allocate(36 * MiB);  // a 20 MiB segment, and one of 36 MiB
  ASSERT_EQ(a.stats().reserved_bytes[kAllPools].current, int64_t(56 * MiB));
  a.free(big.block);  // 36 MiB free and releasable; the 18 MiB beside `pin` is not
  a.set_memory_limit(20 * MiB);
  const OomReport r = fail(100 * 1024);  // small pool: needs a 2 MiB segment of its own
  EXPECT_TRUE(r.small_pool);
  EXPECT_EQ(r.pool_free, 0u);
  EXPECT_EQ(r.verdict, OomVerdict::kCap);
  EXPECT_TRUE(contains(r.advice, "18.00 MiB (18874368 bytes) of what ember holds is free but in the other pool's "
                                 "segments")) << r.advice;
  EXPECT_FALSE(contains(r.advice, "max_split_size_mb")) << r.advice;
  a.free(pin.block);
}

// --max-memory 1B in the examples: a cap of what is held plus one byte. The verdict was
// "fragmentation" with EMBER_ALLOC_CONF=max_split_size_mb:21, which gave the same report
// again; it is the cap, and the advice is to raise it or shrink the step.
TEST_F(OomTest, ACapThatLeavesNoRoomIsTheCapNotFragmentation) {
  CachingAllocator& a = make(1024 * MiB);
  // A dataset, and a tensor whose 20 MiB segment has 14 MiB free beside it.
  Allocation data = a.allocate(180 * MiB), tail = a.allocate(6 * MiB);
  const std::size_t held = static_cast<std::size_t>(a.stats().reserved_bytes[kAllPools].current);
  a.set_memory_limit(held + 1);
  a.set_advice_terms({.raise_cap = "--max-memory", .cap_origin = "--max-memory 1B on top of what was held"});
  for (std::size_t request : {288 * std::size_t(1024), 16 * MiB}) {  // a small-pool and a large-pool request
    SCOPED_TRACE(request);
    const OomReport r = fail(request);
    EXPECT_EQ(r.verdict, OomVerdict::kCap);
    EXPECT_FALSE(contains(r.advice, "max_split_size_mb")) << r.advice;
    EXPECT_TRUE(contains(r.advice, "the cap is what ran out, not the device: it leaves 1 bytes beyond")) << r.advice;
    EXPECT_TRUE(contains(r.advice, "Raise the cap (--max-memory)")) << r.advice;
    EXPECT_TRUE(contains(r.message(), "verdict: the cap")) << r.message();
    EXPECT_TRUE(contains(r.message(), ", the most ember may reserve on fake:0 (set by --max-memory 1B on top of what "
                                      "was held)")) << r.message();
  }
  a.free(data.block);
  a.free(tail.block);
}

// Advice that would give the same report again is not given: max_split_size_mb at or
// below the suggestion is in force already, so the report says so instead.
TEST_F(OomTest, FragmentationAdviceIsNotRepeatedOnceFollowed) {
  for (const char* conf : {"", "max_split_size_mb:21"}) {
    SCOPED_TRACE(conf);
    dev.capacity = 64 * MiB;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<testing::FakeDevice>(dev), AllocatorConfig::parse(conf));
    std::vector<Allocation> blocks;
    for (int i = 0; i < 30; ++i) blocks.push_back(alloc->allocate(2 * MiB));
    for (int i = 0; i < 30; i += 2) alloc->free(blocks[i].block);
    const OomReport r = fail(8 * MiB);
    EXPECT_EQ(r.verdict, OomVerdict::kFragmentation);
    if (std::string(conf).empty())
      EXPECT_TRUE(contains(r.advice, "Set EMBER_ALLOC_CONF=max_split_size_mb:21")) << r.advice;
    else
      EXPECT_TRUE(contains(r.advice, "max_split_size_mb is 21 already")) << r.advice;
    for (int i = 1; i < 30; i += 2) alloc->free(blocks[i].block);
  }
}

// A program's words for the remedies; those it already uses (empty) are left out; its
// memory estimate gives the largest batch, asked once, without the allocator's lock (the
// estimate may allocate: here on the very allocator that failed).
TEST_F(OomTest, AdviceIsInTheProgramsWordsWithTheBatchFromItsEstimate) {
  CachingAllocator& a = make(1024 * MiB);
  a.set_memory_limit(64 * MiB);
  std::vector<Allocation> live;
  for (int i = 0; i < 3; ++i) live.push_back(a.allocate(20 * MiB));
  int asked = 0;
  std::size_t cap_seen = 0;
  AdviceTerms t{.raise_cap = "--max-memory",
                .micro_batches = "--auto-microbatch",
                .checkpointing = "",  // in use already
                .lower_precision = "--precision bf16",
                .batch_size = "--batch-size",
                .estimate = "--estimate-memory"};
  t.largest_batch = [&](std::size_t cap) {
    ++asked;
    cap_seen = cap;
    a.free(a.allocate(1024).block);  // the lock is not held
    return int64_t{96};
  };
  a.set_advice_terms(t);
  const OomReport r = fail(16 * MiB);
  EXPECT_EQ(r.verdict, OomVerdict::kCap);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(cap_seen, 64 * MiB);
  EXPECT_EQ(r.estimated_batch, 96);
  EXPECT_TRUE(contains(r.advice, "By the memory estimate (--estimate-memory) the largest batch whose step fits under "
                                 "the cap is 96 (--batch-size 96)")) << r.advice;
  EXPECT_TRUE(contains(r.advice, "micro-batches with --auto-microbatch")) << r.advice;
  EXPECT_TRUE(contains(r.advice, "--precision bf16 or a smaller model also lower the footprint")) << r.advice;
  EXPECT_FALSE(contains(r.advice, "checkpoint")) << r.advice;
  EXPECT_FALSE(contains(r.advice, "nn::")) << r.advice;
  // An estimate that fails, or one that allocates until it fails itself, leaves the number out.
  t.largest_batch = [&](std::size_t) -> int64_t {
    a.allocate(1024 * MiB);
    return 5;
  };
  a.set_advice_terms(t);
  const OomReport q = fail(16 * MiB);
  EXPECT_EQ(q.estimated_batch, -1);
  EXPECT_FALSE(contains(q.advice, "By the memory estimate")) << q.advice;
  for (auto& x : live) a.free(x.block);
}

TEST_F(OomTest, LiveTensorsFillingTheCapIsCapacityWithTheBatchThatFits) {
  CachingAllocator& a = make(64 * MiB);
  std::vector<Allocation> live;
  {
    const int64_t s1[] = {128, 32, 28, 28};
    SiteScope site("conv2d", s1, 4);
    live.push_back(a.allocate(20 * MiB));
  }
  {
    SiteScope site("relu");
    live.push_back(a.allocate(20 * MiB));
    live.push_back(a.allocate(18 * MiB));
  }
  StepScope step(/*batch=*/128, /*allocated_at_start=*/0);
  const int64_t s2[] = {128, 64, 14, 14};
  SiteScope site("max_pool2d", s2, 4);
  const OomReport r = fail(10 * MiB);
  EXPECT_EQ(r.verdict, OomVerdict::kCapacity);
  EXPECT_EQ(r.allocated, 58 * MiB);
  ASSERT_EQ(r.largest_live.size(), 3u);
  EXPECT_EQ(r.largest_live[0].bytes, 20 * MiB);
  EXPECT_EQ(r.largest_live[2].op, "relu");
  EXPECT_EQ(r.largest_live[2].bytes, 18 * MiB);
  // The step had 58 MiB and wanted 10 more: 128 * 64 / 68 = 120 samples at most.
  EXPECT_EQ(r.batch, 128);
  EXPECT_EQ(r.batch_that_fits, 120);
  const std::string m = r.message();
  EXPECT_TRUE(contains(m, "max_pool2d asked for 10.00 MiB (10485760 bytes) (a [128, 64, 14, 14] tensor)")) << m;
  EXPECT_TRUE(contains(m, "20.00 MiB (20971520 bytes)  conv2d [128, 32, 28, 28]")) << m;
  EXPECT_TRUE(contains(m, "verdict: capacity")) << m;
  EXPECT_TRUE(contains(m, "micro-batches of at most about 120 samples")) << m;
  // Without a program's words: the C++ API's names.
  EXPECT_TRUE(contains(r.advice, "optim::MicroBatcher")) << r.advice;
  EXPECT_TRUE(contains(r.advice, "nn::checkpoint_blocks")) << r.advice;
  for (auto& x : live) a.free(x.block);
  // After an OOM the allocator is still whole and usable.
  testing::expect_consistent(a);
  a.free(a.allocate(10 * MiB).block);
}

TEST_F(OomTest, ObserversAreCalledOncePerCrossing) {
  CachingAllocator& a = make(64 * MiB);
  a.set_pressure_threshold(0.5);
  std::vector<PressureEvent> seen;
  a.add_pressure_observer([&](const PressureEvent& e) { seen.push_back(e); });
  Allocation x = a.allocate(12 * MiB);  // 12 MiB reserved: below 32
  EXPECT_TRUE(seen.empty());
  Allocation y = a.allocate(14 * MiB);  // 26
  Allocation z = a.allocate(16 * MiB);  // 42: crosses
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, PressureEvent::Kind::kThresholdCrossed);
  EXPECT_EQ(seen[0].reserved, 42 * MiB);
  EXPECT_EQ(seen[0].cap, 64 * MiB);
  EXPECT_DOUBLE_EQ(seen[0].threshold, 0.5);
  Allocation w = a.allocate(2 * MiB);  // still above: no second call
  EXPECT_EQ(seen.size(), 1u);
  for (Allocation* b : {&x, &y, &z, &w}) a.free(b->block);
  a.empty_cache();  // back below
  Allocation again = a.allocate(40 * MiB);  // crosses a second time
  EXPECT_EQ(seen.size(), 2u);
  a.free(again.block);
}

TEST_F(OomTest, AnObserverThatFreesMemoryAvertsTheOom) {
  CachingAllocator& a = make(64 * MiB);
  Allocation cache = a.allocate(40 * MiB);  // a cache the program can drop
  bool held = true;
  std::vector<PressureEvent::Kind> kinds;
  std::size_t asked = 0;
  a.add_pressure_observer([&](const PressureEvent& e) {
    kinds.push_back(e.kind);
    if (e.kind == PressureEvent::Kind::kBeforeOom && held) {
      asked = e.requested;
      a.free(cache.block);  // called without the allocator's lock: it may free
      held = false;
    }
  });
  Allocation big = a.allocate(30 * MiB);  // 40 + 30 > 64 until the observer drops its cache
  EXPECT_FALSE(held);
  EXPECT_EQ(asked, 30 * MiB);
  EXPECT_EQ(a.stats().num_ooms, 0);
  a.free(big.block);
  testing::expect_consistent(a);
}

TEST_F(OomTest, AnObserverThatFreesNothingSeesTheOomComing) {
  CachingAllocator& a = make(64 * MiB);
  int before_oom = 0;
  const int id = a.add_pressure_observer([&](const PressureEvent& e) {
    if (e.kind == PressureEvent::Kind::kBeforeOom) ++before_oom;
  });
  EXPECT_THROW(a.allocate(100 * MiB), OutOfMemoryError);
  EXPECT_EQ(before_oom, 1);
  a.remove_pressure_observer(id);
  EXPECT_THROW(a.allocate(100 * MiB), OutOfMemoryError);
  EXPECT_EQ(before_oom, 1);
  EXPECT_EQ(a.stats().num_ooms, 2);
}

TEST_F(OomTest, ReportNotesEndTheSummaryAndTheOomReportWhileRegistered) {
  CachingAllocator& a = make(64 * MiB);
  const std::string note =
      "ZeRO-1 over 4 ranks: optimizer state on this rank 1.00 MiB of 4.00 MiB unsharded, gradients after backward "
      "4.00 MiB of 4.00 MiB; 3.00 MiB saved on this rank";
  const int id = a.add_report_note([&] { return note; });
  const OomReport r = fail(128 * MiB);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0], note);
  EXPECT_TRUE(contains(r.message(), "\n  note: " + note + "\nverdict: ")) << r.message();
  // The summary wraps the note's words into its table, each row as wide as the others.
  const std::string summary = a.summary();
  EXPECT_TRUE(contains(summary, "| ZeRO-1 over 4 ranks: optimizer state on this rank 1.00 MiB of 4.00 MiB")) << summary;
  EXPECT_TRUE(contains(summary, "\n|   unsharded, gradients after backward 4.00 MiB of 4.00 MiB; 3.00 MiB saved on    |\n"
                                "|   this rank      ")) << summary;
  std::istringstream rows(summary);
  for (std::string row; std::getline(rows, row);) EXPECT_EQ(row.size(), 84u) << row;

  a.remove_report_note(id);
  EXPECT_TRUE(fail(128 * MiB).notes.empty());
  EXPECT_FALSE(contains(a.summary(), "ZeRO")) << a.summary();
}

TEST_F(OomTest, OutOfMemoryErrorIsAnEmberError) {
  make(64 * MiB);
  EXPECT_THROW(alloc->allocate(128 * MiB), Error);
}

TEST(FormatBytes, HumanUnitsWithBytesInBrackets) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB (1536 bytes)");
  EXPECT_EQ(format_bytes(3 * MiB), "3.00 MiB (3145728 bytes)");
  EXPECT_EQ(format_bytes(std::size_t(5) << 30), "5.00 GiB (5368709120 bytes)");
}

}  // namespace
}  // namespace ember::memory
