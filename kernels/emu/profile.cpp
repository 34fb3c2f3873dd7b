// The emulator's profile counters (kernels/emu/profile.h).
//
// Note [Requests from fibers]: a block's threads run one after another as fibers, so the
// 32 accesses of one warp-level instruction arrive at different times. An access belongs
// to the request keyed by (warp, access site, how many times this lane had reached that
// site before): the n-th execution of a load by each lane of a warp is one instruction on
// the GPU when the warp does not diverge, which is what the kernels' loops are. The
// requests of a block are kept until it ends, then counted. Load sectors hit or miss the
// L1 model (Note [L1 model] in l1_model.cpp).
//
// Note [Modelled instructions]: ldmatrix, cp.async and mma.sync run as models
// (kernels/emu/tensor_core.h) whose bookkeeping (per-warp exchange slots in thread-locals
// that the profile takes for shared memory, per-thread cp.async queues on the heap, the
// lane-by-lane gathers) is not what the GPU issues. Inside a ModelScope the profiler is set
// aside, and the model reports each instruction's accesses instead (profile_read and
// profile_write, model.h), one lane at a time, never merged with the lane's neighbouring
// access (Note [Split vectors]): ldmatrix.xN is one shared load request of the lanes'
// 16-byte rows (quarter-warp phases, as any 128-bit access), cp.async one global load of
// its source bytes (.cg for 16 bytes: past the L1, every sector a miss) and one shared
// store of its destination, at issue; mma.sync touches no memory.
//
// Note [Sampled blocks]: set_profile_sampling(S) has a profiled launch of G > S blocks run
// S of them, block floor(i (G-1) / (S-1)) for i < S: evenly spread, the first and the last
// among them. The kernel bench runs its rows at full-size operands so: a grid-stride kernel
// whose grid the SM count caps (each block looping over its share) is emulated with each
// block's full loop, as the GPU runs it, at S/G of the cost. The last block is counted as
// it is and the S-1 others stand for the G-1 blocks before it: their counts are scaled by
// (G-1)/(S-1), here and nowhere else (profile_launch_end), so a grid of equal blocks with a
// short tail (one element a thread, n not a multiple of the block) scales exactly. Per-block
// counters stay exact (the L1 model's LRU is per block). Unique bytes: a byte only one of
// the S-1 blocks touched is that block's own data, scaled with the rest; a byte several
// sampled blocks touched is data the grid shares (a broadcast operand, layer norm's gamma),
// counted once (scaled, the [1, 4096] operand of the broadcast add was counted 16 times at
// S = 66). By byte, not sector: blocks that read every 8th float of a transposed view share
// sectors, not bytes. Data that a few blocks share (a halo) is seen by one sampled block
// and scaled.
// A kernel whose blocks wait on one another (a flag another block sets) would hang sampled;
// none of kernels/cuda does. The blocks not run write nothing: counts that depend on the
// values (a data-dependent branch) see the operands' values, and outputs of a sampled
// launch that a later launch reads hold what was there before.
#include "kernels/emu/profile.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "base/error.h"
#include "kernels/emu/block.h"
#include "kernels/emu/l1_model.h"
#include "kernels/emu/division_sites.h"
#include "kernels/emu/memory_ranges.h"
#include "kernels/emu/model.h"

namespace ember::emu {

namespace {

// Every count of a LaunchProfile (not its shape): what add_counts adds and sampling scales.
constexpr uint64_t LaunchProfile::*kCounts[] = {
    &LaunchProfile::global_load_requests,   &LaunchProfile::global_load_sectors,
    &LaunchProfile::global_load_bytes,      &LaunchProfile::global_store_requests,
    &LaunchProfile::global_store_sectors,   &LaunchProfile::global_store_bytes,
    &LaunchProfile::global_atomic_requests, &LaunchProfile::global_atomic_sectors,
    &LaunchProfile::unique_read_bytes,      &LaunchProfile::unique_write_bytes,
    &LaunchProfile::shared_load_requests,   &LaunchProfile::shared_store_requests,
    &LaunchProfile::shared_wavefronts,      &LaunchProfile::shared_ideal_wavefronts,
    &LaunchProfile::global_load_accesses,   &LaunchProfile::global_load_bursts,
    &LaunchProfile::global_load_l1_miss_sectors, &LaunchProfile::basic_blocks,
    &LaunchProfile::divisions_64,           &LaunchProfile::divisions_32};

}  // namespace

void LaunchProfile::add_counts(const LaunchProfile& o) {
  for (auto count : kCounts) this->*count += o.*count;
}

std::string LaunchProfile::summary() const {
  char buf[768];
  const double ld = load_sectors_per_request(), st = store_sectors_per_request();
  std::snprintf(buf, sizeof buf,
                "grid %ux%ux%u block %ux%ux%u dyn smem %zu | regs %s smem %zu occupancy %.0f%% (%d blocks/SM, %s) | "
                "global ld %llu req %.2f sect/req %.1f/burst %llu L1-missing sect, st %llu req %.2f sect/req, atom %llu req; unique %llu B read, %llu B "
                "written | shared ld %llu st %llu req, %llu wavefronts (%llu ideal, %llu bank conflicts)",
                grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_shared,
                resources.known ? std::to_string(resources.registers).c_str() : "?", resources.static_shared,
                100 * occupancy.fraction(), occupancy.blocks_per_sm, occupancy.limiter,
                (unsigned long long)global_load_requests, ld, loads_per_burst(),
                (unsigned long long)global_load_l1_miss_sectors, (unsigned long long)global_store_requests, st,
                (unsigned long long)global_atomic_requests, (unsigned long long)unique_read_bytes,
                (unsigned long long)unique_write_bytes, (unsigned long long)shared_load_requests,
                (unsigned long long)shared_store_requests, (unsigned long long)shared_wavefronts,
                (unsigned long long)shared_ideal_wavefronts, (unsigned long long)bank_conflicts());
  std::string out = buf;
  if (blocks_run < grid_blocks)
    out += " | sampled: " + std::to_string(blocks_run) + " of " + std::to_string(grid_blocks) + " blocks run";
  return out;
}

namespace detail {

thread_local Profiler* active_profiler __attribute__((tls_model("initial-exec"))) = nullptr;
// The profiler a ModelScope set aside, and how many scopes are open (Note [Modelled instructions]).
thread_local Profiler* model_profiler __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local unsigned model_depth __attribute__((tls_model("initial-exec"))) = 0;

namespace {

// --- What to profile ----------------------------------------------------------------------

struct Settings {
  std::atomic<bool> any{false};  // some launches are wanted: the test without the lock
  std::mutex mu;
  bool all = false, print = false;
  uint64_t sample = 0;  // set_profile_sampling
  std::vector<std::string> names;
  std::vector<LaunchProfile> records;
  Settings() {
    if (const char* env = std::getenv("EMBER_EMU_PROFILE"); env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0)
      configure(std::strcmp(env, "1") == 0 ? "all" : env, true);
  }
  void configure(std::string_view filter, bool p) {
    all = filter == "all";
    print = p;
    names.clear();
    while (!all && !filter.empty()) {
      const size_t comma = filter.find(',');
      if (comma != 0) names.emplace_back(filter.substr(0, comma));
      filter = comma == std::string_view::npos ? std::string_view() : filter.substr(comma + 1);
    }
    any = all || !names.empty();
  }
  bool wanted(std::string_view kernel) const {
    if (all) return true;
    for (const std::string& n : names)
      if (kernel.find(n) != std::string_view::npos) return true;
    return false;
  }
};

Settings& settings() {
  static Settings s;
  return s;
}

// --- Counting ------------------------------------------------------------------------------

enum Kind : uint8_t { kLoad, kStore, kAtomic };

struct Lane {
  uint8_t lane;
  uint8_t size;
  uintptr_t addr;
};

struct Request {
  Kind kind;
  bool shared;
  std::vector<Lane> lanes;
  std::vector<uintptr_t> l1_missed;  // sectors of a load that missed the L1 model
};

struct Key {
  uintptr_t pc;
  uint32_t warp, occurrence;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return (k.pc * 0x9E3779B97F4A7C15ull) ^ (uint64_t(k.warp) << 32 | k.occurrence) * 0xC2B2AE3D27D4EB4Full;
  }
};

// Per 32-byte sector of global memory: which of its bytes were read and written; in a
// launch's map, also those that more than one block or a sample's last block read or wrote
// (Note [Sampled blocks]).
struct SectorBytes {
  uint32_t read = 0, written = 0;
  uint32_t read_once = 0, written_once = 0;
};
using SectorMap = std::unordered_map<uintptr_t, SectorBytes>;

// The counters of one launch, merged from its blocks. Sampled (Note [Sampled blocks]), the
// last block's are kept apart, to be added unscaled.
struct LaunchState {
  std::mutex mu;
  bool sampled = false;
  LaunchProfile profile, last;
  SectorMap sectors;
};

std::mutex launches_mu;
std::atomic<int> profiled_launches{0};  // running now: blocks look theirs up only then
std::map<const Launch*, std::shared_ptr<LaunchState>>& launches() {
  static std::map<const Launch*, std::shared_ptr<LaunchState>> m;
  return m;
}

}  // namespace

// One OS thread's profiler: the block it runs.
struct Profiler {
  std::shared_ptr<LaunchState> launch;
  bool last_of_sample = false;  // the last block of a sampled launch (Note [Sampled blocks])
  Range stacks, dynamic_shared, params;
  std::vector<Range> tls;
  Range own[4];
  bool tls_known = false;
  std::unordered_map<Key, Request, KeyHash> requests;  // node-based: `last` stays valid
  Request* last = nullptr;  // the request of the block's last access (Note [Split vectors])
  size_t last_lane = 0;
  unsigned last_thread = 0;
  Kind last_kind = kLoad;
  uintptr_t last_start = 0, last_end = 0;
  std::vector<bool> in_burst;  // per thread: its last global access was a load
  uint64_t load_accesses = 0, load_bursts = 0;
  SectorLru l1;
  uint64_t basic_blocks = 0, divisions_64 = 0, divisions_32 = 0;
  std::vector<std::unordered_map<uintptr_t, uint32_t>> occurrences;  // per thread: site -> times reached
  SectorMap sectors;

  void access(uintptr_t addr, size_t size, bool read, bool write, bool atomic, uintptr_t pc, bool l1_cached = true);
  void finish_block();
};

namespace {

Profiler& this_thread_profiler() {
  thread_local Profiler p;
  return p;
}

unsigned linear_thread() { return thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z); }

// Wavefronts of one shared-memory request: per phase (all lanes; half-warps for 64-bit
// accesses, quarter-warps for 128-bit), the most distinct 4-byte words any bank serves.
void count_shared(const Request& r, LaunchProfile& out) {
  size_t width = 0;
  for (const Lane& l : r.lanes) width = std::max<size_t>(width, l.size);
  const unsigned phases = width >= 16 ? 4 : width == 8 ? 2 : 1;
  for (unsigned phase = 0; phase < phases; ++phase) {
    uintptr_t words[32][32];  // per bank, the distinct words asked of it
    unsigned count[32] = {};
    unsigned most = 0;
    bool any = false;
    for (const Lane& l : r.lanes) {
      if (l.lane * phases / 32 != phase) continue;
      any = true;
      for (uintptr_t w = l.addr >> 2; w <= (l.addr + l.size - 1) >> 2; ++w) {
        const unsigned bank = w & 31;
        bool seen = false;
        for (unsigned i = 0; i < std::min(count[bank], 32u); ++i) seen |= words[bank][i] == w;
        if (seen) continue;
        if (count[bank] < 32) words[bank][count[bank]] = w;
        most = std::max(most, ++count[bank]);
      }
    }
    if (!any) continue;
    out.shared_wavefronts += std::max(most, 1u);
    out.shared_ideal_wavefronts += 1;
  }
}

void count_global(const Request& r, LaunchProfile& out) {
  uintptr_t sectors[32 * 5];
  size_t n = 0;
  uint64_t bytes = 0;
  for (const Lane& l : r.lanes) {
    bytes += l.size;
    for (uintptr_t s = l.addr >> 5; s <= (l.addr + l.size - 1) >> 5 && n < std::size(sectors); ++s) sectors[n++] = s;
  }
  std::sort(sectors, sectors + n);
  const uint64_t distinct = std::unique(sectors, sectors + n) - sectors;
  // A sector the fibers' order let fall out of the LRU between two lanes of one request
  // (Note [L1 model]) missed once: the request asks the L2 for it once.
  std::vector<uintptr_t> missed = r.l1_missed;
  std::sort(missed.begin(), missed.end());
  out.global_load_l1_miss_sectors += std::unique(missed.begin(), missed.end()) - missed.begin();
  switch (r.kind) {
    case kLoad: out.global_load_requests++, out.global_load_sectors += distinct, out.global_load_bytes += bytes; break;
    case kStore: out.global_store_requests++, out.global_store_sectors += distinct, out.global_store_bytes += bytes; break;
    case kAtomic: out.global_atomic_requests++, out.global_atomic_sectors += distinct; break;
  }
}

}  // namespace

void Profiler::access(uintptr_t addr, size_t size, bool read, bool write, bool atomic, uintptr_t pc, bool l1_cached) {
  if (stacks.holds(addr) || params.holds(addr)) return;
  bool shared = dynamic_shared.holds(addr);
  if (!shared) {
    for (const Range& r : tls) shared |= r.holds(addr);
    if (shared)
      for (const Range& r : own)
        if (r.holds(addr)) return;
  }
  const unsigned thread = linear_thread();
  const Kind kind = atomic ? kAtomic : write ? kStore : kLoad;
  // Note [Split vectors]: the host compiler may split a vector access (a Pack's 16-byte load)
  // into element accesses, one after another; the thread's next access that continues its
  // last one inside the same aligned 16 bytes joins it, as nvcc's one vector access.
  const bool merged = last != nullptr && last_thread == thread && last_kind == kind && !atomic &&
                      last->shared == shared && last_end == addr && ((addr - last_start) + size) <= 16 &&
                      (last_start >> 4) == ((addr + size - 1) >> 4);
  if (merged) {
    Lane& l = last->lanes[last_lane];
    l.size = uint8_t(l.size + size);
    last_end += size;
  } else {
    const uint32_t occurrence = occurrences[thread][pc]++;
    Request& r = requests[Key{pc, thread / 32, occurrence}];
    if (r.lanes.empty()) {
      r.kind = kind;
      r.shared = shared;
    }
    // A range access (a struct copy) larger than a vector is counted in 16-byte pieces.
    for (size_t done = 0; done < size; done += 16)
      r.lanes.push_back(Lane{uint8_t(thread % 32), uint8_t(std::min<size_t>(16, size - done)), addr + done});
    last = &r, last_lane = r.lanes.size() - 1, last_thread = thread, last_kind = kind;
    last_start = addr + (size > 16 ? (size - 1) / 16 * 16 : 0), last_end = addr + size;
  }
  if (shared) return;
  if (kind == kLoad && !merged) {
    ++load_accesses;
    if (!in_burst[thread]) ++load_bursts, in_burst[thread] = true;
  } else if (kind != kLoad) {
    in_burst[thread] = false;
  }
  for (uintptr_t a = addr; a < addr + size;) {
    const uintptr_t sector = a >> 5, end = std::min<uintptr_t>(addr + size, (sector + 1) << 5);
    const uint32_t bits = uint32_t(((uint64_t{1} << (end - a)) - 1) << (a & 31));
    if (kind == kLoad && (!l1_cached || !l1.touch(sector))) last->l1_missed.push_back(sector);
    SectorBytes& s = sectors[sector];
    if (read) s.read |= bits;
    if (write) s.written |= bits;
    a = end;
  }
}

void Profiler::finish_block() {
  LaunchProfile counts;
  for (const auto& [key, r] : requests) {
    if (r.shared) {
      (r.kind == kLoad ? counts.shared_load_requests : counts.shared_store_requests)++;
      count_shared(r, counts);
    } else {
      count_global(r, counts);
    }
  }
  requests.clear();
  last = nullptr;
  std::lock_guard lock(launch->mu);
  LaunchProfile& p = last_of_sample ? launch->last : launch->profile;
  p.add_counts(counts);
  p.global_load_accesses += std::exchange(load_accesses, 0);
  p.global_load_bursts += std::exchange(load_bursts, 0);
  p.basic_blocks += std::exchange(basic_blocks, 0);
  p.divisions_64 += std::exchange(divisions_64, 0);
  p.divisions_32 += std::exchange(divisions_32, 0);
  for (const auto& [sector, bytes] : sectors) {
    SectorBytes& s = launch->sectors[sector];
    s.read_once |= last_of_sample ? bytes.read : s.read & bytes.read;
    s.written_once |= last_of_sample ? bytes.written : s.written & bytes.written;
    s.read |= bytes.read;
    s.written |= bytes.written;
  }
  sectors.clear();
}

bool profile_launch_begin(const Launch& launch, const void* kernel_id, uint64_t& blocks_run) {
  const uint64_t grid_blocks = uint64_t(launch.grid.x) * launch.grid.y * launch.grid.z;
  blocks_run = grid_blocks;
  Settings& s = settings();
  if (!s.any.load(std::memory_order_relaxed)) return false;
  uint64_t sample = 0;
  {
    std::lock_guard lock(s.mu);
    if (!s.wanted(launch.kernel)) return false;
    sample = s.sample;
  }
  auto state = std::make_shared<LaunchState>();
  state->sampled = sample > 0 && grid_blocks > sample;
  if (state->sampled) blocks_run = sample;
  LaunchProfile& p = state->profile;
  p.kernel = launch.kernel;
  p.symbol = mangled_name(kernel_id);
  p.grid = launch.grid;
  p.block = launch.block;
  p.grid_blocks = grid_blocks;
  p.blocks_run = blocks_run;
  p.dynamic_shared = launch.shared_bytes;
  p.resources = resources_of(p.symbol);
  p.occupancy = sm90_occupancy(p.resources, launch.block.x * launch.block.y * launch.block.z, launch.shared_bytes);
  std::lock_guard lock(launches_mu);
  launches()[&launch] = std::move(state);
  ++profiled_launches;
  return true;
}

void profile_launch_end(const Launch& launch) {
  std::shared_ptr<LaunchState> state;
  {
    std::lock_guard lock(launches_mu);
    auto it = launches().find(&launch);
    if (it == launches().end()) return;
    state = std::move(it->second);
    launches().erase(it);
    --profiled_launches;
  }
  LaunchProfile& p = state->profile;
  for (const auto& [sector, bytes] : state->sectors) {
    // Sampled, bytes one of the S-1 first blocks alone touched stand for the others' (scaled);
    // those several blocks or the last touched are counted once.
    const uint32_t read_once = state->sampled ? bytes.read_once : 0;
    const uint32_t written_once = state->sampled ? bytes.written_once : 0;
    p.unique_read_bytes += std::popcount(bytes.read & ~read_once);
    p.unique_write_bytes += std::popcount(bytes.written & ~written_once);
    state->last.unique_read_bytes += std::popcount(read_once);
    state->last.unique_write_bytes += std::popcount(written_once);
  }
  if (state->sampled) {  // Note [Sampled blocks]: the S-1 first stand for the G-1 first
    const double scale = double(p.grid_blocks - 1) / double(p.blocks_run - 1);
    for (auto count : kCounts) p.*count = uint64_t(std::llround(double(p.*count) * scale));
    p.add_counts(state->last);
  }
  Settings& s = settings();
  std::lock_guard lock(s.mu);
  if (s.print) std::fprintf(stderr, "CUDA emulator profile: %s: %s\n", p.kernel.c_str(), p.summary().c_str());
  s.records.push_back(std::move(p));
}

void profile_block_begin(const Launch& launch, const void* stacks, size_t stack_bytes, const void* dynamic_shared,
                         size_t dynamic_shared_bytes) {
  if (profiled_launches.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<LaunchState> state;
  {
    std::lock_guard lock(launches_mu);
    auto it = launches().find(&launch);
    if (it == launches().end()) return;
    state = it->second;
  }
  Profiler& p = this_thread_profiler();
  if (!p.tls_known) {
    p.tls = shared_tls_ranges();
    p.own[0] = range_of(thread_idx);
    p.own[1] = range_of(block_idx);
    p.own[2] = range_of(block_dim);
    p.own[3] = range_of(grid_dim);
    p.tls_known = true;
  }
  p.last_of_sample = state->sampled && block_idx.x + uint64_t(launch.grid.x) * (block_idx.y + uint64_t(launch.grid.y) * block_idx.z) ==
                                           state->profile.grid_blocks - 1;
  p.launch = std::move(state);
  const auto s = reinterpret_cast<uintptr_t>(stacks);
  p.stacks = Range{s, s + stack_bytes};
  const auto d = reinterpret_cast<uintptr_t>(dynamic_shared);
  p.dynamic_shared = Range{d, d + dynamic_shared_bytes};
  // The kernel's arguments (constant memory on a GPU): the launch's closure, at most
  // CUDA's 32764 bytes of parameters, on the launching thread's stack.
  const auto c = reinterpret_cast<uintptr_t>(launch.closure);
  p.params = Range{c, c + 32764};
  const unsigned threads = launch.block.x * launch.block.y * launch.block.z;
  p.occurrences.assign(threads, {});
  p.in_burst.assign(threads, false);
  const LaunchProfile& lp = p.launch->profile;
  p.l1.reset(l1_bytes_per_block(lp.occupancy, lp.resources.static_shared + lp.dynamic_shared) / 32);
  active_profiler = &p;
  // A fiber that failed inside a ModelScope never closed it.
  model_profiler = nullptr;
  model_depth = 0;
}

void profile_block_end() {
  Profiler* p = active_profiler != nullptr ? active_profiler : model_profiler;
  active_profiler = model_profiler = nullptr;
  model_depth = 0;
  if (p == nullptr) return;
  p->finish_block();
  p->launch.reset();
}

// Note [Basic blocks]: GCC's and Clang's -fsanitize-coverage=trace-pc call this at the
// start of every basic block of the code they compile; ember_bench_cuda_kernels and the
// divide counts' test are built with it (bench/, tests/CMakeLists.txt), nothing else, so
// the emulator and the kernel tests pay nothing. The count is of the host compiler's
// blocks after its optimisations, not of nvcc's SASS: a proxy for the instructions index
// arithmetic and loops cost, per thread.
extern "C" void __sanitizer_cov_trace_pc() {
  if (Profiler* p = active_profiler; __builtin_expect(p != nullptr, 0)) {
    ++p->basic_blocks;
    // The block's integer divides, if it has any (Note [Divisions] in division_sites.cpp).
    if (const DivisionSite* s = division_site(reinterpret_cast<uintptr_t>(__builtin_return_address(0)))) {
      p->divisions_64 += s->div64;
      p->divisions_32 += s->div32;
    }
  }
}

void profile_record(const void* ptr, size_t size, bool read, bool write, bool atomic, void* ret) {
  active_profiler->access(reinterpret_cast<uintptr_t>(ptr), size, read, write, atomic, reinterpret_cast<uintptr_t>(ret));
}

void profile_model_begin() {
  if (model_depth++ == 0) model_profiler = std::exchange(active_profiler, nullptr);
}

void profile_model_end() {
  if (--model_depth == 0) active_profiler = std::exchange(model_profiler, nullptr);
}

namespace {

// One lane's access by a modelled instruction: its own request, whatever the lane's
// previous access was (Note [Modelled instructions]).
void profile_instruction(const void* ptr, size_t size, bool write, bool l1_cached, uintptr_t pc) {
  Profiler* p = model_profiler != nullptr ? model_profiler : active_profiler;
  if (p == nullptr || size == 0) return;
  p->last = nullptr;
  p->access(reinterpret_cast<uintptr_t>(ptr), size, !write, write, false, pc, l1_cached);
  p->last = nullptr;
}

}  // namespace

void profile_read(const void* p, size_t bytes, bool l1) {
  profile_instruction(p, bytes, false, l1, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

void profile_write(const void* p, size_t bytes) {
  profile_instruction(p, bytes, true, true, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

}  // namespace detail

void set_profile(const std::string& filter, bool print) {
  detail::Settings& s = detail::settings();
  std::lock_guard lock(s.mu);
  s.configure(filter, print);
  s.records.clear();
}

void set_profile_sampling(uint64_t blocks) {
  EMBER_CHECK(blocks != 1, "CUDA emulator: a sample of blocks holds the first and the last, at least 2, not 1 (0: all)");
  detail::Settings& s = detail::settings();
  std::lock_guard lock(s.mu);
  s.sample = blocks;
}

std::vector<LaunchProfile> take_profiles() {
  detail::Settings& s = detail::settings();
  std::lock_guard lock(s.mu);
  return std::exchange(s.records, {});
}

}  // namespace ember::emu
