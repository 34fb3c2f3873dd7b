// The CUDA backend's devices, streams, events, copies and graphs (kernels/cuda/device.h,
// and the functions core/device_runtime.h declares for core/stream.h and core/cuda_graph.h).
#include "kernels/cuda/device.h"

#include <array>
#include <mutex>

#include "base/error.h"
#include "core/cuda_graph.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "kernels/cuda/indexing.cuh"
#include "kernels/cuda/trace.h"
#include "memory/cuda_source.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kMaxDevices = 64;

void check_device(int device, const char* what) {
  const int count = cuda_device_count();
  EMBER_CHECK(device >= 0 && device < count, what, ": cuda:", device, " does not exist (",
              count == 0 ? std::string("no CUDA device is available") : ::ember::detail::str(count, " CUDA device(s)"), ")");
}

cudaStream_t as_stream(uint64_t id) { return reinterpret_cast<cudaStream_t>(id); }
uint64_t id_of(cudaStream_t s) { return reinterpret_cast<uint64_t>(s); }
cudaEvent_t as_event(uint64_t id) { return reinterpret_cast<cudaEvent_t>(id); }

// The calling thread's current stream per device; null means the compute stream.
thread_local std::array<cudaStream_t, kMaxDevices> current_streams{};
// Whether trace.cu traces an op of this thread, which then learns its stream here.
thread_local bool op_traced = false;

}  // namespace

DeviceGuard::DeviceGuard(int device) : previous_(0), device_(device) {
  EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
  memory::mark_cuda_device_used(device_);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) memory::restore_cuda_device(previous_);
}

cudaStream_t compute_stream(int device) {
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::mutex mu;
  check_device(device, "compute_stream");
  std::lock_guard lock(mu);
  cudaStream_t& s = streams[static_cast<size_t>(device)];
  if (s == nullptr) {
    DeviceGuard g(device);
    // Non-blocking: work on the legacy default stream (other libraries') does not
    // serialise with ember's.
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  return s;
}

cudaStream_t current_stream(int device) {
  check_device(device, "current_stream");
  cudaStream_t s = current_streams[static_cast<size_t>(device)];
  if (s == nullptr) s = compute_stream(device);
  if (op_traced) [[unlikely]] note_op_stream(device, s);
  return s;
}

void set_op_traced(bool on) { op_traced = on; }

void set_current_stream(int device, cudaStream_t stream) {
  check_device(device, "set_current_stream");
  current_streams[static_cast<size_t>(device)] = stream;
}

namespace {
std::array<std::atomic<IndexError*>, kMaxDevices> index_errors{};
}  // namespace

IndexError* index_error_record(int device) {
  check_device(device, "index_error_record");
  std::atomic<IndexError*>& slot = index_errors[static_cast<size_t>(device)];
  if (IndexError* r = slot.load(std::memory_order_acquire)) return r;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (slot.load() == nullptr) {
    DeviceGuard g(device);
    void* p = nullptr;
    EMBER_CUDA_CHECK(cudaHostAlloc(&p, sizeof(IndexError), cudaHostAllocMapped));  // lives for the process
    *static_cast<IndexError*>(p) = IndexError{};
    slot.store(static_cast<IndexError*>(p), std::memory_order_release);
  }
  return slot.load();
}

void raise_index_errors() {
  static constexpr const char* kOps[] = {"index_select", "gather", "scatter_add", "index_add"};
  for (std::atomic<IndexError*>& slot : index_errors) {
    IndexError* r = slot.load(std::memory_order_acquire);
    if (r == nullptr || std::atomic_ref<unsigned int>(r->claimed).load() == 0) continue;
    const IndexError e = *r;
    std::atomic_ref<unsigned int>(r->claimed).store(0);  // reported once
    const char* when = " (found on the device; raised at the first synchronization after the op)";
    if (e.op >= int(IndexOp::kFusedCheck))
      throw Error(kernels::index_check_message(kernels::IndexCheck(e.op - int(IndexOp::kFusedCheck)), e.value, e.position, e.size) +
                  when);
    EMBER_FAIL(kOps[e.op], ": index ", e.value, " is out of range for dim ", e.dim, " of size ", e.size, when);
  }
}

Layout layout_of(const Tensor& t) {
  EMBER_CHECK(t.dim() <= kMaxDims, "cuda: tensors of more than ", kMaxDims, " dims are not supported (shape ",
              shape_str(t.shape()), ")");
  Layout l;
  l.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = t.shape()[static_cast<size_t>(d)];
    l.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return l;
}

}  // namespace ember::kernels::cuda

namespace ember::kernels {

using cuda::as_event;
using cuda::as_stream;
using cuda::DeviceGuard;
using cuda::id_of;

int cuda_current_device() {
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void cuda_set_device(int device) {
  cuda::check_device(device, "set_device");
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  memory::mark_cuda_device_used(device);
}

void cuda_restore_device(int device) noexcept { memory::restore_cuda_device(device); }

uint64_t cuda_compute_stream(int device) { return id_of(cuda::compute_stream(device)); }
uint64_t cuda_current_stream(int device) { return id_of(cuda::current_stream(device)); }
void cuda_set_current_stream(int device, uint64_t stream) { cuda::set_current_stream(device, as_stream(stream)); }

uint64_t cuda_create_stream(int device) {
  cuda::check_device(device, "Stream");
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return id_of(s);
}

void cuda_stream_synchronize(int device, uint64_t stream) {
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  cuda::raise_index_errors();
}

bool cuda_stream_query(int device, uint64_t stream) {
  DeviceGuard g(device);
  const cudaError_t err = cudaStreamQuery(as_stream(stream));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void cuda_device_synchronize(int device) {
  cuda::check_device(device, "synchronize");
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::raise_index_errors();
}

uint64_t cuda_event_create(int device, bool timing) {
  cuda::check_device(device, "Event");
  DeviceGuard g(device);
  cudaEvent_t e = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return reinterpret_cast<uint64_t>(e);
}

// Called by Event's destructor and move assignment, which cannot throw.
void cuda_event_destroy(uint64_t event) { EMBER_CUDA_WARN(cudaEventDestroy(as_event(event))); }

void cuda_event_record(uint64_t event, int device, uint64_t stream) {
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaEventRecord(as_event(event), as_stream(stream)));
}

void cuda_stream_wait_event(int device, uint64_t stream, uint64_t event) {
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0));
}

bool cuda_event_query(uint64_t event) {
  const cudaError_t err = cudaEventQuery(as_event(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void cuda_event_synchronize(uint64_t event) {
  EMBER_CUDA_CHECK(cudaEventSynchronize(as_event(event)));
  cuda::raise_index_errors();
}

float cuda_event_elapsed_ms(uint64_t start, uint64_t end) {
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
  return ms;
}

bool cuda_stream_capturing(int device, uint64_t stream) {
  DeviceGuard g(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(as_stream(stream), &status));
  return status != cudaStreamCaptureStatusNone;  // an invalidated capture is under way until it ends
}

void cuda_capture_begin(int device, uint64_t stream, CaptureMode mode) {
  const cudaStreamCaptureMode m = mode == CaptureMode::kGlobal        ? cudaStreamCaptureModeGlobal
                                  : mode == CaptureMode::kThreadLocal ? cudaStreamCaptureModeThreadLocal
                                                                      : cudaStreamCaptureModeRelaxed;
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaStreamBeginCapture(as_stream(stream), m));
}

uint64_t cuda_capture_end(int device, uint64_t stream) {
  DeviceGuard g(device);
  cudaGraph_t graph = nullptr;
  EMBER_CUDA_CHECK(cudaStreamEndCapture(as_stream(stream), &graph));
  // Instantiated once, and the graph dropped, as PyTorch does without keep_graph. No flag:
  // the graph has no memory nodes (the caching allocator's pool holds its memory).
  cudaGraphExec_t exec = nullptr;
  try {
    EMBER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  } catch (...) {
    cudaGraphDestroy(graph);  // the instantiation's error is the one to report
    throw;
  }
  EMBER_CUDA_CHECK(cudaGraphDestroy(graph));
  return reinterpret_cast<uint64_t>(exec);
}

void cuda_graph_launch(int device, uint64_t graph, uint64_t stream) {
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph), as_stream(stream)));
}

void cuda_graph_destroy(uint64_t graph) { EMBER_CUDA_CHECK(cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(graph))); }

namespace {

// Makes `waiter` wait for the work queued so far on `stream` of `device` (no host wait).
void stream_wait(cudaStream_t waiter, int device, cudaStream_t stream) {
  DeviceGuard g(device);
  cudaEvent_t e;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  EMBER_CUDA_CHECK(cudaEventRecord(e, stream));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
  EMBER_CUDA_CHECK(cudaEventDestroy(e));  // released once it has completed
}

}  // namespace

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes, bool non_blocking) {
  EMBER_CHECK(dst_device.is_cuda() || src_device.is_cuda(), "cuda_copy: neither side is a CUDA device");
  if (bytes == 0) return;
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  cudaStream_t stream = cuda::current_stream(device);
  // Between two devices the copy runs on the destination's stream, which knows nothing of
  // the source's: it waits for the source's work, and the source's stream then waits for
  // the copy, so the source's memory is reused only after it has been read (as PyTorch's
  // copy between devices orders the two streams).
  const bool peer = dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index;
  cudaStream_t src_stream = peer ? cuda::current_stream(src_device.index) : nullptr;
  if (peer) stream_wait(stream, src_device.index, src_stream);
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (peer) stream_wait(src_stream, device, stream);
  if (non_blocking) return;
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  cuda::raise_index_errors();
}

}  // namespace ember::kernels
