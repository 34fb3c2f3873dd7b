// Memory sources of the CUDA build: device memory (cudaMalloc per device) and pinned
// host memory (cudaHostAlloc), with stream order kept by CUDA events.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdio>

#include "memory/cuda_source.h"

namespace ember::memory {
namespace {

constexpr int kMaxDevices = 64;
std::array<std::atomic<bool>, kMaxDevices> used_devices{};

// Runs the rest of the scope with `device` current (Note [Restoring the current device]).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&prev_);
    if (prev_ != device) cudaSetDevice(device);
    device_ = device;
    mark_cuda_device_used(device);
  }
  ~DeviceGuard() {
    if (prev_ != device_) restore_cuda_device(prev_);
  }

 private:
  int prev_ = 0, device_ = 0;
};

void report(cudaError_t err, const char* what) {
  if (err != cudaSuccess) std::fprintf(stderr, "ember: %s failed: %s\n", what, cudaGetErrorString(err));
}

// Events common to both sources, each made on its stream's device: cudaEventRecord wants
// the event and the stream on one device, and pinned memory serves streams of any device.
class CudaEvents : public Source {
 public:
  explicit CudaEvents(int device) : device_(device) {}
  EventId record_event(StreamId stream) override {
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    int device = device_;
    report(cudaStreamGetDevice(s, &device), "cudaStreamGetDevice");
    DeviceGuard g(device);
    cudaEvent_t e = nullptr;
    report(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    report(cudaEventRecord(e, s), "cudaEventRecord");
    return reinterpret_cast<EventId>(e);
  }
  bool event_done(EventId event) override {
    cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    report(err, "cudaEventQuery");
    return true;
  }
  void wait_event(EventId event) override {
    report(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  void release_event(EventId event) override {
    report(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  }

 protected:
  int device_;
};

class CudaDeviceSource final : public CudaEvents {
 public:
  using CudaEvents::CudaEvents;
  void* allocate(std::size_t bytes) noexcept override {
    DeviceGuard g(device_);
    // cudaMalloc is a potentially unsafe call while a CUDA graph is captured; it is safe
    // here because the caching allocator frees nothing during a capture (Note [Private
    // pools]), so it runs in relaxed mode, as PyTorch's allocator does.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    report(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    report(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
    if (err != cudaSuccess) {
      cudaGetLastError();  // an out-of-memory error is not sticky: clear it
      return nullptr;
    }
    return p;
  }
  void free(void* ptr, std::size_t) noexcept override {
    DeviceGuard g(device_);
    report(cudaFree(ptr), "cudaFree");
  }
  SourceInfo info() const noexcept override {
    DeviceGuard g(device_);
    std::size_t free = 0, total = 0;
    report(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {free, total};
  }
  std::string device_name() const override { return "cuda:" + std::to_string(device_); }
};

class PinnedSource final : public CudaEvents {
 public:
  PinnedSource() : CudaEvents(0), host_(make_host_source()) {}
  void* allocate(std::size_t bytes) noexcept override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free(void* ptr, std::size_t) noexcept override { report(cudaFreeHost(ptr), "cudaFreeHost"); }
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
  if (device >= 0 && device < kMaxDevices && used_devices[static_cast<size_t>(device)].load()) cudaSetDevice(device);
}

}  // namespace ember::memory
