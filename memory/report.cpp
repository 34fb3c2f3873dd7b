// What the caching allocator tells people: statistics as a map, the summary table,
// snapshots, and the OutOfMemoryError's report (Note [OOM verdict] in oom.h).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "memory/caching_allocator_impl.h"
#include "memory/format.h"

namespace ember::memory {

std::string format_size(std::size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string format_bytes(std::size_t bytes) {
  return bytes < 1024 ? format_size(bytes) : format_size(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

const char* verdict_name(OomVerdict v) {
  switch (v) {
    case OomVerdict::kImplausibleRequest: return "implausible request";
    case OomVerdict::kOutsideMemory: return "memory held outside ember";
    case OomVerdict::kFragmentation: return "fragmentation";
    case OomVerdict::kCap: return "the cap";
    case OomVerdict::kCapacity: return "capacity";
  }
  return "?";
}

std::map<std::string, int64_t> MemoryStats::to_map() const {
  std::map<std::string, int64_t> m;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto put = [&](const char* name, const StatArray& a) {
    for (int p = 0; p < kNumStatPools; ++p) {
      const std::string k = std::string(name) + "." + pools[p] + ".";
      m[k + "current"] = a[p].current;
      m[k + "peak"] = a[p].peak;
      m[k + "allocated"] = a[p].allocated;
      m[k + "freed"] = a[p].freed;
    }
  };
  put("allocation", allocation);
  put("segment", segment);
  put("active", active);
  put("inactive_split", inactive_split);
  put("allocated_bytes", allocated_bytes);
  put("requested_bytes", requested_bytes);
  put("reserved_bytes", reserved_bytes);
  put("active_bytes", active_bytes);
  put("inactive_split_bytes", inactive_split_bytes);
  put("oversize_allocations", oversize_allocations);
  put("oversize_segments", oversize_segments);
  m["num_alloc_retries"] = num_alloc_retries;
  m["num_ooms"] = num_ooms;
  m["num_device_alloc"] = num_device_alloc;
  m["num_device_free"] = num_device_free;
  m["num_sync_all_streams"] = num_sync_all_streams;
  m["max_split_size"] = max_split_size;
  m["limit_bytes"] = limit_bytes;
  return m;
}

namespace {

std::string short_bytes(int64_t b) {
  char buf[32];
  const double v = static_cast<double>(b);
  if (b < 10 * 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else if (b < 10ll * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.0f KiB", v / 1024);
  else if (b < 10ll * 1024 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.0f MiB", v / 1048576);
  else std::snprintf(buf, sizeof buf, "%.1f GiB", v / 1073741824);
  return buf;
}

}  // namespace

std::string CachingAllocator::summary() const {
  const MemoryStats s = stats();
  std::ostringstream os;
  const std::string rule(82, '='), thin(82, '-');  // as wide as the metric rows
  char line[160];
  os << "|" << rule << "|\n";
  std::snprintf(line, sizeof line, "| ember memory summary, %-59s|\n", device_name().c_str());
  os << line << "|" << thin << "|\n";
  std::snprintf(line, sizeof line, "| OOMs: %-9lld raw allocations: %-10lld raw frees: %-10lld retries: %-6lld|\n",
                static_cast<long long>(s.num_ooms), static_cast<long long>(s.num_device_alloc),
                static_cast<long long>(s.num_device_free), static_cast<long long>(s.num_alloc_retries));
  os << line;
  std::snprintf(line, sizeof line, "| cap in force: %-67s|\n", short_bytes(s.limit_bytes).c_str());
  os << line << "|" << rule << "|\n";
  std::snprintf(line, sizeof line, "| %-25s| %11s | %11s | %11s | %11s |\n", "metric", "current", "peak", "total alloc",
                "total freed");
  os << line << "|" << thin << "|\n";
  auto rows = [&](const char* name, const StatArray& a, bool bytes) {
    const char* sub[] = {name, "  from large pool", "  from small pool"};
    const int order[] = {kAllPools, kLargePool, kSmallPool};
    for (int i = 0; i < 3; ++i) {
      const Stat& st = a[order[i]];
      auto f = [&](int64_t v) { return bytes ? short_bytes(v) : std::to_string(v); };
      std::snprintf(line, sizeof line, "| %-25s| %11s | %11s | %11s | %11s |\n", sub[i], f(st.current).c_str(),
                    f(st.peak).c_str(), f(st.allocated).c_str(), f(st.freed).c_str());
      os << line;
    }
    os << "|" << thin << "|\n";
  };
  rows("allocated memory", s.allocated_bytes, true);
  rows("active memory", s.active_bytes, true);
  rows("requested memory", s.requested_bytes, true);
  rows("reserved memory", s.reserved_bytes, true);
  rows("non-releasable memory", s.inactive_split_bytes, true);
  rows("allocations", s.allocation, false);
  rows("active allocations", s.active, false);
  rows("segments", s.segment, false);
  rows("non-releasable allocs", s.inactive_split, false);
  rows("oversize allocations", s.oversize_allocations, false);
  rows("oversize segments", s.oversize_segments, false);
  std::vector<std::string> notes;
  {
    std::lock_guard lock(impl_->mu);
    notes = impl_->notes();
  }
  // Each note as rows of the table, its words wrapped to the width.
  for (const std::string& note : notes) {
    std::istringstream words(note);
    std::string word, row;
    auto flush = [&] {
      std::snprintf(line, sizeof line, "| %-81s|\n", row.c_str());
      os << line;
      row = "  ";
    };
    row.clear();
    while (words >> word) {
      if (row.size() > 2 && row.size() + 1 + word.size() > 80) flush();
      row += (row.empty() || row == "  " ? "" : " ") + word;
    }
    flush();
    os << "|" << thin << "|\n";
  }
  return os.str();
}

Snapshot CachingAllocator::snapshot() const {
  const Impl& m = *impl_;
  Snapshot snap;
  snap.stats = stats();
  std::lock_guard lock(m.mu);
  snap.device = m.device;
  std::vector<const Segment*> segs(m.segments.begin(), m.segments.end());
  std::sort(segs.begin(), segs.end(), [](const Segment* a, const Segment* b) { return a->ptr < b->ptr; });
  for (const Segment* seg : segs) {
    SegmentInfo si{reinterpret_cast<std::size_t>(seg->ptr), seg->size, seg->stream, seg->pool->small,
                   seg->private_pool, {}};
    for (const Block* b = seg->head; b; b = b->next) {
      BlockInfo bi;
      bi.address = reinterpret_cast<std::size_t>(b->ptr);
      bi.size = b->size;
      bi.requested = b->allocated ? b->requested : 0;
      bi.state = b->allocated ? BlockInfo::State::kAllocated
                 : b->pending_events > 0 ? BlockInfo::State::kAwaitingStreams
                                         : BlockInfo::State::kFree;
      if (bi.state != BlockInfo::State::kFree) {
        bi.op = b->site.op_name();
        bi.shape = b->site.shape_str();
      }
      si.blocks.push_back(std::move(bi));
    }
    snap.segments.push_back(std::move(si));
  }
  const std::size_t n = m.history.size();
  const std::size_t first = n < m.history_capacity ? 0 : m.history_next;
  for (std::size_t i = 0; i < n; ++i) {
    const RawTraceEvent& r = m.history[(first + i) % n];
    snap.history.push_back({r.action, r.address, r.size, r.stream, r.time_ns,
                            r.site.op ? r.site.op_name() : std::string(), r.site.shape_str()});
  }
  return snap;
}

OomReport CachingAllocator::Impl::oom_report(std::size_t requested, StreamId stream) const {
  OomReport r;
  const AllocationSite& site = current_site();
  r.device = device;
  r.requested = requested;
  r.op = site.op_name();
  r.shape = site.shape_str();
  const SourceInfo info = source->info();
  r.device_total = info.total_bytes;
  r.cap = cap();
  r.cap_set = limit_bytes > 0 || fraction > 0;
  r.device_free = info.free_bytes;
  r.allocated = static_cast<std::size_t>(stats.allocated_bytes[kAllPools].current);
  r.reserved = static_cast<std::size_t>(stats.reserved_bytes[kAllPools].current);
  r.reserved_free = r.reserved - r.allocated;
  r.outside = r.device_total > r.device_free + r.reserved ? r.device_total - r.device_free - r.reserved : 0;
  const std::size_t rounded = round_size(requested);
  const PoolId private_pool = pool_of(stream);
  r.small_pool = rounded <= kSmallSize;
  r.capturing = !captures.empty();
  std::vector<const Block*> live;
  for (const Segment* seg : segments)
    for (const Block* b = seg->head; b; b = b->next) {
      if (b->allocated) live.push_back(b);
      else if (b->pending_events > 0) r.awaiting_streams += b->size;
      else if (b->stream == stream && b->private_pool == private_pool && seg->pool->small == (rounded <= kSmallSize)) {
        r.pool_free += b->size;
        r.largest_free = std::max(r.largest_free, b->size);
      }
    }
  const std::size_t top = std::min<std::size_t>(5, live.size());
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(top), live.end(),
                    [](const Block* a, const Block* b) { return a->size > b->size; });
  for (std::size_t i = 0; i < top; ++i)
    r.largest_live.push_back({live[i]->size, live[i]->site.op_name(), live[i]->site.shape_str()});

  const StepInfo& step = current_step();
  if (step.batch > 0) {
    // The step had allocated this much (plus the failing request) when it failed: a lower
    // bound of its footprint, so the batch below is an upper bound of what fits.
    r.batch = step.batch;
    const std::size_t used = r.allocated + rounded > step.allocated_at_start ? r.allocated + rounded - step.allocated_at_start : 0;
    const std::size_t budget = r.cap > step.allocated_at_start ? r.cap - step.allocated_at_start : 0;
    if (used > 0)
      r.batch_that_fits =
          static_cast<int64_t>(static_cast<double>(step.batch) * static_cast<double>(budget) / static_cast<double>(used));
  }
  r.rounded = rounded;
  r.segment = min_segment(rounded);
  r.max_split_size = config.max_split_size;
  r.notes = notes();
  return r;
}

std::vector<std::string> CachingAllocator::Impl::notes() const {
  std::vector<std::string> out;
  for (const auto& [id, note] : report_notes) out.push_back(note());
  return out;
}

std::string OomReport::message() const {
  std::ostringstream os;
  os << "out of memory on " << device << ": " << op << " asked for " << format_bytes(requested);
  if (!shape.empty()) os << " (a " << shape << " tensor)";
  os << "\n  device capacity:          " << format_bytes(device_total);
  os << "\n  cap in force:             ";
  if (cap_set)
    os << format_bytes(cap) << ", the most ember may reserve on " << device << " (set by "
       << (cap_origin.empty() ? std::string("set_memory_limit / set_memory_fraction") : cap_origin) << ")";
  else
    os << "none (the whole device)";
  os << "\n  free on the device:       " << format_bytes(device_free);
  os << "\n  used outside ember:       " << format_bytes(outside);
  os << "\n  allocated by ember:       " << format_bytes(allocated);
  os << "\n  reserved by ember:        " << format_bytes(reserved);
  os << "\n  reserved but unallocated: " << format_bytes(reserved_free) << "; in the request's "
     << (small_pool ? "small pool (requests up to 1 MiB): " : "large pool: ") << format_bytes(pool_free)
     << ", largest block " << format_bytes(largest_free);
  os << "\n  waiting on other streams: " << format_bytes(awaiting_streams);
  if (capturing) os << "\n  during CUDA graph capture: cached memory was not returned to the device";
  if (!largest_live.empty()) {
    os << "\n  largest live allocations:";
    for (const LiveBlock& b : largest_live)
      os << "\n    " << format_bytes(b.bytes) << "  " << b.op << (b.shape.empty() ? "" : " " + b.shape);
  }
  for (const std::string& note : notes) os << "\n  note: " << note;
  os << "\nverdict: " << verdict_name(verdict) << "\nadvice: " << advice;
  return os.str();
}

}  // namespace ember::memory
