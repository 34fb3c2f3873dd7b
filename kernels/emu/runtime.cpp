// The CUDA runtime API on the emulated devices (runtime.h): argument checks, error codes
// and the last error, events and copies, over the device model of device_model.cpp,
// which owns the devices, memory and streams. Calls that break the rules of stream
// capture fail as CUDA documents (graph.cpp holds the rules and the graph API).
//
// Only in the emulated-device build: elsewhere the program links the real runtime
// (libcudart), and these would take its place.
#if defined(EMBER_CUDA_EMULATED)

// emu.h first: the toolkit's headers keep the qualifiers it defines.
#include "kernels/emu/emu.h"
#include "kernels/emu/device_model.h"
#include "kernels/emu/runtime.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct EventState {
  std::mutex mu;
  std::condition_variable done;
  uint64_t recorded = 0, completed = 0;  // generations: a record bumps the first, its completion the second
  std::chrono::steady_clock::time_point when{};
  bool timing = true;
  // Last recorded in a capturing stream: it stands for a node of a graph, not for work,
  // so it may not be queried or synchronized (cudaErrorCapturedEvent).
  bool captured = false;
  std::weak_ptr<ember::emu::model::Capture> capture;
};

}  // namespace

// The event handle's type, which driver_types.h leaves opaque.
struct CUevent_st {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
  int device = 0;  // the device current when it was made
};

using namespace ember::emu::model;

namespace {

thread_local cudaError_t last_error = cudaSuccess;
thread_local std::string last_detail;  // the sentence fail() was given with last_error
thread_local std::string described;    // what cudaGetErrorString returned last, with that sentence

cudaError_t sticky() { return failed() ? fail(cudaErrorLaunchFailure) : cudaSuccess; }

const char* describe(cudaError_t error, const char* message) {
  if (error != last_error || last_detail.empty()) return message;
  described = std::string(message) + " (" + last_detail + ")";
  return described.c_str();
}

// Why `event` may not be queried or synchronized now, if it may not; invalidates the
// capture it was recorded in when that is still under way.
cudaError_t check_captured(EventState& e) {
  std::shared_ptr<Capture> c;
  {
    std::lock_guard lock(e.mu);
    if (!e.captured) return cudaSuccess;
    c = e.capture.lock();
  }
  if (c) c->invalidated = true;
  return fail(cudaErrorCapturedEvent);
}

}  // namespace

cudaError_t ember::emu::model::fail(cudaError_t e, std::string detail) {
  last_error = e;
  last_detail = std::move(detail);
  return e;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) return fail(cudaErrorInvalidValue);
  *value = ember::emu::device_properties().sm_count;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = check_device_sync(current_device)) return e;
  drain_device(current_device);
  return sticky();
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = failed() ? cudaErrorLaunchFailure : last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return failed() ? cudaErrorLaunchFailure : last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure:
      // Written once, before `failed` is set, and never again: the pointer stays valid.
      return failure();
    case cudaErrorStreamCaptureUnsupported: return describe(error, "operation not permitted when stream is capturing");
    case cudaErrorStreamCaptureInvalidated:
      return describe(error, "operation failed due to a previous error during capture");
    case cudaErrorStreamCaptureUnmatched: return describe(error, "capture was not initiated in this stream");
    case cudaErrorStreamCaptureIsolation:
      return describe(error, "dependency created on uncaptured work in another stream");
    case cudaErrorCapturedEvent:
      return describe(error, "operation not permitted on an event last recorded in a capturing stream");
    case cudaErrorStreamCaptureWrongThread:
      return describe(error, "attempt to terminate a thread-local capture sequence from another thread");
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (const cudaError_t e = sticky()) return e;
  if (const cudaError_t e = check_unsafe_call()) return e;
  const cudaError_t e = allocate(current_device, bytes, ptr);
  return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  // cudaFree waits for the device, which a capture under way on it forbids.
  if (const int device = ember::emu::pointer_device(ptr, 1); device >= 0)
    if (const cudaError_t e = check_device_sync(device)) return e;
  return release(ptr) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return memory_info(current_device, free, total) ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  *ptr = allocate_pinned(bytes);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  return release_pinned(ptr) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = check_unsafe_call()) return e;
  drain_device(current_device);
  if (const cudaError_t e = sticky()) return e;
  const DeviceWork copying;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (bytes == 0) return cudaSuccess;
  if (stream == nullptr) return cudaMemcpy(dst, src, bytes, kind);
  if (const cudaError_t e = check_enqueue(stream)) return e;
  // Copies from pinned buffers start at their allocation (the caching allocator's blocks do not).
  const bool src_pageable = !ember::emu::is_device_pointer(src) && !is_pinned(src);
  const bool dst_pageable = !ember::emu::is_device_pointer(dst) && !is_pinned(dst);
  if ((src_pageable || dst_pageable) && capture_of(stream)) {
    // A graph's copy node reads and writes its buffers at each replay: pageable memory,
    // which the driver stages at the call, cannot be one of them.
    capture_of(stream)->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported, "a copy from or to pageable host memory cannot be captured");
  }
  if (src_pageable) {
    // As the driver does: pageable memory is staged before the call returns, so the
    // caller may reuse it at once; the copy itself still waits its turn in the stream.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    push(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    push(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  // A copy into pageable memory returns when it is done.
  if (dst_pageable) {
    drain(stream);
    return sticky();
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (const cudaError_t e = check_unsafe_call()) return e;
  drain_device(current_device);
  if (const cudaError_t e = sticky()) return e;
  const DeviceWork setting;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (stream == nullptr) return cudaMemset(ptr, value, bytes);
  if (const cudaError_t e = check_enqueue(stream)) return e;
  push(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (!valid_device(current_device)) return fail(cudaErrorInvalidDevice);
  *stream = create_stream(current_device);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  destroy_stream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t e = check_stream_sync(stream)) return e;
  if (stream) drain(stream);
  else drain_device(current_device);
  return sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (const cudaError_t e = check_stream_sync(stream)) return e;
  if (!stream) return cudaSuccess;
  return stream_idle(stream) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  *device = stream ? stream_device(stream) : current_device;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t target;
  bool captured;
  std::shared_ptr<Capture> recorded_in;
  {
    std::lock_guard lock(e->mu);
    target = e->recorded;  // the most recent record; waiting on a never-recorded event waits for nothing
    captured = e->captured;
    recorded_in = e->capture.lock();
  }
  const std::shared_ptr<Capture> capturing = stream ? capture_of(stream) : nullptr;
  if (capturing && recorded_in == capturing) return check_enqueue(stream);  // the stream's order holds it
  if (capturing) {
    capturing->invalidated = true;
    if (recorded_in) recorded_in->invalidated = true;
    return fail(cudaErrorStreamCaptureIsolation, "a capturing stream waited on an event recorded outside its capture");
  }
  if (recorded_in) {
    recorded_in->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported,
                "a stream joined a capture by waiting on an event recorded in it; the emulated device captures "
                "the work of one stream only (docs/backends.md, CUDA graphs)");
  }
  if (captured) return fail(cudaErrorCapturedEvent);
  auto wait = [e, target] {
    std::unique_lock lock(e->mu);
    // A failed device runs nothing more, so the record waited for may never complete.
    while (e->completed < target && !failed()) e->done.wait_for(lock, std::chrono::milliseconds(10));
  };
  if (!stream) {
    wait();
    return sticky();
  }
  push(stream, wait);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (const cudaError_t e = sticky()) return e;
  ember::emu::enqueue(stream, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st;
  (*event)->device = current_device;
  (*event)->state->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete event;  // work that records or waits on it holds its state
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  // The event and the stream must be on one device (the runtime API's cudaEventRecord).
  if (!event || event->device != (stream ? stream_device(stream) : current_device))
    return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky()) return e;
  if (stream)
    if (const cudaError_t e = check_enqueue(stream)) return e;
  std::shared_ptr<EventState> e = event->state;
  if (std::shared_ptr<Capture> c = stream ? capture_of(stream) : nullptr) {
    // A record in a capture is a point in the graph for the capture's own waits to name.
    std::lock_guard lock(e->mu);
    e->captured = true;
    e->capture = c;
    return cudaSuccess;
  }
  uint64_t generation;
  {
    std::lock_guard lock(e->mu);
    generation = ++e->recorded;
    e->captured = false;
    e->capture.reset();
  }
  auto complete = [e, generation] {
    std::lock_guard lock(e->mu);
    e->completed = std::max(e->completed, generation);
    e->when = std::chrono::steady_clock::now();
    e->done.notify_all();
  };
  if (!stream) {
    drain_device(current_device);
    complete();
  } else {
    push(stream, complete);
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky()) return e;
  if (const cudaError_t e = check_captured(*event->state)) return e;
  if (const cudaError_t e = check_unsafe_call()) return e;
  std::lock_guard lock(event->state->mu);
  return event->state->completed >= event->state->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_captured(*event->state)) return e;
  if (const cudaError_t e = check_unsafe_call()) return e;
  std::shared_ptr<EventState> e = event->state;
  {
    std::unique_lock lock(e->mu);
    const uint64_t target = e->recorded;
    // A failed device runs nothing more, so a pending record would never complete.
    while (e->completed < target && !failed())
      e->done.wait_for(lock, std::chrono::milliseconds(10));
  }
  return sticky();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (!start->state->timing || !end->state->timing) return fail(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->state->when - start->state->when).count();
  return cudaSuccess;
}

#endif  // EMBER_CUDA_EMULATED
