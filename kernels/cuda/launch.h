// The one way ember launches a kernel, the same host code under nvcc (a real <<<...>>>
// launch) and under the host compiler (the CUDA emulator in kernels/emu/). Every kernel
// header in kernels/cuda/ includes this and nothing else from CUDA.
//
//   const LaunchConfig cfg = softmax_config(rows, cols);   // beside the kernel
//   launch<softmax_kernel<float>>(cfg, stream, x, y, rows, cols);
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include "kernels/emu/emu.h"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/cuda_check.h"  // EMBER_CUDA_CHECK, for the queries here and in kernel headers
#include "base/error.h"
#include "core/macros.h"

// The block's dynamic shared memory as a T*, named `name`.
#if defined(__CUDACC__)
#define EMBER_DYNAMIC_SHARED(T, name)                           \
  extern __shared__ __align__(16) unsigned char ember_dyn_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_dyn_smem_)
#else
#define EMBER_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::ember::emu::detail::dynamic_shared())
#endif

// `#pragma unroll` for nvcc; GCC's spelling for the emulator build (which warns on nvcc's).
// EMBER_UNROLL_BY(n) unrolls n times.
#if defined(__CUDACC__)
#define EMBER_UNROLL _Pragma("unroll")
#define EMBER_UNROLL_BY(n) _Pragma(EMBER_STRINGIFY(unroll n))
#else
#define EMBER_UNROLL _Pragma("GCC unroll 16")
#define EMBER_UNROLL_BY(n) _Pragma(EMBER_STRINGIFY(GCC unroll n))
#endif

namespace ember::kernels::cuda {

struct LaunchConfig {
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  size_t shared_bytes = 0;
};

// Threads per block of the elementwise and reduction kernels: 8 warps keep enough loads in
// flight per SM on Ampere and Hopper while leaving registers for unrolling.
inline constexpr int kBlockThreads = 256;

// The current device's multiprocessor count (the emulator's: device_properties()). Every
// launch configuration asks, so each device's answer is kept after the first query.
inline int sm_count() {
#if defined(__CUDACC__)
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) device = 0;
  int count = known[device].load(std::memory_order_relaxed);
  if (count == 0) {
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    count = count > 0 ? count : 1;
    known[device].store(count, std::memory_order_relaxed);
  }
  return count;
#else
  return ::ember::emu::device_properties().sm_count;
#endif
}

// Blocks for a grid-stride loop over n items, `per_block` items per block per turn:
// enough to fill every SM several times over, never more than the work needs.
inline unsigned grid_stride_blocks(int64_t n, int64_t per_block, int blocks_per_sm = 8) {
  const int64_t needed = (n + per_block - 1) / per_block;
  const int64_t full = int64_t(sm_count()) * blocks_per_sm;
  return static_cast<unsigned>(needed < full ? (needed > 0 ? needed : 1) : full);
}

namespace detail {
// "launch<Kernel>" names its kernel in __PRETTY_FUNCTION__: "... [with auto Kernel = NAME; ...]".
constexpr std::string_view kernel_name(std::string_view pretty) {
  constexpr std::string_view key = "Kernel = ";
  const size_t start = pretty.find(key);
  if (start == std::string_view::npos) return pretty;
  const size_t from = start + key.size();
  size_t depth = 0, i = from;
  for (; i < pretty.size(); ++i) {
    const char c = pretty[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && (c == ';' || c == ']')) break;
  }
  return pretty.substr(from, i - from);
}
}  // namespace detail

// Launches Kernel over cfg on `stream`. Empty grids (no work) launch nothing: the GPU
// rejects them. Launch errors raise ember::Error naming the kernel.
template <auto Kernel, class... Args>
void launch(const LaunchConfig& cfg, cudaStream_t stream, Args&&... args) {
  static const std::string name(detail::kernel_name(__PRETTY_FUNCTION__));
  if (cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0) return;
#if defined(__CUDACC__)
  Kernel<<<cfg.grid, cfg.block, cfg.shared_bytes, stream>>>(static_cast<Args&&>(args)...);
  const cudaError_t err = cudaGetLastError();
  EMBER_CHECK(err == cudaSuccess, "CUDA launch of ", name, " (grid ", cfg.grid.x, "x", cfg.grid.y, "x", cfg.grid.z,
              ", block ", cfg.block.x, "x", cfg.block.y, "x", cfg.block.z, ", ", cfg.shared_bytes,
              " shared bytes) failed: ", cudaGetErrorString(err));
#else
  ::ember::emu::launch_on(stream, Kernel, name.c_str(), cfg.grid, cfg.block, cfg.shared_bytes, static_cast<Args&&>(args)...);
#endif
}

// Lets Kernel use up to `bytes` of dynamic shared memory (above 48 KiB needs this).
template <auto Kernel>
void allow_dynamic_shared(size_t bytes) {
#if defined(__CUDACC__)
  const cudaError_t err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  EMBER_CHECK(err == cudaSuccess, "cudaFuncSetAttribute(", detail::kernel_name(__PRETTY_FUNCTION__), ", ", bytes,
              " bytes of shared memory) failed: ", cudaGetErrorString(err));
#else
  ::ember::emu::detail::allow_dynamic_shared(reinterpret_cast<const void*>(Kernel), bytes);
#endif
}

}  // namespace ember::kernels::cuda
