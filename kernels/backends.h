// What core needs from the backends besides the op table: their registration calls
// (made once, from core's initialisation: no static registrars, which static linking
// drops), the CUDA device count and the CUDA memory source.
#pragma once

namespace ember::memory { class CachingAllocator; }

namespace ember::kernels {

void register_cpu_kernels();
// Registers the CUDA kernels; does nothing in a build without the CUDA backend.
void register_cuda_kernels();

// True when this build contains the CUDA backend (whether or not a GPU is present).
bool cuda_backend_built();
// 0 without the CUDA backend, without a driver, or without a GPU.
int cuda_device_count();
// The caching allocator of CUDA device `index`; throws ember::Error in a CPU-only build.
memory::CachingAllocator& cuda_allocator(int index);
// The caching allocator of page-locked host memory (cudaHostAlloc), for fast and
// asynchronous host-device copies; throws ember::Error in a CPU-only build.
memory::CachingAllocator& pinned_allocator();

// The vector instruction set of the CPU kernels: "avx512", "avx2" or "scalar"
// (kernels/cpu/vec.h).
const char* cpu_vector_isa();

// CPU thread pool size used by the CPU kernels (EMBER_NUM_THREADS, default all cores).
int cpu_num_threads();
void set_cpu_num_threads(int n);
// Whether the calling thread runs CPU kernels on itself alone (kernels/cpu/parallel.h).
bool cpu_thread_serial();
void set_cpu_thread_serial(bool on);

}  // namespace ember::kernels
