// The caching allocator's allocation and freeing paths (policy: Note [Caching policy] in
// caching_allocator.h). Summaries, snapshots and OOM reports are in report.cpp.
#include <algorithm>
#include <bit>

#include "memory/caching_allocator_impl.h"

namespace ember::memory {

using Impl = CachingAllocator::Impl;

std::size_t Impl::cap() const {
  std::size_t c = device_total;
  if (limit_bytes > 0) c = std::min(c, limit_bytes);
  if (fraction > 0) c = std::min(c, static_cast<std::size_t>(fraction * static_cast<double>(device_total)));
  return c;
}

void Impl::record(TraceEvent::Action action, std::size_t address, std::size_t size, StreamId stream,
                  const AllocationSite& site) {
  if (history_capacity == 0) return;
  const int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  RawTraceEvent e{action, address, size, stream, t, site};
  if (history.size() < history_capacity) {
    history.push_back(e);
  } else {
    history[history_next] = e;
  }
  history_next = (history_next + 1) % history_capacity;
}

void Impl::update(StatArray MemoryStats::*stat, const Pool& pool, int64_t n) {
  (stats.*stat)[kAllPools].add(n);
  (stats.*stat)[pool.stat()].add(n);
}

std::size_t Impl::round_size(std::size_t bytes) const {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  const std::size_t div = config.roundup_power2_divisions;
  if (div > 0 && bytes > kMinBlockSize * div) {
    // One of `div` equal steps between the powers of two around `bytes`.
    const std::size_t floor2 = std::bit_floor(bytes);
    if (floor2 == bytes) return bytes;
    const std::size_t step = std::max<std::size_t>(floor2 / div, kMinBlockSize);
    return (bytes + step - 1) / step * step;
  }
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

PoolId Impl::pool_of(StreamId stream) const {
  for (const Capture& c : captures)
    if (c.stream == stream) return c.pool;
  return 0;
}

Block* Impl::best_fit(Pool& pool, PoolId private_pool, StreamId stream, std::size_t size) {
  Block key;
  key.private_pool = private_pool;
  key.stream = stream;
  key.size = size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->private_pool != private_pool || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  const std::size_t max_split = config.max_split_size;
  // An unsplittable (oversize) block serves only a request of nearly its size.
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size >= size + kLargeBuffer) return nullptr;
  pool.blocks.erase(it);
  b->cached = false;
  return b;
}

Block* Impl::new_segment(Pool& pool, PoolId private_pool, StreamId stream, std::size_t size,
                         std::vector<PressureEvent>& notes) {
  if (stats.reserved_bytes[kAllPools].current + static_cast<int64_t>(size) > static_cast<int64_t>(cap()))
    return nullptr;
  char* p = static_cast<char*>(source->allocate(size));
  if (!p) return nullptr;
  auto* seg = new Segment{p, size, stream, private_pool, &pool, nullptr};
  auto* b = new Block;
  b->size = size;
  b->stream = stream;
  b->private_pool = private_pool;
  b->pool = &pool;
  b->segment = seg;
  b->ptr = p;
  seg->head = b;
  segments.insert(seg);
  update(&MemoryStats::segment, pool, 1);
  update(&MemoryStats::reserved_bytes, pool, static_cast<int64_t>(size));
  if (size >= config.max_split_size) update(&MemoryStats::oversize_segments, pool, 1);
  ++stats.num_device_alloc;
  record(TraceEvent::Action::kSegmentAlloc, reinterpret_cast<std::size_t>(p), size, stream, current_site());
  const double reserved = static_cast<double>(stats.reserved_bytes[kAllPools].current);
  if (!above_threshold && reserved >= config.pressure_threshold * static_cast<double>(cap())) {
    above_threshold = true;
    if (!observers.empty()) notes.push_back(pressure_event(PressureEvent::Kind::kThresholdCrossed, 0));
  }
  return b;
}

// Cuts `block` (free, out of the pool) to `size`; the rest becomes a free block after it.
void Impl::split(Block* block, std::size_t size) {
  Pool& pool = *block->pool;
  const bool was_split = block->is_split();
  const std::size_t remaining = block->size - size;
  const bool worth = pool.small ? remaining >= kMinBlockSize : size < config.max_split_size && remaining > kSmallSize;
  if (!worth) {
    if (was_split) {  // it leaves the inactive split blocks whole
      update(&MemoryStats::inactive_split, pool, -1);
      update(&MemoryStats::inactive_split_bytes, pool, -static_cast<int64_t>(block->size));
    }
    return;
  }
  auto* rest = new Block;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->private_pool = block->private_pool;
  rest->pool = &pool;
  rest->segment = block->segment;
  rest->ptr = block->ptr + size;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  rest->freed_at = clock;
  rest->cached = true;
  pool.blocks.insert(rest);
  if (was_split) {  // the inactive split block shrank to the rest
    update(&MemoryStats::inactive_split_bytes, pool, -static_cast<int64_t>(size));
  } else {  // a new split: the rest is inactive
    update(&MemoryStats::inactive_split, pool, 1);
    update(&MemoryStats::inactive_split_bytes, pool, static_cast<int64_t>(remaining));
  }
}

Block* Impl::try_allocate(std::size_t bytes, StreamId stream, std::vector<PressureEvent>& notes) {
  const bool capturing = !captures.empty();  // then nothing is returned and no event queried
  if (!pending.empty() && !capturing) process_events();
  const std::size_t size = round_size(bytes);
  Pool& pool = pool_for(size);
  const PoolId private_pool = pool_of(stream);
  const std::size_t segment_size = pool.small ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer : min_segment(size);
  Block* block = best_fit(pool, private_pool, stream, size);
  if (!block) {
    if (config.garbage_collection_threshold > 0 && !capturing) garbage_collect(segment_size);
    block = new_segment(pool, private_pool, stream, segment_size, notes);
  }
  if (!block) {
    // Return every cached segment to the source, then try once more; when a whole
    // standard segment no longer fits, the smallest one that holds the request may.
    if (!capturing) {
      ++stats.num_alloc_retries;
      release_cached();
      block = new_segment(pool, private_pool, stream, segment_size, notes);
    }
    if (!block && min_segment(size) < segment_size)
      block = new_segment(pool, private_pool, stream, min_segment(size), notes);
    if (!block) return nullptr;
  }
  split(block, size);
  block->allocated = true;
  block->requested = bytes;
  block->site = current_site();
  ++clock;
  update(&MemoryStats::allocation, pool, 1);
  update(&MemoryStats::allocated_bytes, pool, static_cast<int64_t>(block->size));
  update(&MemoryStats::requested_bytes, pool, static_cast<int64_t>(bytes));
  update(&MemoryStats::active, pool, 1);
  update(&MemoryStats::active_bytes, pool, static_cast<int64_t>(block->size));
  if (block->size >= config.max_split_size) update(&MemoryStats::oversize_allocations, pool, 1);
  record(TraceEvent::Action::kAlloc, reinterpret_cast<std::size_t>(block->ptr), block->size, stream, block->site);
  return block;
}

// Merges `src` into `dst` when src is free and cached; returns the bytes taken over.
std::size_t Impl::merge(Block* dst, Block* src) {
  if (!src || src->allocated || !src->cached) return 0;
  src->pool->blocks.erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    else dst->segment->head = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const std::size_t n = src->size;
  dst->size += n;
  delete src;
  return n;
}

// `block` is no longer allocated and has no events pending: back into its pool.
void Impl::free_block(Block* block) {
  Pool& pool = *block->pool;
  const int64_t size = static_cast<int64_t>(block->size);
  int64_t split_blocks = 0, split_bytes = 0;
  for (Block* n : {block->prev, block->next}) {
    if (const std::size_t taken = merge(block, n)) {
      split_blocks -= 1;
      split_bytes -= static_cast<int64_t>(taken);
    }
  }
  if (block->is_split()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  block->freed_at = clock;
  block->cached = true;
  pool.blocks.insert(block);
  update(&MemoryStats::inactive_split, pool, split_blocks);
  update(&MemoryStats::inactive_split_bytes, pool, split_bytes);
  update(&MemoryStats::active, pool, -1);
  update(&MemoryStats::active_bytes, pool, -size);
  record(TraceEvent::Action::kFreeCompleted, reinterpret_cast<std::size_t>(block->ptr), static_cast<std::size_t>(size),
         block->stream, block->site);
}

// `block` is a whole cached segment: back to the source.
void Impl::release_segment(Block* block) {
  Pool& pool = *block->pool;
  Segment* seg = block->segment;
  pool.blocks.erase(block);
  source->free(seg->ptr, seg->size);
  update(&MemoryStats::segment, pool, -1);
  update(&MemoryStats::reserved_bytes, pool, -static_cast<int64_t>(seg->size));
  if (seg->size >= config.max_split_size) update(&MemoryStats::oversize_segments, pool, -1);
  ++stats.num_device_free;
  record(TraceEvent::Action::kSegmentFree, reinterpret_cast<std::size_t>(seg->ptr), seg->size, seg->stream,
         AllocationSite{});
  segments.erase(seg);
  delete seg;
  delete block;
  if (above_threshold &&
      static_cast<double>(stats.reserved_bytes[kAllPools].current) < config.pressure_threshold * static_cast<double>(cap()))
    above_threshold = false;
}

void Impl::release_cached() {
  wait_all_events();
  for (Pool* pool : {&large, &small}) {
    for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
      Block* b = *it++;
      if (releasable(b)) release_segment(b);
    }
  }
}

// Returns whole cached segments, least recently freed first, until a new segment of
// `incoming` bytes keeps reserved memory under garbage_collection_threshold of the cap.
// (PyTorch collects only once the threshold has been passed; collecting before passing
// it keeps the reserve under the threshold.)
void Impl::garbage_collect(std::size_t incoming) {
  const auto target = static_cast<int64_t>(config.garbage_collection_threshold * static_cast<double>(cap())) -
                      static_cast<int64_t>(incoming);
  if (stats.reserved_bytes[kAllPools].current <= target) return;
  std::vector<Block*> whole;
  for (Pool* pool : {&large, &small})
    for (Block* b : pool->blocks)
      if (releasable(b)) whole.push_back(b);
  std::sort(whole.begin(), whole.end(), [](const Block* a, const Block* b) { return a->freed_at < b->freed_at; });
  for (Block* b : whole) {
    if (stats.reserved_bytes[kAllPools].current <= target) break;
    release_segment(b);
  }
}

// Used on other streams: reusable once what they have queued so far is done.
void Impl::insert_events(Block* block) {
  for (StreamId s : block->stream_uses) {
    pending.emplace_back(source->record_event(s), block);
    ++block->pending_events;
  }
  block->stream_uses.clear();
}

void Impl::process_events() {
  auto done = std::remove_if(pending.begin(), pending.end(), [&](const std::pair<EventId, Block*>& e) {
    if (!source->event_done(e.first)) return false;
    source->release_event(e.first);
    if (--e.second->pending_events == 0) free_block(e.second);
    return true;
  });
  pending.erase(done, pending.end());
}

void Impl::wait_all_events() {
  if (pending.empty()) return;
  ++stats.num_sync_all_streams;
  for (auto& [event, block] : pending) {
    source->wait_event(event);
    source->release_event(event);
    if (--block->pending_events == 0) free_block(block);
  }
  pending.clear();
}

PressureEvent Impl::pressure_event(PressureEvent::Kind kind, std::size_t requested) const {
  PressureEvent e{kind, device};
  e.reserved = static_cast<std::size_t>(stats.reserved_bytes[kAllPools].current);
  e.allocated = static_cast<std::size_t>(stats.allocated_bytes[kAllPools].current);
  e.cap = cap();
  e.threshold = config.pressure_threshold;
  e.requested = requested;
  return e;
}

// ----- the public interface -----

CachingAllocator::CachingAllocator(std::unique_ptr<Source> source, AllocatorConfig config)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = source->device_name();
  impl_->device_total = source->info().total_bytes;
  impl_->source = std::move(source);
  impl_->config = config;
  if (const std::size_t entries = count_from_env("EMBER_MEMORY_HISTORY", 0, 0, kMaxMemoryHistory))
    record_history(entries);
}

CachingAllocator::~CachingAllocator() {
  Impl& m = *impl_;
  for (auto& [event, block] : m.pending) m.source->release_event(event);
  for (Segment* seg : m.segments) {
    m.source->free(seg->ptr, seg->size);
    for (Block* b = seg->head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    delete seg;
  }
}

Allocation CachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  Impl& m = *impl_;
  std::vector<PressureEvent> notes;
  std::vector<PressureObserver> observers;
  Block* block;
  {
    std::lock_guard lock(m.mu);
    block = m.try_allocate(bytes, stream, notes);
    if (!block || !notes.empty())
      for (auto& o : m.observers) observers.push_back(o.second);
  }
  for (const PressureEvent& e : notes)
    for (auto& o : observers) o(e);
  if (block) return {block->ptr, block->size, block};

  // Out of memory even after releasing the cache: the observers may free memory, and the
  // allocation is tried once more; after that, the failure is explained.
  if (!observers.empty()) {
    PressureEvent before;
    {
      std::lock_guard lock(m.mu);
      before = m.pressure_event(PressureEvent::Kind::kBeforeOom, bytes);
    }
    for (auto& o : observers) o(before);
    notes.clear();
    {
      std::lock_guard lock(m.mu);
      block = m.try_allocate(bytes, stream, notes);
    }
    if (block) return {block->ptr, block->size, block};
  }
  OomReport report;
  AdviceTerms terms;
  {
    std::lock_guard lock(m.mu);
    ++m.stats.num_ooms;
    m.record(TraceEvent::Action::kOom, 0, bytes, stream, current_site());
    report = m.oom_report(bytes, stream);
    terms = m.advice_terms;
  }
  advise(report, terms);  // without the lock: the program's estimate may allocate
  throw OutOfMemoryError(std::move(report));
}

void CachingAllocator::free(Block* block) noexcept {
  if (!block) return;
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  Pool& pool = *block->pool;
  block->allocated = false;
  m.update(&MemoryStats::allocation, pool, -1);
  m.update(&MemoryStats::allocated_bytes, pool, -static_cast<int64_t>(block->size));
  m.update(&MemoryStats::requested_bytes, pool, -static_cast<int64_t>(block->requested));
  if (block->size >= m.config.max_split_size) m.update(&MemoryStats::oversize_allocations, pool, -1);
  m.record(TraceEvent::Action::kFreeRequested, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream,
           block->site);
  if (block->stream_uses.empty()) {
    m.free_block(block);
  } else if (m.captures.empty()) {
    m.insert_events(block);
  } else {
    // An event recorded now could not be queried until the capture ends: record it then.
    ++block->pending_events;
    m.deferred.push_back(block);
  }
}

void CachingAllocator::record_stream(Block* block, StreamId stream) {
  std::lock_guard lock(impl_->mu);
  if (stream == block->stream) return;
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end())
    block->stream_uses.push_back(stream);
}

PoolId CachingAllocator::begin_allocate_to_pool(StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  EMBER_CHECK(m.pool_of(stream) == 0, "begin_allocate_to_pool: stream ", stream, " of ", m.device,
              " already allocates to private pool ", m.pool_of(stream));
  const PoolId pool = m.next_pool++;
  m.captures.push_back({pool, stream});
  m.live_pools.insert(pool);
  return pool;
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  std::erase_if(m.captures, [&](const Impl::Capture& c) { return c.pool == pool; });
  if (!m.captures.empty()) return;
  for (Block* b : m.deferred) {
    --b->pending_events;  // the placeholder free() counted
    m.insert_events(b);
    if (b->pending_events == 0) m.free_block(b);
  }
  m.deferred.clear();
}

void CachingAllocator::release_pool(PoolId pool) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  EMBER_CHECK(std::none_of(m.captures.begin(), m.captures.end(), [&](const Impl::Capture& c) { return c.pool == pool; }),
              "release_pool: private pool ", pool, " of ", m.device, " is still being captured into");
  m.live_pools.erase(pool);
  if (!m.captures.empty()) return;  // returned by a later empty_cache()
  for (Pool* p : {&m.large, &m.small})
    for (auto it = p->blocks.begin(); it != p->blocks.end();) {
      Block* b = *it++;
      if (b->private_pool == pool && m.releasable(b)) m.release_segment(b);
    }
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(impl_->mu);
  EMBER_CHECK(impl_->captures.empty(), "empty_cache: cannot return memory to ", impl_->device,
              " while a CUDA graph is being captured (cudaFree is not allowed during a capture)");
  impl_->release_cached();
}

void CachingAllocator::set_memory_fraction(double fraction) {
  EMBER_CHECK(fraction > 0 && fraction <= 1, "set_memory_fraction: the fraction must be in (0, 1], not ", fraction);
  std::lock_guard lock(impl_->mu);
  impl_->fraction = fraction >= 1 ? 0 : fraction;
}

void CachingAllocator::set_memory_limit(std::size_t bytes) {
  std::lock_guard lock(impl_->mu);
  impl_->limit_bytes = bytes;
}

std::size_t CachingAllocator::memory_limit() const {
  std::lock_guard lock(impl_->mu);
  return impl_->cap();
}

std::size_t CachingAllocator::round_size(std::size_t bytes) const {
  std::lock_guard lock(impl_->mu);
  return impl_->round_size(bytes);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(impl_->mu);
  MemoryStats s = impl_->stats;
  s.max_split_size = impl_->config.max_split_size == AllocatorConfig{}.max_split_size
                         ? 0
                         : static_cast<int64_t>(impl_->config.max_split_size);
  s.limit_bytes = static_cast<int64_t>(impl_->cap());
  return s;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(impl_->mu);
  MemoryStats& s = impl_->stats;
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes, &s.requested_bytes,
                       &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.oversize_allocations,
                       &s.oversize_segments})
    for (Stat& st : *a) st.reset_peak();
}

int CachingAllocator::add_pressure_observer(PressureObserver observer) {
  std::lock_guard lock(impl_->mu);
  impl_->observers.emplace_back(impl_->next_observer, std::move(observer));
  return impl_->next_observer++;
}

void CachingAllocator::remove_pressure_observer(int id) {
  std::lock_guard lock(impl_->mu);
  std::erase_if(impl_->observers, [&](const auto& o) { return o.first == id; });
}

void CachingAllocator::set_advice_terms(AdviceTerms terms) {
  std::lock_guard lock(impl_->mu);
  impl_->advice_terms = std::move(terms);
}

AdviceTerms CachingAllocator::advice_terms() const {
  std::lock_guard lock(impl_->mu);
  return impl_->advice_terms;
}

int CachingAllocator::add_report_note(ReportNote note) {
  std::lock_guard lock(impl_->mu);
  impl_->report_notes.emplace_back(impl_->next_note, std::move(note));
  return impl_->next_note++;
}

void CachingAllocator::remove_report_note(int id) {
  std::lock_guard lock(impl_->mu);
  std::erase_if(impl_->report_notes, [&](const auto& n) { return n.first == id; });
}

void CachingAllocator::set_pressure_threshold(double fraction) {
  EMBER_CHECK(fraction > 0 && fraction <= 1, "set_pressure_threshold: the fraction must be in (0, 1], not ", fraction);
  std::lock_guard lock(impl_->mu);
  impl_->config.pressure_threshold = fraction;
  impl_->above_threshold =
      static_cast<double>(impl_->stats.reserved_bytes[kAllPools].current) >= fraction * static_cast<double>(impl_->cap());
}

void CachingAllocator::record_history(std::size_t entries) {
  std::lock_guard lock(impl_->mu);
  impl_->history.clear();
  impl_->history.shrink_to_fit();  // the ring grows as events come, up to `entries`
  impl_->history_capacity = entries;
  impl_->history_next = 0;
}

AllocatorConfig CachingAllocator::config() const {
  std::lock_guard lock(impl_->mu);
  return impl_->config;
}

void CachingAllocator::set_config(const AllocatorConfig& config) {
  std::lock_guard lock(impl_->mu);
  impl_->config = config;
}

const std::string& CachingAllocator::device_name() const { return impl_->device; }
Source& CachingAllocator::source() { return *impl_->source; }

CachingAllocator& host_allocator() {
  static CachingAllocator* instance = [] {
    // Lives as long as the process. Unset: no cap; 0 is not "no cap" but an error.
    return new CachingAllocator(make_host_source(count_from_env("EMBER_HOST_MEMORY_LIMIT", 0, 1)));
  }();
  return *instance;
}

}  // namespace ember::memory
