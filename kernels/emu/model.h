// For the emulator's models of hardware written in kernel headers (the cp.async queues and
// tensor-core fragments of kernels/cuda/gemm_bf16.cuh): they keep bookkeeping in
// thread-locals that the checks (kernels/emu/check.cpp) would take for shared memory.
// EMBER_EMU_UNCHECKED keeps a model function's own accesses out of the checks (the
// compiler neither instruments it nor inlines it into instrumented code), and note_write
// tells the checks of bytes such a function stores for the kernel.
#pragma once

#include <cstddef>

#define EMBER_EMU_UNCHECKED __attribute__((no_sanitize("thread")))

namespace ember::emu::detail {
void note_write(const void* p, size_t bytes);
}  // namespace ember::emu::detail
