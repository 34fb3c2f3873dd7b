// For the emulator's models of hardware that kernels reach through headers (the cp.async
// queues, ldmatrix and mma.sync of kernels/emu/tensor_core.h): their bookkeeping (queues,
// per-warp exchange slots) lives in thread-locals and heap memory that the checks
// (kernels/emu/check.cpp) would take for the kernel's shared and global memory. A
// ModelScope keeps every access made while it lives out of the checks; the model then
// tells the checks what the instruction itself accesses for the kernel, with note_read and
// note_write. A scope must not span a barrier or warp collective (another fiber would run
// with the checks off).
//
// The profile counters (profile.h) likewise ignore every access inside a ModelScope; the
// model tells them what the instruction issues, lane by lane, with profile_read and
// profile_write: the n-th call from one call site by the lanes of a warp is one request.
#pragma once

#include <cstddef>

namespace ember::emu::detail {

void model_begin();
void model_end();
void profile_model_begin();
void profile_model_end();

class ModelScope {
 public:
  ModelScope() { model_begin(), profile_model_begin(); }
  ~ModelScope() { profile_model_end(), model_end(); }
  ModelScope(const ModelScope&) = delete;
  ModelScope& operator=(const ModelScope&) = delete;
};

// An access by the calling thread, made by the instruction the model runs.
void note_read(const void* p, size_t bytes);
void note_write(const void* p, size_t bytes);
// A write that may happen at any moment until a later one lands it (cp.async between its
// issue and its wait_group): seen by racecheck, but not yet a write for initcheck.
void note_pending_write(const void* p, size_t bytes);

// The calling lane's part of the instruction's request, for the profile counters: its
// bytes read (global or shared memory, as the address falls) or written. `l1` false: a
// global load that bypasses the L1 (cp.async.cg), every sector of it an L1 miss.
void profile_read(const void* p, size_t bytes, bool l1 = true);
void profile_write(const void* p, size_t bytes);

}  // namespace ember::emu::detail
