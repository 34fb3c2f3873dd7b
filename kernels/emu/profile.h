// The emulator's profile counters: per launch, what Nsight Compute's memory sections
// report on a GPU (kernels/emu/README.md, "Profile"). Kernel translation units are
// instrumented for the checks (check.cpp, Note [Instrumented kernels]); each access that
// reaches the checks' runtime is handed here first, and counted when a profiled launch runs
// on the calling OS thread (one thread-local test otherwise).
//
//   EMBER_EMU_PROFILE=1 build-emu/tests/ember_tests_cuda_emu    # one line a launch, on stderr
//   EMBER_EMU_PROFILE=softmax,transpose ...                    # launches whose name holds one
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/emu/emu.h"
#include "kernels/emu/l1_model.h"
#include "kernels/emu/sm90_resources.h"

namespace ember::emu {

// One launch's counters, with Nsight Compute's definitions. A request is one warp-level
// instruction: the lanes of a warp that executed the same access site (return address) for
// the same time. Sectors are the 32-byte pieces of memory a request touches.
struct LaunchProfile {
  std::string kernel;  // as the launch names it
  std::string symbol;  // its mangled name (the cubin's), empty if not found
  dim3 grid, block;
  // The grid's blocks and those the emulator ran: fewer when the launch was sampled
  // (set_profile_sampling); the counts are the whole grid's either way.
  uint64_t grid_blocks = 0, blocks_run = 0;
  size_t dynamic_shared = 0;
  KernelResources resources;
  Occupancy occupancy;

  uint64_t global_load_requests = 0, global_load_sectors = 0, global_load_bytes = 0;
  uint64_t global_store_requests = 0, global_store_sectors = 0, global_store_bytes = 0;
  uint64_t global_atomic_requests = 0, global_atomic_sectors = 0;
  // Distinct bytes of global memory read and written: the compulsory DRAM traffic.
  uint64_t unique_read_bytes = 0, unique_write_bytes = 0;
  // Shared memory: 32 banks of 4 bytes; a 64-bit access is served in 2 phases (half-warps)
  // and a 128-bit one in 4 (quarter-warps), as on the GPU. A wavefront is one pass of the
  // banks; the ideal is one a phase, the excess are bank conflicts.
  uint64_t shared_load_requests = 0, shared_store_requests = 0;
  uint64_t shared_wavefronts = 0, shared_ideal_wavefronts = 0;
  // A thread's global loads with no global store of its own between them: loads the
  // compiler can issue together (a burst). Loads per burst estimate how many of a warp's
  // loads are in flight at once.
  uint64_t global_load_accesses = 0, global_load_bursts = 0;
  // Load sectors that miss a model of the SM's L1: per block, an LRU of 32-byte sectors as
  // large as its share of the L1 (l1_bytes_per_block). The rest are L1 hits (a block's
  // re-reads, lanes of its other requests in a sector); misses, stores and atomics are the
  // sectors between L2 and the SMs (l2_sectors). Note [L1 model] in l1_model.cpp.
  uint64_t global_load_l1_miss_sectors = 0;
  // Basic blocks of the host compiler's code the threads ran: an instruction count's
  // proxy, counted only in translation units built with -fsanitize-coverage=trace-pc (the
  // kernel bench's; zero elsewhere). Note [Basic blocks] in profile.cpp.
  uint64_t basic_blocks = 0;
  // Integer divide instructions (a quotient, a remainder or both) of 64-bit and of narrower
  // operands the threads ran, by divisors the compiler could not turn into a multiply: on
  // the GPU each is a called routine of tens of instructions (64-bit) or an inline sequence
  // (32-bit), where the host runs one instruction. Counted in the same translation units,
  // once set_profile_division_sites knows where the divides are (Note [Divisions]).
  uint64_t divisions_64 = 0, divisions_32 = 0;

  // Adds another profile's requests, sectors, bytes, wavefronts and bursts (not its shape).
  void add_counts(const LaunchProfile& other);
  uint64_t global_requests() const { return global_load_requests + global_store_requests + global_atomic_requests; }
  uint64_t global_sectors() const { return global_load_sectors + global_store_sectors + global_atomic_sectors; }
  uint64_t unique_bytes() const { return unique_read_bytes + unique_write_bytes; }
  uint64_t l2_sectors() const { return global_load_l1_miss_sectors + global_store_sectors + global_atomic_sectors; }
  uint64_t bank_conflicts() const { return shared_wavefronts - shared_ideal_wavefronts; }
  double load_sectors_per_request() const {
    return global_load_requests ? double(global_load_sectors) / global_load_requests : 0;
  }
  double loads_per_burst() const {
    return global_load_bursts ? double(global_load_accesses) / global_load_bursts : 0;
  }
  double store_sectors_per_request() const {
    return global_store_requests ? double(global_store_sectors) / global_store_requests : 0;
  }
  // "grid 264x1x1 block 256x1x1 smem 0 regs 32 occupancy 100% (warps) ld 4.0 sect/req ..."
  std::string summary() const;
};

// Which launches are profiled: EMBER_EMU_PROFILE at first use ("1" or "all": every launch;
// else a comma-separated list of parts of kernel names), printed on stderr as each ends.
// set_profile replaces it (an empty filter: none; "all": every launch) and the printing,
// and starts a new list of records.
void set_profile(const std::string& filter, bool print);
// The profiles of the launches since set_profile (or the last take), in launch order.
std::vector<LaunchProfile> take_profiles();
// Block sampling, for the kernel bench at full-size operands: a profiled launch of more
// than `blocks` blocks runs only `blocks` of them, spread evenly over the grid from its
// first block to its last, and its counts are scaled to the whole grid (Note [Sampled
// blocks] in profile.cpp). The blocks not run write nothing. 0 (the default): every block
// runs. Launches that are not profiled always run whole.
void set_profile_sampling(uint64_t blocks);
// A basic block of trace-pc code with integer divides: the return address of its call of
// __sanitizer_cov_trace_pc (the instruction after the call, at run time) and the divides
// between it and the block's end. set_profile_division_sites replaces the whole set; the
// profiles count a block's divides each time a thread enters it (Note [Divisions]).
struct DivisionSite {
  uintptr_t pc = 0;
  uint32_t div64 = 0, div32 = 0;
};
void set_profile_division_sites(const std::vector<DivisionSite>& sites);

namespace detail {

struct Launch;
struct Profiler;
extern thread_local Profiler* active_profiler __attribute__((tls_model("initial-exec")));

// From launch(): whether this launch is profiled (then profile_launch_end follows), and
// how many of its blocks to run (`blocks_run`: the grid's, or a sample's, Note [Sampled
// blocks]); run_grid runs sampled_block(i, ...) for i below it.
bool profile_launch_begin(const Launch& launch, const void* kernel_id, uint64_t& blocks_run);
// The i-th of `run` blocks spread evenly over a grid of `grid` blocks, the first and the
// last among them (all of them when run == grid).
inline uint64_t sampled_block(uint64_t i, uint64_t run, uint64_t grid) {
  return run >= grid || run < 2 ? i : uint64_t((unsigned __int128)i * (grid - 1) / (run - 1));
}
void profile_launch_end(const Launch& launch);
// From the block scheduler, on the OS thread that runs the block.
void profile_block_begin(const Launch& launch, const void* stacks, size_t stack_bytes, const void* dynamic_shared,
                         size_t dynamic_shared_bytes);
void profile_block_end();

void profile_record(const void* p, size_t size, bool read, bool write, bool atomic, void* ret);
// From the instrumentation's entry points (check.cpp's on_access).
inline void profile_access(const void* p, size_t size, bool read, bool write, bool atomic, void* ret) {
  if (__builtin_expect(active_profiler != nullptr, 0)) profile_record(p, size, read, write, atomic, ret);
}

}  // namespace detail
}  // namespace ember::emu
