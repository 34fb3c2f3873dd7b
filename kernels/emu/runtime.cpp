// The CUDA runtime API on the emulated devices (runtime.h): argument checks, error codes
// and the last error, events and copies, over the device model of device_model.cpp,
// which owns the devices, memory and streams.
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
#include <vector>

namespace {

struct EventState {
  std::mutex mu;
  std::condition_variable done;
  uint64_t recorded = 0, completed = 0;  // generations: a record bumps the first, its completion the second
  std::chrono::steady_clock::time_point when{};
  bool timing = true;
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

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

cudaError_t sticky() { return failed() ? fail(cudaErrorLaunchFailure) : cudaSuccess; }

}  // namespace

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
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (const cudaError_t e = sticky()) return e;
  const cudaError_t e = allocate(current_device, bytes, ptr);
  return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
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
  // Copies from pinned buffers start at their allocation (the caching allocator's blocks do not).
  const bool src_pageable = !ember::emu::is_device_pointer(src) && !is_pinned(src);
  const bool dst_pageable = !ember::emu::is_device_pointer(dst) && !is_pinned(dst);
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
  drain_device(current_device);
  if (const cudaError_t e = sticky()) return e;
  const DeviceWork setting;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (stream == nullptr) return cudaMemset(ptr, value, bytes);
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
  if (stream) drain(stream);
  else drain_device(current_device);
  return sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
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
  {
    std::lock_guard lock(e->mu);
    target = e->recorded;  // the most recent record; waiting on a never-recorded event waits for nothing
  }
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
  std::shared_ptr<EventState> e = event->state;
  uint64_t generation;
  {
    std::lock_guard lock(e->mu);
    generation = ++e->recorded;
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
  std::lock_guard lock(event->state->mu);
  return event->state->completed >= event->state->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
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
