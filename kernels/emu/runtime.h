// The emulated CUDA runtime: the part of the CUDA runtime API that ember's CUDA backend
// calls, defined in runtime.cpp (over the device model, device_model.cpp) for the emulated
// device (-DEMBER_CUDA=EMULATED; kernels/emu/README.md) under the toolkit's own
// declarations (cuda_runtime_api.h), so the backend's sources compile unchanged against
// either.
//
// What the emulated devices are:
// - EMBER_EMU_DEVICES devices (default 1), of which CUDA_VISIBLE_DEVICES selects and
//   renumbers some, as the driver does;
// - device memory is host memory, counted against each device's capacity
//   (EMBER_EMU_DEVICE_MEMORY, a size such as "4GiB"; default 4 GiB), so cudaMalloc fails
//   and cudaMemGetInfo reports as on a device of that size;
// - each stream is a queue run in order by a worker thread of its own: launches, copies,
//   memsets, event records and waits return to the host at once and happen later, so a
//   missing synchronisation reads a result before it is there. The legacy default stream
//   (a null cudaStream_t) is synchronous, after the device's other streams are drained.
// - An error inside a stream's work (a kernel that throws, a bad launch) is sticky, as a
//   kernel fault is on a GPU: the device runs nothing more, and every synchronising call
//   returns cudaErrorLaunchFailure, whose cudaGetErrorString names what failed.
// - EMBER_EMU_CHECK_HOST_ACCESS=1 keeps device memory inaccessible to the host whenever no
//   device work runs or is queued, so host code that dereferences a device pointer (instead of
//   copying) faults with a message saying so, as it would fault on a GPU.
//
// The toolkit's cuda_runtime_api.h declares the runtime's functions; emu.h (which must come
// before any toolkit header) is not included here, so that the emulated NCCL (nccl.cpp),
// whose nccl.h includes cuda_runtime.h, can include this header too.
#pragma once

#include <driver_types.h>  // cudaStream_t

#include <cstddef>
#include <functional>

namespace ember::emu {

// Queues `work` on `stream` (run in order with the stream's other work, on its worker),
// or, for the legacy default stream (nullptr), drains the current device's streams and
// runs it now. The kernel launches of kernels/cuda/launch.h come through here.
void enqueue(cudaStream_t stream, std::function<void()> work);

// Whether `ptr` lies in memory cudaMalloc gave out (a device pointer).
bool is_device_pointer(const void* ptr);

// The device (as the process numbers it) whose allocation holds all of [ptr, ptr + bytes),
// or -1 when no single device allocation does.
int pointer_device(const void* ptr, size_t bytes);

// The physical emulated device (0 .. EMBER_EMU_DEVICES-1) that the process's device
// `device` is after CUDA_VISIBLE_DEVICES, or -1 for no such device. Processes that see
// different devices under one number tell them apart by this (the emulated NCCL's
// duplicate-device check).
int physical_device(int device);

}  // namespace ember::emu
