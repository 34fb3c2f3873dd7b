// For the emulator's models of hardware that kernels reach through headers (the cp.async
// queues, ldmatrix and mma.sync of kernels/emu/tensor_core.h): their bookkeeping (queues,
// per-warp exchange slots) lives in thread-locals and heap memory that the checks
// (kernels/emu/check.cpp) would take for the kernel's shared and global memory. A
// ModelScope keeps every access made while it lives out of the checks; the model then
// tells the checks what the instruction itself accesses for the kernel, with note_read and
// note_write. A scope must not span a barrier or warp collective (another fiber would run
// with the checks off).
#pragma once

#include <cstddef>

namespace ember::emu::detail {

void model_begin();
void model_end();

class ModelScope {
 public:
  ModelScope() { model_begin(); }
  ~ModelScope() { model_end(); }
  ModelScope(const ModelScope&) = delete;
  ModelScope& operator=(const ModelScope&) = delete;
};

// An access by the calling thread, made by the instruction the model runs.
void note_read(const void* p, size_t bytes);
void note_write(const void* p, size_t bytes);
// A write that may happen at any moment until a later one lands it (cp.async between its
// issue and its wait_group): seen by racecheck, but not yet a write for initcheck.
void note_pending_write(const void* p, size_t bytes);

}  // namespace ember::emu::detail
