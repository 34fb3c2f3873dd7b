// What an sm_90 SM gives a kernel: its cubin's registers, static shared memory and stack
// (from the table of an nvcc build, found by the kernel's mangled name), and the blocks and
// warps CUDA's occupancy rules let an SM hold with them. The profile counters'
// (profile.h) occupancy and L1 share (l1_model.h) come from here.
#pragma once

#include <cstddef>
#include <string>

namespace ember::emu {

// Registers, static shared memory and stack of a kernel's sm_90 cubin, from the table
// scripts/cubin-resources.py makes of an nvcc build (bench/calibration/sm90_resources.tsv,
// or the file EMBER_EMU_RESOURCES names), found by the kernel's mangled name.
struct KernelResources {
  bool known = false;
  int registers = 0;
  size_t static_shared = 0, stack = 0;
};

// CUDA's occupancy rules for sm_90: 65536 registers (allocated 256 a warp), 228 KiB of
// shared memory (1 KiB of it reserved a block), 64 warps and 32 blocks an SM.
struct Occupancy {
  int blocks_per_sm = 0;
  int warps_per_sm = 0;
  const char* limiter = "";  // "registers", "shared memory", "warps", "blocks"
  double fraction() const { return warps_per_sm / 64.0; }
};
Occupancy sm90_occupancy(const KernelResources& r, unsigned threads_per_block, size_t dynamic_shared);

namespace detail {

// The mangled name of the kernel function at `fn` (the cubin's), empty if not found.
std::string mangled_name(const void* fn);
// The table's row for that name (known = false when it has none).
KernelResources resources_of(const std::string& symbol);

}  // namespace detail
}  // namespace ember::emu
