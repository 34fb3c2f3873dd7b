// The memory sources of the CUDA build (memory/cuda_source.cu). No CUDA header here:
// callers see only the Source interface.
#pragma once

#include <memory>

#include "memory/source.h"

namespace ember::memory {

// cudaMalloc / cudaFree on `device`; events are CUDA events on that device's streams.
std::unique_ptr<Source> make_cuda_source(int device);
// Page-locked host memory (cudaHostAlloc), for fast and asynchronous copies.
std::unique_ptr<Source> make_pinned_source();

// Note [Restoring the current device]. A guard that makes another CUDA device current
// restores the caller's device after only if this process has worked on it. Since CUDA
// 12, cudaSetDevice makes the device's context at once: switching back to a device
// nobody used (device 0, on a thread that never chose one) would give every rank of a
// multi-GPU job a context on GPU 0, hundreds of MiB each (PyTorch's MaybeSetDevice avoids
// the same). Such a thread stays on the guard's device. Every guard (memory's, the CUDA
// backend's, core's CudaDeviceGuard) goes through these two.
void mark_cuda_device_used(int device) noexcept;
void restore_cuda_device(int device) noexcept;  // cudaSetDevice(device) if it was used

}  // namespace ember::memory
