// CUDA devices, streams and events as users see them, in the manner of torch.cuda:
//
//   ember::Stream side = ember::Stream::create(Device::cuda());
//   {
//     ember::StreamGuard on(side);            // ops on cuda:0 now queue on `side`
//     y = ember::matmul(a, b);
//   }
//   ember::Stream::current(Device::cuda()).wait(side);  // compute waits for side's work
//   y.record_stream(ember::Stream::current(Device::cuda()));  // y's memory is used there too
//
// Each CUDA device has one compute stream where ops run unless another is made current
// on the calling thread. Ops queue work and return; the host waits only where it must
// read a result (item(), to_vector(), printing, saving, a copy to the CPU) or when asked
// (synchronize). On the CPU everything is synchronous: its one stream has id 0.
#pragma once

#include <cstdint>

#include "core/device.h"

namespace ember {

class Event;

class Stream {
 public:
  // The calling thread's current stream on `device` (the CPU's is its only stream).
  static Stream current(Device device);
  // The device's compute stream, where ops run by default.
  static Stream compute(Device device);
  // A new stream on a CUDA device; it lives for the process (as PyTorch pools them).
  static Stream create(Device device);

  Device device() const { return device_; }
  uint64_t id() const { return id_; }  // the cudaStream_t's value; 0 on the CPU

  // Blocks the host until the work queued so far on this stream is done.
  void synchronize() const;
  // Whether that work is done, without waiting.
  bool query() const;
  // Makes work queued on this stream from now on wait until `other`'s work queued so far
  // is done (the host does not wait).
  void wait(const Stream& other) const;
  void wait(const Event& event) const;

  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.id_ == b.id_; }

 private:
  Stream(Device device, uint64_t id) : device_(device), id_(id) {}
  Device device_;
  uint64_t id_;
};

// Makes `stream` current on its device for the scope (ops on that device queue there).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// The CUDA device new tensors default to in CUDA calls that take none; set for the scope.
int current_cuda_device();
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_;
};

// A marker in a stream's work: recorded on a stream, then waited on by the host or by
// another stream. Movable, not copyable.
class Event {
 public:
  explicit Event(Device device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void record() { record(Stream::current(device_)); }
  bool query() const;          // true when the work before the record is done (or never recorded)
  void synchronize() const;    // the host waits for it
  // Milliseconds between two recorded, completed events made with timing = true.
  float elapsed_ms(const Event& end) const;

  Device device() const { return device_; }
  uint64_t id() const { return id_; }

 private:
  Device device_;
  uint64_t id_ = 0;  // the cudaEvent_t's value; 0 on the CPU, where every event has completed
};

// Blocks the host until all work queued on the device, on every stream, is done.
void synchronize(Device device);

}  // namespace ember
