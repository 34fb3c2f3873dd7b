// What every source of the CUDA backend shares: the one check for CUDA calls
// (base/cuda_check.h), the current device and stream, and a Tensor seen as a kernel's
// pointer and Layout.
// Included by the backend's .cu files only (it includes CUDA headers, or the emulator's).
//
// Streams: each device has one compute stream, made on first use, where ops run by
// default; a thread may make another stream current (core/stream.h). Ops queue their
// kernels on the current stream of their tensors' device and never wait for them.
#pragma once

#include "kernels/cuda/launch.h"  // first: under the host compiler, the emulator's qualifiers
#include "kernels/cuda/types.cuh"

#include "base/cuda_check.h"  // EMBER_CUDA_CHECK, for every CUDA runtime, cuBLASLt and cuDNN call
#include "core/tensor.h"

namespace ember::kernels::cuda {

// Makes `device` current for the scope and restores the caller's device after, if this
// process has worked on it (Note [Restoring the current device], memory/cuda_source.h).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_, device_;
};

// The device's compute stream (created on first use) and the calling thread's current
// stream on it (the compute stream unless a StreamGuard chose another).
cudaStream_t compute_stream(int device);
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);

// Where an op on `t` runs: its device made current, and that device's current stream.
class OpScope {
 public:
  explicit OpScope(const Tensor& t) : guard_(t.device().index), stream_(current_stream(t.device().index)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// The record in which index kernels of `device` report a bad index (Note [Index errors on
// the device] in indexing.cuh), and the check, after every synchronization with the host,
// that raises what was recorded on any device as an ember::Error.
struct IndexError;
IndexError* index_error_record(int device);
void raise_index_errors();

// A tensor as kernels take it: its sizes and strides (at most kMaxDims dims).
Layout layout_of(const Tensor& t);

// The CUDA element type of each dtype: f(Tag<T>{}) with T one of bool, uint8_t, int32_t,
// int64_t, __half, __nv_bfloat16, float, double.
template <class T>
struct Tag {
  using type = T;
};
template <class F>
decltype(auto) visit_cuda_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(Tag<bool>{});
    case DType::UInt8: return f(Tag<uint8_t>{});
    case DType::Int32: return f(Tag<int32_t>{});
    case DType::Int64: return f(Tag<int64_t>{});
    case DType::Float16: return f(Tag<__half>{});
    case DType::BFloat16: return f(Tag<__nv_bfloat16>{});
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
  }
  EMBER_FAIL("cuda: unknown dtype ", static_cast<int>(t));
}

}  // namespace ember::kernels::cuda
