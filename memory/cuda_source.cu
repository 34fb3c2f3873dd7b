// Memory sources of the CUDA build: device memory (cudaMalloc per device) and pinned
// host memory (cudaHostAlloc), with stream order kept by CUDA events. Of a source's calls
// only allocate() may throw; the caching allocator makes the others where nothing may (its
// free(), its destructor), so their CUDA errors are warnings (EMBER_CUDA_WARN).
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <string>

#include "base/cuda_check.h"
#include "memory/cuda_source.h"

namespace ember::memory {
namespace {

constexpr int kMaxDevices = 64;
std::array<std::atomic<bool>, kMaxDevices> used_devices{};

enum class OnError { kRaise, kWarn };

// Runs the rest of the scope with `device` current (Note [Restoring the current device]).
// Where the caller cannot throw (kWarn), a failure to switch is a warning, and the calls
// that follow report their own.
class DeviceGuard {
 public:
  DeviceGuard(int device, OnError on_error) : prev_(device), device_(device) {
    if (on_error == OnError::kRaise) {
      EMBER_CUDA_CHECK(cudaGetDevice(&prev_));
      if (prev_ != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
    } else if (EMBER_CUDA_WARN(cudaGetDevice(&prev_)) && prev_ != device_) {
      EMBER_CUDA_WARN(cudaSetDevice(device_));
    }
    mark_cuda_device_used(device_);
  }
  ~DeviceGuard() {
    if (prev_ != device_) restore_cuda_device(prev_);
  }

 private:
  int prev_, device_;
};

// The calling thread's stream capture mode, relaxed for the scope: cudaMalloc is a
// potentially unsafe call while a CUDA graph is captured; it is safe here because the
// caching allocator frees nothing during a capture (Note [Private pools]), so it runs in
// relaxed mode, as PyTorch's allocator does.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { EMBER_CUDA_WARN(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Whether cudaMalloc's or cudaHostAlloc's error is the device running out of memory: no
// error here (it is not sticky, and is cleared), as the caching allocator explains it
// with an OutOfMemoryError. Any other error raises ember::Error naming the call.
bool out_of_memory(cudaError_t err) {
  if (err != cudaErrorMemoryAllocation) return false;
  cudaGetLastError();
  return true;
}

// Events common to both sources, each made on its stream's device: cudaEventRecord wants
// the event and the stream on one device, and pinned memory serves streams of any device.
class CudaEvents : public Source {
 public:
  explicit CudaEvents(int device) : device_(device) {}
  EventId record_event(StreamId stream) noexcept override {
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    int device = device_;
    EMBER_CUDA_WARN(cudaStreamGetDevice(s, &device));
    DeviceGuard g(device, OnError::kWarn);
    cudaEvent_t e = nullptr;
    EMBER_CUDA_WARN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    EMBER_CUDA_WARN(cudaEventRecord(e, s));
    return reinterpret_cast<EventId>(e);
  }
  bool event_done(EventId event) noexcept override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    EMBER_CUDA_WARN(err);
    return true;
  }
  void wait_event(EventId event) noexcept override {
    EMBER_CUDA_WARN(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }
  void release_event(EventId event) noexcept override {
    EMBER_CUDA_WARN(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }

 protected:
  int device_;
};

class CudaDeviceSource final : public CudaEvents {
 public:
  using CudaEvents::CudaEvents;
  void* allocate(std::size_t bytes) override {
    DeviceGuard g(device_, OnError::kRaise);
    const RelaxedCaptureMode relaxed;
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (out_of_memory(err)) return nullptr;
    if (err != cudaSuccess) {
      const std::string call = detail::str("cudaMalloc(", bytes, " bytes) on cuda:", device_);
      detail::cuda_failed(err, call.c_str(), __FILE__, __LINE__);
    }
    return p;
  }
  void free(void* ptr, std::size_t) noexcept override {
    DeviceGuard g(device_, OnError::kWarn);
    EMBER_CUDA_WARN(cudaFree(ptr));
  }
  SourceInfo info() const noexcept override {
    DeviceGuard g(device_, OnError::kWarn);
    std::size_t free = 0, total = 0;
    EMBER_CUDA_WARN(cudaMemGetInfo(&free, &total));
    return {free, total};
  }
  std::string device_name() const override { return "cuda:" + std::to_string(device_); }
};

class PinnedSource final : public CudaEvents {
 public:
  PinnedSource() : CudaEvents(0), host_(make_host_source()) {}
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (out_of_memory(err)) return nullptr;
    if (err != cudaSuccess) {
      const std::string call = detail::str("cudaHostAlloc(", bytes, " bytes)");
      detail::cuda_failed(err, call.c_str(), __FILE__, __LINE__);
    }
    return p;
  }
  void free(void* ptr, std::size_t) noexcept override { EMBER_CUDA_WARN(cudaFreeHost(ptr)); }
  SourceInfo info() const noexcept override { return host_->info(); }
  std::string device_name() const override { return "pinned"; }

 private:
  std::unique_ptr<Source> host_;  // answers info() for the host
};

}  // namespace

std::unique_ptr<Source> make_cuda_source(int device) { return std::make_unique<CudaDeviceSource>(device); }
std::unique_ptr<Source> make_pinned_source() { return std::make_unique<PinnedSource>(); }

void mark_cuda_device_used(int device) noexcept {
  if (device >= 0 && device < kMaxDevices) used_devices[static_cast<size_t>(device)].store(true);
}

void restore_cuda_device(int device) noexcept {
  if (device >= 0 && device < kMaxDevices && used_devices[static_cast<size_t>(device)].load())
    EMBER_CUDA_WARN(cudaSetDevice(device));
}

}  // namespace ember::memory
