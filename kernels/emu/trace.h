// The emulator's report of each kernel launch it runs, for the op profiler's trace
// (kernels/cuda/trace.cu): the kernel, its launch shape, its stream and device, and when it
// began and ended on the stream's worker thread (steady clock, nanoseconds).
#pragma once

#include <driver_types.h>  // cudaStream_t

#include <cstddef>
#include <cstdint>

namespace ember::emu {

struct LaunchRecord {
  const char* kernel;  // the name launch.h gives it; lives for the process
  unsigned grid[3], block[3];
  size_t shared_bytes;
  cudaStream_t stream;  // null: the legacy default stream
  int device;
  int64_t begin_ns, end_ns;
};
using LaunchObserver = void (*)(const LaunchRecord&);

// Calls `observer` after each launch that completes, on the thread that ran it (a stream's
// worker); nullptr stops it. Off, a launch costs one relaxed load more.
void set_launch_observer(LaunchObserver observer);

namespace model {
// The stream whose worker is the calling thread (device_model.cpp); null on other threads.
cudaStream_t worker_stream();
}  // namespace model

}  // namespace ember::emu
