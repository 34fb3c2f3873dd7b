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

}  // namespace ember::memory
