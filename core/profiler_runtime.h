// Between the op profiler's trace (core/profiler.cpp, core/profiler_trace.cpp) and the
// CUDA backend, which records what an op's work did on a device: core declares, the
// backend defines (kernels/cuda/trace.cu, or kernels/cuda/no_cuda.cpp without it), as
// core/device_runtime.h does for streams.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember {
struct ProfilerOptions;  // core/profiler_trace.h
}  // namespace ember

namespace ember::kernels {

// Core's side (core/profiler_trace.cpp). start_op_profiler / stop_op_profiler start and
// stop the trace; trace_options() is the last start's, which a resume keeps.
void trace_start(const ProfilerOptions& options, bool resume);
void trace_stop();
const ProfilerOptions& trace_options();

// True while a trace or NVTX ranges are recorded (core/profiler_trace.cpp); tested by
// OpStubBase::profile_begin/profile_end after g_profiling.
extern std::atomic<bool> g_tracing;
// Core's side: an op (or RecordFunction) on the calling thread begins / ends.
void trace_op_begin(const char* name);
void trace_op_end(const char* name, int64_t begin_ns, int64_t end_ns, bool user_range);

// Time on a device, on the host's steady clock (nanoseconds).
struct DeviceSpan {
  const char* name;  // an op's name or the profile's interned range name; a kernel's name
  bool kernel;       // one kernel launch (emulated device) rather than an op's work
  int device;
  uint64_t stream;   // the cudaStream_t's value, as ember::Stream::id()
  int64_t begin_ns, end_ns;
  unsigned grid[3], block[3];
  std::size_t shared_bytes;
  uint64_t correlation;  // an op's span: the OpPlace::correlation of its host event (0: a kernel)
};
// Where an op's work went: device -1 when it queued nothing on a CUDA stream.
struct OpPlace {
  int device = -1;
  uint64_t stream = 0;
  uint64_t correlation = 0;  // names its DeviceSpan; 0 when none was recorded
};

// The backend's side. Starts recording device spans (and, on the emulated device, kernel
// launches) and/or NVTX ranges; stop ends it.
void cuda_trace_start(bool spans, bool nvtx);
void cuda_trace_stop();
void cuda_trace_op_begin(const char* name);
// Ends the innermost open op named `name` (the pointer cuda_trace_op_begin was given).
OpPlace cuda_trace_op_end(const char* name);
// Waits for the devices that recorded spans, then returns (and forgets) every span
// recorded since the last call, resolved onto the host's clock.
std::vector<DeviceSpan> cuda_trace_collect();

}  // namespace ember::kernels
