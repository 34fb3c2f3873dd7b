// What the emulator's two halves share: a launch as the block scheduler (block.cpp) sees
// it, and the failure it reports to the launcher (launch.cpp). Internal to kernels/emu.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/emu/emu.h"

namespace ember::emu::detail {

struct Launch {
  const char* kernel;
  dim3 grid, block;
  size_t shared_bytes;
  Invoke invoke;
  const void* closure;
  uint64_t sequence;  // launches before this one: the order of threads alternates with it
};

// Thrown out of a block's scheduler (never across a fiber switch).
struct BlockFailure {
  std::string message;
};

// Runs one block of `launch` on the calling OS thread's fibers; throws BlockFailure.
void run_block(const Launch& launch, uint3 block_index);

// Replaces EMBER_EMU_SKIP_BARRIER's FILE:LINE ("" for none) for tests of the mutation aid;
// returns the previous one. Not while kernels run.
std::string set_skipped_barrier(const std::string& site);

}  // namespace ember::emu::detail
