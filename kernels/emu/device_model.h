// The emulated devices' model, internal to kernels/emu: the devices and their memory
// capacity, allocations, pinned host buffers, streams and their worker threads, stream
// captures, the sticky failure, and the host-access check. device_model.cpp alone owns
// that state; runtime.cpp maps the CUDA runtime API onto these functions (argument
// checks, error codes), graph.cpp the stream capture and graph API and the rules of what
// may run during a capture, and runtime.h's enqueue and queries are defined beside them.
// Include after emu.h or any toolkit header.
#pragma once

#include <driver_types.h>  // cudaStream_t (CUstream_st, defined in device_model.cpp)

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ember::emu::model {

// The host thread's current device (cudaSetDevice); a stream's worker runs on its stream's.
extern thread_local int current_device;

int device_count();
bool valid_device(int device);

// Whether work on a stream has failed (an exception from a launch): the sticky error, and
// its message (written once, before failed() turns true, so the pointer stays valid).
bool failed();
const char* failure();

// For its scope, device work runs: in the checking mode (EMBER_EMU_CHECK_HOST_ACCESS=1),
// device memory is accessible to the host.
class DeviceWork {
 public:
  DeviceWork();
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};

// Device memory of `device`, filled with 0xFF bytes; cudaErrorMemoryAllocation beyond the
// device's capacity.
cudaError_t allocate(int device, size_t bytes, void** ptr);
// Frees what allocate gave, after the owning device's queued work; false if it did not give ptr.
bool release(void* ptr);
bool memory_info(int device, size_t* free, size_t* total);

// Page-locked host memory (cudaHostAlloc): plain memory the model remembers.
void* allocate_pinned(size_t bytes);
bool release_pinned(void* ptr);
bool is_pinned(const void* ptr);  // the start of a pinned buffer

// Streams: created on a device, each with a worker thread running its queue in order.
cudaStream_t create_stream(int device);
void destroy_stream(cudaStream_t stream);  // runs what was queued first
void push(cudaStream_t stream, std::function<void()> work);
void drain(cudaStream_t stream);  // until its queue is empty and nothing runs
bool stream_idle(cudaStream_t stream);
int stream_device(cudaStream_t stream);
void drain_device(int device);  // every stream of the device

// Stream capture. While a stream captures, push() appends its work to the capture's
// nodes (under the stream's lock) instead of queuing it; a replay queues them in order.
struct Capture {
  std::vector<std::function<void()>> nodes;
  cudaStreamCaptureMode mode;
  std::thread::id thread;  // that began it
  std::atomic<bool> invalidated{false};  // a rule was broken: ending it yields no graph
};
std::shared_ptr<Capture> capture_of(cudaStream_t stream);  // null when it does not capture
// Starts (a capture) or ends (nullptr) the capture of `stream`.
void set_capture(cudaStream_t stream, std::shared_ptr<Capture> capture);
std::vector<std::shared_ptr<Capture>> captures(int device);  // under way on `device`
bool any_capture();  // under way on any device: the rules' quick way out

// The rules of capture (graph.cpp), as the CUDA programming guide states them. Each
// returns cudaSuccess, or the error the call fails with after invalidating the captures
// it breaks. A potentially unsafe call (cudaMalloc, synchronous copies, syncs and
// queries) from this thread, under its capture mode (cudaThreadExchangeStreamCaptureMode):
cudaError_t check_unsafe_call();
// A call that waits for or queries `stream`'s work, or the whole of `device`'s:
cudaError_t check_stream_sync(cudaStream_t stream);
cudaError_t check_device_sync(int device);
// Work queued on `stream`: an error when its capture has been invalidated.
cudaError_t check_enqueue(cudaStream_t stream);

// Records `e` as the calling thread's last error (cudaGetLastError), with a sentence that
// cudaGetErrorString adds to the error's own message until the next failure (runtime.cpp).
cudaError_t fail(cudaError_t e, std::string detail = {});

}  // namespace ember::emu::model
