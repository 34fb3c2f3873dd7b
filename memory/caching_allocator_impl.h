// The caching allocator's internal state, shared by its implementation files
// (caching_allocator.cpp: allocation and freeing; report.cpp: summaries, snapshots and
// the OutOfMemoryError). Not a public header.
#pragma once

#include <chrono>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "memory/caching_allocator.h"
#include "memory/site.h"

namespace ember::memory {

inline constexpr std::size_t kMinBlockSize = 512;           // every block is a multiple of this
inline constexpr std::size_t kSmallSize = 1 << 20;          // requests up to 1 MiB use the small pool
inline constexpr std::size_t kSmallBuffer = 2 << 20;        // small-pool segments: 2 MiB
inline constexpr std::size_t kLargeBuffer = 20 << 20;       // large-pool segments for requests < 10 MiB
inline constexpr std::size_t kMinLargeAlloc = 10 << 20;     // from here, a segment per request
inline constexpr std::size_t kRoundLarge = 2 << 20;         // ... rounded up to 2 MiB

struct Segment {
  char* ptr;
  std::size_t size;
  StreamId stream;
  PoolId private_pool;  // the CUDA graph pool it serves (0: the shared pools)
  Pool* pool;
  Block* head;  // the block at the segment's start
};

struct Block {
  std::size_t size = 0;
  std::size_t requested = 0;  // what the caller asked for, while allocated
  StreamId stream = 0;
  PoolId private_pool = 0;  // its segment's
  Pool* pool = nullptr;
  Segment* segment = nullptr;
  char* ptr = nullptr;
  Block* prev = nullptr;  // neighbours inside the segment
  Block* next = nullptr;
  bool allocated = false;
  bool cached = false;      // in its pool's free set
  int pending_events = 0;   // events to complete before it can be reused
  uint64_t freed_at = 0;    // the allocation clock when it became free (garbage collection age)
  std::vector<StreamId> stream_uses;  // other streams it was used on (record_stream)
  AllocationSite site;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Free blocks ordered by (private pool, stream, size, address): lower_bound finds the
// best fit among the blocks a request may take.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->private_pool, a->stream, a->size, a->ptr) < std::tie(b->private_pool, b->stream, b->size, b->ptr);
  }
};

struct Pool {
  bool small;
  std::set<Block*, BlockOrder> blocks;
  StatPool stat() const { return small ? kSmallPool : kLargePool; }
};

// One history entry as stored (the site stays a POD until a snapshot is taken).
struct RawTraceEvent {
  TraceEvent::Action action;
  std::size_t address, size;
  StreamId stream;
  int64_t time_ns;
  AllocationSite site;
};

struct CachingAllocator::Impl {
  std::unique_ptr<Source> source;
  AllocatorConfig config;
  std::string device;
  std::size_t device_total = 0;

  mutable std::mutex mu;
  Pool small{true, {}}, large{false, {}};
  std::set<Segment*> segments;
  std::vector<std::pair<EventId, Block*>> pending;  // events outstanding on freed blocks
  // Note [Private pools]: captures under way (allocations on `stream` go to `pool`), the
  // pools whose graphs live, and blocks freed during a capture whose other streams'
  // events wait until no capture is under way.
  struct Capture {
    PoolId pool;
    StreamId stream;
  };
  std::vector<Capture> captures;
  std::set<PoolId> live_pools;
  std::vector<Block*> deferred;
  PoolId next_pool = 1;
  MemoryStats stats;
  std::size_t limit_bytes = 0;  // set_memory_limit; 0: none
  double fraction = 0;          // set_memory_fraction; 0: none
  uint64_t clock = 0;           // counts allocations

  std::vector<std::pair<int, PressureObserver>> observers;
  int next_observer = 1;
  std::vector<std::pair<int, ReportNote>> report_notes;
  AdviceTerms advice_terms;
  int next_note = 1;
  bool above_threshold = false;

  std::vector<RawTraceEvent> history;  // ring buffer
  std::size_t history_capacity = 0, history_next = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  // The cap in force, in bytes.
  std::size_t cap() const;
  void record(TraceEvent::Action action, std::size_t address, std::size_t size, StreamId stream,
              const AllocationSite& site);

  // Everything below runs with `mu` held.
  std::size_t round_size(std::size_t bytes) const;
  Pool& pool_for(std::size_t size) { return size <= kSmallSize ? small : large; }
  // The smallest segment that can hold a block of `size` (rounded) bytes.
  static std::size_t min_segment(std::size_t size) {
    return size <= kSmallSize ? kSmallBuffer : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  }
  // The private pool allocations on `stream` come from now (0: the shared pools).
  PoolId pool_of(StreamId stream) const;
  // Whether the cached free block `b` may go back to the source: a whole segment, and no
  // live graph's.
  bool releasable(const Block* b) const { return !b->is_split() && !live_pools.count(b->private_pool); }
  Block* try_allocate(std::size_t bytes, StreamId stream, std::vector<PressureEvent>& notes);
  Block* best_fit(Pool& pool, PoolId private_pool, StreamId stream, std::size_t size);
  Block* new_segment(Pool& pool, PoolId private_pool, StreamId stream, std::size_t size,
                     std::vector<PressureEvent>& notes);
  void split(Block* block, std::size_t size);
  void free_block(Block* block);
  void insert_events(Block* block);
  std::size_t merge(Block* dst, Block* src);
  void release_segment(Block* block);
  void release_cached();
  void garbage_collect(std::size_t incoming);
  void process_events();
  void wait_all_events();
  void update(StatArray MemoryStats::*stat, const Pool& pool, int64_t n);
  PressureEvent pressure_event(PressureEvent::Kind kind, std::size_t requested) const;

  // report.cpp
  OomReport oom_report(std::size_t requested, StreamId stream) const;
  std::vector<std::string> notes() const;
};

}  // namespace ember::memory
