// The CUDA backend's part of the op profiler's trace (core/profiler_runtime.h,
// core/profiler_trace.h): each traced op's work on its stream, timed by CUDA events; on
// the emulated device, every kernel launch as the emulator's stream workers ran it; and,
// with a real GPU, an NVTX range per op for Nsight Systems.
//
// An op learns where its work goes from the first stream it asks current_stream for
// (device.cu calls note_op_stream while an op is traced), which is also where its begin
// event is recorded: ops that never ask (CPU ops) record nothing on a device.
#include "kernels/cuda/trace.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "core/profiler_runtime.h"
#include "kernels/cuda/device.h"
#if defined(__CUDACC__)
#include <nvtx3/nvToolsExt.h>
#else
#include "kernels/emu/trace.h"
#endif

namespace ember::kernels {
namespace cuda {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
uint64_t id_of(cudaStream_t s) { return reinterpret_cast<uint64_t>(s); }

// An op (or RecordFunction range) open on the calling thread, and where its work went.
struct Frame {
  const char* name;
  int device = -1;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr;  // recorded when the op first asked for its stream
  uint64_t correlation = 0;     // with begin: what links the host event to its span
};
thread_local std::vector<Frame> frames;

std::atomic<bool> spans_on{false}, nvtx_on{false};

// Note [Placing device time on the host's clock]
// CUDA events give the time between two events of one device, not a time of day. Each
// device gets an anchor the first time an op records there: an event recorded and waited
// for, whose host time is read at once after (so device times lie late by at most that
// wake-up, never before the host queued the work). Each span is then
// placed from the last resolved event of its own stream (the first from the anchor), so
// that cudaEventElapsedTime's float milliseconds stay short, and exact to well under a
// microsecond, however long the run; on one stream that also keeps spans in order.
struct Pending {
  const char* name;
  cudaStream_t stream;
  cudaEvent_t begin, end;
  uint64_t correlation;
};
struct Clock {
  cudaEvent_t event;
  double ns;
};
struct DeviceTrace {
  cudaEvent_t anchor = nullptr;
  double anchor_ns = 0;
  std::deque<Pending> pending;  // in order of recording
  std::map<cudaStream_t, Clock> clocks;
  std::vector<cudaEvent_t> spare;
};
// Resolving from the front once this many spans wait keeps the events a long run holds bounded.
constexpr size_t kResolveAt = 4096;

std::mutex mu;  // guards devices and done
std::map<int, DeviceTrace> devices;
std::vector<DeviceSpan> done;
std::atomic<uint64_t> last_correlation{0};

cudaEvent_t take_event(DeviceTrace& d) {
  if (!d.spare.empty()) {
    cudaEvent_t e = d.spare.back();
    d.spare.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

double elapsed_ns(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return static_cast<double>(ms) * 1e6;
}

// Turns pending spans into DeviceSpans, from the oldest, while their end has completed
// (all of them when `all`: the device has been synchronised). Under mu.
void resolve(int device, DeviceTrace& d, bool all) {
  while (!d.pending.empty()) {
    const Pending p = d.pending.front();
    if (!all) {
      const cudaError_t err = cudaEventQuery(p.end);
      if (err == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: the next launch's check must not see it
        break;
      }
      EMBER_CUDA_CHECK(err);
    }
    Clock& c = d.clocks.try_emplace(p.stream, Clock{d.anchor, d.anchor_ns}).first->second;
    const double begin = c.ns + elapsed_ns(c.event, p.begin);
    const double end = begin + elapsed_ns(p.begin, p.end);
    done.push_back(
        {p.name, false, device, id_of(p.stream), std::llround(begin), std::llround(end), {}, {}, 0, p.correlation});
    if (c.event != d.anchor) d.spare.push_back(c.event);
    c = {p.end, end};
    d.spare.push_back(p.begin);
    d.pending.pop_front();
  }
}

cudaEvent_t record_begin(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) return nullptr;  // a graph's node has no time until it is replayed
  DeviceGuard guard(device);
  bool anchored;
  {
    std::lock_guard lock(mu);
    anchored = devices[device].anchor != nullptr;
  }
  if (!anchored) {  // waited for without mu, which the emulator's workers take to report launches
    cudaEvent_t anchor = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreate(&anchor));
    // On the legacy default stream: the emulator then completes it on this thread, so its
    // host time is exact there; a GPU timestamps it when it gets to it.
    EMBER_CUDA_CHECK(cudaEventRecord(anchor, nullptr));
    EMBER_CUDA_CHECK(cudaEventSynchronize(anchor));
    const double anchor_ns = static_cast<double>(now_ns());
    std::lock_guard lock(mu);
    DeviceTrace& d = devices[device];
    if (d.anchor == nullptr) {
      d.anchor = anchor;
      d.anchor_ns = anchor_ns;
    } else {
      EMBER_CUDA_CHECK(cudaEventDestroy(anchor));  // another thread anchored the device first
    }
  }
  std::lock_guard lock(mu);
  DeviceTrace& d = devices[device];
  cudaEvent_t e = take_event(d);
  EMBER_CUDA_CHECK(cudaEventRecord(e, stream));
  return e;
}

#if !defined(__CUDACC__)
void on_launch(const emu::LaunchRecord& r) {
  std::lock_guard lock(mu);
  done.push_back({r.kernel, true, r.device, id_of(r.stream), r.begin_ns, r.end_ns,
                  {r.grid[0], r.grid[1], r.grid[2]}, {r.block[0], r.block[1], r.block[2]}, r.shared_bytes, 0});
}
#endif

}  // namespace

void note_op_stream(int device, cudaStream_t stream) {
  // Every open frame without a place yet takes this one (the op, and the ranges around it
  // that had no device work before it), outermost first so that its begin event is first.
  size_t first = frames.size();
  while (first > 0 && frames[first - 1].device < 0) --first;
  for (size_t i = first; i < frames.size(); ++i) {
    frames[i].device = device;
    frames[i].stream = stream;
    if (!spans_on.load(std::memory_order_relaxed)) continue;
    frames[i].begin = record_begin(device, stream);
    if (frames[i].begin != nullptr) frames[i].correlation = ++last_correlation;
  }
}

}  // namespace cuda

void cuda_trace_start(bool spans, bool nvtx) {
  cuda::frames.clear();
  cuda::set_op_traced(false);
  cuda::spans_on = spans;
  cuda::nvtx_on = nvtx;
#if !defined(__CUDACC__)
  emu::set_launch_observer(spans ? cuda::on_launch : nullptr);
#endif
}

void cuda_trace_stop() {
  cuda::spans_on = false;
  cuda::nvtx_on = false;
#if !defined(__CUDACC__)
  emu::set_launch_observer(nullptr);
#endif
}

void cuda_trace_op_begin(const char* name) {
  cuda::frames.push_back({name});
  cuda::set_op_traced(true);
#if defined(__CUDACC__)
  if (cuda::nvtx_on.load(std::memory_order_relaxed)) nvtxRangePushA(name);
#endif
}

OpPlace cuda_trace_op_end(const char* name) {
  using namespace cuda;
  // Its frame, and above it those of ops that threw (whose end never came).
  size_t at = frames.size();
  while (at > 0 && frames[at - 1].name != name) --at;
  if (at == 0) return {};  // begun before the trace started
  const Frame f = frames[at - 1];
  frames.resize(at - 1);
  if (frames.empty()) set_op_traced(false);
#if defined(__CUDACC__)
  if (nvtx_on.load(std::memory_order_relaxed)) nvtxRangePop();
#endif
  if (f.device < 0) return {};
  if (f.begin != nullptr) {
    DeviceGuard guard(f.device);
    std::lock_guard lock(mu);
    DeviceTrace& d = devices[f.device];
    cudaEvent_t end = take_event(d);
    EMBER_CUDA_CHECK(cudaEventRecord(end, f.stream));
    d.pending.push_back({f.name, f.stream, f.begin, end, f.correlation});
    if (d.pending.size() >= kResolveAt) resolve(f.device, d, false);
  }
  return {f.device, id_of(f.stream), f.correlation};
}

std::vector<DeviceSpan> cuda_trace_collect() {
  using namespace cuda;
  std::vector<int> used;
  {
    std::lock_guard lock(mu);
    for (const auto& [device, d] : devices) used.push_back(device);
  }
  for (int device : used) {  // the recorded events, and the launches between them, have run
    DeviceGuard guard(device);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::lock_guard lock(mu);
  for (auto& [device, d] : devices) resolve(device, d, true);
  std::vector<DeviceSpan> out;
  out.swap(done);
  return out;
}

}  // namespace ember::kernels
