// What the backends provide to core besides kernels: device discovery, each device's
// caching allocator, the pinned host allocator, CUDA streams, events, copies and graphs,
// and the CPU pool's controls. Core declares them here and the backends define them
// (kernels/cpu/parallel.cpp, kernels/cuda/backend.cu and device.cu, or
// kernels/cuda/no_cuda.cpp in a build without CUDA), so core, and anything above it
// (comm/ too), reaches devices without including kernels/. Users see them through
// core/stream.h and core/cuda_graph.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {
enum class CaptureMode;  // core/cuda_graph.h
namespace memory { class CachingAllocator; }
}  // namespace ember

namespace ember::kernels {

// Devices and their memory.

// True when this build contains the CUDA backend (whether or not a GPU is present).
bool cuda_backend_built();
// 0 without the CUDA backend, without a driver, or without a GPU.
int cuda_device_count();
// The caching allocator of CUDA device `index`; throws ember::Error in a CPU-only build.
memory::CachingAllocator& cuda_allocator(int index);
// The caching allocator of page-locked host memory (cudaHostAlloc), for fast and
// asynchronous host-device copies; throws ember::Error in a CPU-only build.
memory::CachingAllocator& pinned_allocator();

// CUDA streams and events, as opaque ids: a cudaStream_t's or cudaEvent_t's value. In a
// build without CUDA each of these raises ember::Error.
int cuda_current_device();
void cuda_set_device(int device);
// What a device guard's destructor calls: makes `device` current again if this process
// has worked on it; never throws.
void cuda_restore_device(int device) noexcept;
uint64_t cuda_compute_stream(int device);  // the stream ops use unless another is made current
uint64_t cuda_current_stream(int device);  // the calling thread's
void cuda_set_current_stream(int device, uint64_t stream);
uint64_t cuda_create_stream(int device);   // lives for the process, as PyTorch's pooled streams
void cuda_stream_synchronize(int device, uint64_t stream);
bool cuda_stream_query(int device, uint64_t stream);  // true when its work is done
void cuda_device_synchronize(int device);
uint64_t cuda_event_create(int device, bool timing);
void cuda_event_destroy(uint64_t event);
void cuda_event_record(uint64_t event, int device, uint64_t stream);
void cuda_stream_wait_event(int device, uint64_t stream, uint64_t event);  // the stream waits, not the host
bool cuda_event_query(uint64_t event);
void cuda_event_synchronize(uint64_t event);
float cuda_event_elapsed_ms(uint64_t start, uint64_t end);

// CUDA graphs (core/cuda_graph.h): stream capture, and the instantiated graph as an
// opaque id (a cudaGraphExec_t's value). Raise ember::Error in a build without CUDA.
bool cuda_stream_capturing(int device, uint64_t stream);
void cuda_capture_begin(int device, uint64_t stream, CaptureMode mode);
uint64_t cuda_capture_end(int device, uint64_t stream);  // ends the capture and instantiates the graph
void cuda_graph_launch(int device, uint64_t graph, uint64_t stream);
void cuda_graph_destroy(uint64_t graph);

// Copies `bytes` from src on src_device to dst on dst_device, one of which is CUDA, in
// the order of the CUDA side's current stream (the destination's, between two CUDA
// devices, after the source's current stream is done). Returns once the data has
// arrived, unless non_blocking: then it may return as soon as the copy is queued (a host
// side that is not pinned makes it synchronous anyway, as in CUDA).
void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes, bool non_blocking);

// The CPU device: the vector instruction set its kernels were compiled for ("avx512",
// "avx2" or "scalar"; kernels/cpu/vec.h), and its thread pool.
const char* cpu_vector_isa();

// CPU thread pool size used by the CPU kernels (EMBER_NUM_THREADS, default all cores).
int cpu_num_threads();
void set_cpu_num_threads(int n);
// Whether the calling thread runs CPU kernels on itself alone (kernels/cpu/parallel.h).
bool cpu_thread_serial();
void set_cpu_thread_serial(bool on);

}  // namespace ember::kernels
