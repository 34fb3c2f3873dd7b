// The op profiler's timeline (core/profiler.h times ops; this shows when each ran): a
// Chrome / Perfetto trace, and NVTX ranges for Nsight Systems, as torch.profiler's
// export_chrome_trace and torch.autograd.profiler.emit_nvtx give them.
//
//   start_op_profiler({.record_trace = true});
//   ... train ...
//   stop_op_profiler();
//   export_chrome_trace("train.trace.json");  // open in ui.perfetto.dev or chrome://tracing
//
// The trace (Trace Event Format JSON) has one track per host thread, with each op call
// (its name, and args.device: "cpu" or "cuda:N" with args.stream) and each RecordFunction
// range, and per CUDA device one track per stream:
// - "stream S": each op's work on stream S, timed on the device by CUDA events recorded
//   around it on the stream the op queued to (Note [Placing device time on the host's
//   clock] in kernels/cuda/trace.cu), with a flow arrow from the host event to it; on a
//   GPU and on the emulated device;
// - "stream S kernels" (the emulated device only): every kernel launch the stream ran, with
//   its grid, block and shared bytes, timed by the emulator's stream worker.
// Recording adds two event records per CUDA op and a device synchronisation at
// stop_op_profiler. Ops captured into a CUDA graph have host events but no device span.
#pragma once

#include <cstdint>
#include <string>

#include "core/profiler.h"

namespace ember {

struct ProfilerOptions {
  // Keep each op call (and its device span) for export_chrome_trace.
  bool record_trace = false;
  // Open an NVTX range named after the op around each op call and each RecordFunction,
  // so that Nsight Systems (nsys profile) shows ember's ops above the kernels they launch.
  // Only a build with the real CUDA backend emits them; elsewhere this does nothing.
  bool nvtx = false;
};

// start_op_profiler (core/profiler.h) with options; without `resume`, the trace of earlier
// runs is dropped. start_op_profiler(true) resumes with the options of the run it resumes.
void start_op_profiler(const ProfilerOptions& options, bool resume = false);

// The trace recorded since the last start_op_profiler without resume, as Trace Event
// Format JSON (timestamps in microseconds from that start). Throws ember::Error while the
// profiler runs (stop it first: stopping waits for the devices' recorded work) or when no
// run recorded a trace.
std::string chrome_trace_json();
// chrome_trace_json() written atomically to `path` (core/atomic_file.h).
void export_chrome_trace(const std::string& path);

// A range of the program's own around the ops it encloses (torch.profiler's
// record_function): an event on the host track, a span on the device when its ops queue
// work there, and an NVTX range. Costs one relaxed load when no trace or NVTX is recorded.
class RecordFunction {
 public:
  explicit RecordFunction(const std::string& name);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  const char* name_ = nullptr;  // null: not recording
  int64_t begin_ns_ = 0;
};

}  // namespace ember
