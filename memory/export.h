// Snapshots of the caching allocator as files people can read and tools can draw.
//
// to_json: {"device", "stats": {PyTorch's keys}, "segments": [{"address", "size",
// "stream", "pool", "private_pool" (a CUDA graph's; 0: none), "blocks": [{"address", "size",
// "requested", "state", "op", "shape"}]}],
// "history": [{"action", "address", "size", "stream", "time_ns", "op", "shape"}]}. States
// are "allocated", "awaiting_streams", "free"; actions "alloc", "free_requested",
// "free_completed", "segment_alloc", "segment_free", "oom".
//
// to_chrome_trace: the history in the Trace Event format that chrome://tracing and
// Perfetto (ui.perfetto.dev) open: a counter track of allocated and reserved bytes, and
// one instant event per allocation, free and OOM, named by the op that caused it.
#pragma once

#include <string>

#include "memory/caching_allocator.h"

namespace ember::memory {

std::string to_json(const Snapshot& snapshot);
std::string to_chrome_trace(const Snapshot& snapshot);

const char* action_name(TraceEvent::Action a);
const char* state_name(BlockInfo::State s);

}  // namespace ember::memory
