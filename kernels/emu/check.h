// The emulator's checks of device code's memory accesses, as compute-sanitizer's
// racecheck, initcheck and synccheck give them on a GPU (kernels/emu/README.md, "Checks").
// Kernel translation units are compiled with the compiler's ThreadSanitizer
// instrumentation (EMBER_EMU_INSTRUMENT); check.cpp defines the __tsan_* entry points it
// calls, and the block scheduler (block.cpp) tells it where a block is. Internal to
// kernels/emu.
#pragma once

#include <cstddef>

#include "kernels/emu/block.h"

namespace ember::emu::detail {

// EMBER_EMU_CHECK: a comma-separated list of race, init, sync, or all; read once.
struct CheckOptions {
  bool race = false;  // shared and global memory hazards between barriers
  bool init = false;  // reads of shared memory no thread of the block wrote
  bool sync = false;  // warp collectives whose mask names a lane that returns without them
  bool memory() const { return race || init; }
};
const CheckOptions& check_options();
// Replaces the options (tests of the checks themselves); returns the previous ones.
CheckOptions set_check_options(const CheckOptions& options);

// From the block scheduler, on the OS thread that runs the block. `stacks` is the fibers'
// stack memory (never checked), `dynamic_shared` the block's dynamic shared memory.
void check_block_begin(const Launch& launch, uint3 block, unsigned threads, const void* stacks, size_t stack_bytes,
                       const void* dynamic_shared, size_t dynamic_shared_bytes);
void check_block_end();
void check_thread(unsigned thread);                       // the fiber about to run
void check_barrier();                                     // __syncthreads released the block
void check_warp_collective(unsigned warp, unsigned mask);  // a collective of `mask` completed

// Fails the running block with `message` (after the kernel and block); from a fiber.
[[noreturn]] void fail_block(const std::string& message);

}  // namespace ember::emu::detail
