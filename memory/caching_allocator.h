// The caching allocator: every tensor's memory, on every device, comes from one of these.
//
// Policy (Note [Caching policy]), that of PyTorch's CUDA caching allocator so that its
// users find the figures they know:
// - Requests are rounded up to 512 bytes (or, with roundup_power2_divisions, to a step
//   between powers of two). Requests up to 1 MiB come from the small pool, whose segments
//   are 2 MiB; larger ones from the large pool, whose segments are 20 MiB for requests
//   under 10 MiB and the request rounded up to 2 MiB above that.
// - The best fit (smallest sufficient free block of the same stream) is taken; a block is
//   split when the remainder is worth keeping (512 bytes in the small pool, more than
//   1 MiB in the large pool), and a freed block merges with free neighbours.
// - Blocks of max_split_size or more are never split, and smaller requests never take one.
// - A block belongs to the stream it was allocated on. A block also used on another
//   stream (record_stream) is reused only after an event recorded on that stream at free
//   time has completed.
// - When the source refuses a segment (or the cap would be passed), the cached free
//   segments are returned to the source and the allocation is retried once; if it still
//   fails, the pressure observers are told and may free memory, the allocation is retried
//   once more, and then an OutOfMemoryError explains the failure (memory/oom.h).
// Every public function is thread-safe; observers are called without the lock held.
//
// Note [Private pools], for CUDA graphs (core/cuda_graph.h), as PyTorch's graph mempools.
// A captured graph replays with the addresses its capture was given, so that memory
// must stay the graph's while it lives. From begin_allocate_to_pool(stream) until
// end_allocate_to_pool, allocations on `stream` come from a private pool: blocks whose
// key is (pool, stream) instead of (0, stream), so the best fit of any other request never
// finds them. Blocks freed during the capture are reused by its later allocations, in
// the order replays repeat; after the capture the pool's free blocks wait for nothing
// but the graph. Its segments are never returned to the source while the graph lives
// (release_pool ends that). While any capture is under way, nothing is returned to the
// source (cudaFree is illegal during a capture: an OOM then says so), no event is
// queried (cudaEventQuery would invalidate the capture), and a block freed with other
// streams' uses records its events only once the last capture has ended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memory/config.h"
#include "memory/oom.h"
#include "memory/source.h"
#include "memory/stats.h"

namespace ember::memory {

struct Block;     // a piece of a segment; opaque outside the allocator
struct Pool;
struct Segment;

// A CUDA graph's private pool (Note [Private pools]); 0 stands for the shared pools.
using PoolId = uint64_t;

struct Allocation {
  void* ptr = nullptr;
  std::size_t size = 0;  // the block's size (the request rounded up)
  Block* block = nullptr;
};

// What a pressure observer is told.
struct PressureEvent {
  enum class Kind { kThresholdCrossed, kBeforeOom } kind;
  std::string device;
  std::size_t reserved = 0, allocated = 0, cap = 0;
  double threshold = 0;        // the pressure threshold (fraction of the cap)
  std::size_t requested = 0;   // kBeforeOom: the request that is about to fail
};
using PressureObserver = std::function<void(const PressureEvent&)>;

// A line for the device's memory reports from a component that changes what the memory
// holds (ZeRO's sharded optimizer state says what it saves). Called with the allocator's
// lock held, so it must not call into the allocator (nor allocate tensors on its device).
using ReportNote = std::function<std::string()>;

// One block in a snapshot.
struct BlockInfo {
  std::size_t address = 0, size = 0, requested = 0;
  enum class State { kAllocated, kAwaitingStreams, kFree } state;
  std::string op, shape;
};
struct SegmentInfo {
  std::size_t address = 0, size = 0;
  StreamId stream = 0;
  bool small_pool = false;
  PoolId private_pool = 0;  // the CUDA graph pool it serves; 0: the shared pools
  std::vector<BlockInfo> blocks;  // in address order, covering the segment
};
// One entry of the event history.
struct TraceEvent {
  enum class Action { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kOom } action;
  std::size_t address = 0, size = 0;
  StreamId stream = 0;
  int64_t time_ns = 0;  // steady clock, since the allocator was made
  std::string op, shape;
};
struct Snapshot {
  std::string device;
  std::vector<SegmentInfo> segments;  // in address order
  std::vector<TraceEvent> history;    // oldest first; empty unless history is enabled
  MemoryStats stats;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<Source> source, AllocatorConfig config = AllocatorConfig::from_env());
  // Returns every cached segment; blocks still allocated are returned too (their
  // memory must no longer be used).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 is allowed), for use on `stream`. Throws
  // OutOfMemoryError when it cannot be had.
  Allocation allocate(std::size_t bytes, StreamId stream = 0);
  void free(Block* block) noexcept;
  // The block is (also) used on `stream`: after free, it is reused only when the work
  // queued on `stream` until then has completed.
  void record_stream(Block* block, StreamId stream);

  // CUDA graph capture (Note [Private pools]): allocations on `stream` come from a new
  // private pool, whose id is returned, until end_allocate_to_pool. release_pool, once
  // the graph is gone, returns the pool's free segments to the source (unless a capture
  // is under way); the rest, such as segments that still hold a tensor made during the
  // capture, go back as any cached segment does, by empty_cache() or an allocation that
  // needs the room.
  PoolId begin_allocate_to_pool(StreamId stream);
  void end_allocate_to_pool(PoolId pool);
  void release_pool(PoolId pool);

  // Returns every cached free segment to the source (an error during a CUDA graph capture).
  void empty_cache();
  // Caps: at most `fraction` of the device's capacity, or at most `bytes`, reserved.
  // The smaller of the two is in force; 0 (or 1.0 for the fraction) lifts a cap.
  void set_memory_fraction(double fraction);
  void set_memory_limit(std::size_t bytes);
  std::size_t memory_limit() const;  // the cap in force: the device's capacity when none is set

  // The size of the block a request of `bytes` gets when it is split off a larger one
  // (the policy's rounding; a block not worth splitting is handed out whole).
  std::size_t round_size(std::size_t bytes) const;

  MemoryStats stats() const;
  void reset_peak_stats();
  // A table like torch.cuda.memory_summary().
  std::string summary() const;

  // Observers are called when reserved memory rises across pressure_threshold of the
  // cap (once per crossing: reserved must fall below it again before the next call), and
  // before an OutOfMemoryError is raised, after which the allocation is retried once.
  int add_pressure_observer(PressureObserver observer);
  void remove_pressure_observer(int id);
  void set_pressure_threshold(double fraction);

  // Notes end summary() and every OutOfMemoryError report while they are registered.
  int add_report_note(ReportNote note);
  void remove_report_note(int id);
  // How OutOfMemoryError reports name the remedies (memory/oom.h): a program's own words.
  void set_advice_terms(AdviceTerms terms);
  AdviceTerms advice_terms() const;

  // Keeps the last `entries` alloc/free/segment events (0 turns the history off). Also
  // turned on by EMBER_MEMORY_HISTORY=N.
  void record_history(std::size_t entries);
  Snapshot snapshot() const;

  AllocatorConfig config() const;
  // Applies a new configuration to later allocations (blocks already split stay so).
  void set_config(const AllocatorConfig& config);
  const std::string& device_name() const;
  Source& source();

  struct Impl;  // memory/caching_allocator_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

// The allocator of CPU tensors (host source, no capacity unless EMBER_HOST_MEMORY_LIMIT
// gives one in bytes).
CachingAllocator& host_allocator();

}  // namespace ember::memory
