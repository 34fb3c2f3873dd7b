// The emulated NCCL's collectives (nccl.cpp queues them; nccl_comm.h the communicator):
// the data types and their reductions, and the bodies that move a collective's data
// through the ranks' slots, chunk by chunk, one barrier after the slots are filled and one
// after they are read. Every rank reduces all slots in rank order, so all ranks end with
// bitwise the same result; 16-bit floats are combined in float and rounded once.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "kernels/emu/nccl_comm.h"

namespace ember::emu::nccl {

// dst[i] = src[0][i] op src[1][i] op ... (in rank order), for i < count; / n for ncclAvg.
using ReduceFn = void (*)(void* dst, const char* const* src, int n, size_t count, ncclRedOp_t op);

// The element size and the reduction of a data type; {0, nullptr} for one not supported.
struct TypeInfo {
  size_t size;
  ReduceFn reduce;
};
TypeInfo type_info(ncclDataType_t t);

// One collective's arguments, as checked by nccl.cpp.
struct Call {
  const char* fn;
  const void* send;
  void* recv;
  size_t count;  // all-gather: each rank's send count; reduce-scatter: each rank's receive count
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // -1 for the collectives without one
};

// The bodies, run by the stream's worker; false when the communicator was aborted.
// all_reduce serves ncclReduce too (only the root writes its output).
using Body = bool (*)(State&, const Call&, const TypeInfo&);
bool all_reduce(State& s, const Call& c, const TypeInfo& t);
bool broadcast(State& s, const Call& c, const TypeInfo& t);
bool all_gather(State& s, const Call& c, const TypeInfo& t);
bool reduce_scatter(State& s, const Call& c, const TypeInfo& t);

}  // namespace ember::emu::nccl
