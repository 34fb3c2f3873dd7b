// What the backends provide to core besides kernels: device discovery, each device's
// caching allocator, the pinned host allocator and the CPU pool's controls. Core
// declares them here and the backends define them (kernels/cpu/parallel.cpp,
// kernels/cuda/backend.cu, or kernels/cuda/no_cuda.cpp in a build without CUDA), so
// core, and anything above it, reaches devices without including kernels/. The CUDA
// streams and events, when they come, are declared here too.
#pragma once

namespace ember::memory { class CachingAllocator; }

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
