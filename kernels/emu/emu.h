// The CUDA execution model on the CPU: what a kernel body in kernels/cuda/*.cuh sees when
// it is compiled by the host compiler instead of nvcc. Blocks run on a few OS threads;
// the threads of a block run as cooperative fibers (Boost.Context), so __syncthreads waits
// for the whole block and a shuffle exchanges values among the lanes of a warp as on the
// GPU. What it checks and what it does not model: kernels/emu/README.md.
//
// Include it through kernels/cuda/launch.h, never directly from a kernel.
#pragma once

#if defined(__CUDACC__)
#error "kernels/emu/emu.h is for host compilers; nvcc builds the kernels for the GPU"
#endif

// Qualifiers first: the toolkit's host_defines.h keeps definitions made before it.
#define __host__
#define __device__
#define __global__
#define __constant__ static
// A block's fibers share one OS thread, and blocks run on several, so one copy per OS
// thread is one copy per running block.
#define __shared__ static thread_local

#include <cuda_bf16.h>  // __nv_bfloat16, from the toolkit, with its host code paths
#include <cuda_fp16.h>  // __half
#include <driver_types.h>     // cudaStream_t
#include <vector_functions.h>  // make_float4, ...
#include <vector_types.h>      // dim3, uint3, float4, ...

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __launch_bounds__
#define __launch_bounds__(...)

namespace ember::emu {

// What the emulated device reports to launch-configuration functions.
struct DeviceProperties {
  int sm_count = 4;  // few SMs: grid-stride loops take several turns, and emulation stays quick
  int max_threads_per_block = 1024;
  size_t max_static_shared = 48 * 1024;
  size_t max_dynamic_shared_optin = 227 * 1024;  // Hopper's per-block opt-in limit
};
DeviceProperties& device_properties();

// Threads to run blocks on (EMBER_EMU_THREADS, else the machine's cores, at most 8).
void set_worker_threads(int n);

namespace detail {

inline thread_local uint3 thread_idx, block_idx;
inline thread_local dim3 block_dim, grid_dim;
// The calling fiber's dynamic shared memory (EMBER_DYNAMIC_SHARED).
void* dynamic_shared();

using Invoke = void (*)(const void* closure);
void launch(const char* kernel, const void* kernel_id, dim3 grid, dim3 block, size_t shared_bytes,
            Invoke invoke, const void* closure);
void allow_dynamic_shared(const void* kernel_id, size_t bytes);
// Raises ember::Error for a launch configuration the device would reject.
void check_launch(const char* kernel, const void* kernel_id, dim3 grid, dim3 block, size_t shared_bytes);

void syncthreads(const std::source_location& site);

enum class WarpOp { kSync, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };
// One lane's part in a warp collective; returns that lane's result (the value bits read,
// the ballot, or the vote). Blocks until every lane in `mask` has arrived.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width,
                         const std::source_location& site);
unsigned active_mask();

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace detail

// Runs `kernel` over the grid, synchronously. `name` appears in every error.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block, size_t shared_bytes,
            Args&&... args) {
  struct Closure {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  // Converted once, as a launch converts its arguments; each thread gets its own copies.
  const Closure closure{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  detail::launch(
      name, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
      [](const void* c) {
        const auto* cl = static_cast<const Closure*>(c);
        std::apply(cl->kernel, cl->params);
      },
      &closure);
}

// Queues `work` on `stream` to run after the stream's earlier work, on the stream's own
// worker thread (device_model.cpp); the legacy default stream (nullptr) drains the current
// device's streams and runs it at once.
void enqueue(cudaStream_t stream, std::function<void()> work);

// launch() on `stream`: a launch whose configuration the GPU would reject fails here, at
// once; the kernel runs when the stream reaches it, with copies of the arguments.
template <class... Params, class... Args>
void launch_on(cudaStream_t stream, void (*kernel)(Params...), const char* name, dim3 grid, dim3 block,
               size_t shared_bytes, Args&&... args) {
  if (stream == nullptr)  // runs now, inside the call
    return enqueue(nullptr, [&] { launch(kernel, name, grid, block, shared_bytes, std::forward<Args>(args)...); });
  detail::check_launch(name, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes);
  enqueue(stream, [kernel, name, grid, block, shared_bytes,
                   params = std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)] {
    std::apply([&](const auto&... p) { launch(kernel, name, grid, block, shared_bytes, p...); }, params);
  });
}

}  // namespace ember::emu

#define threadIdx (static_cast<const uint3&>(::ember::emu::detail::thread_idx))
#define blockIdx (static_cast<const uint3&>(::ember::emu::detail::block_idx))
#define blockDim (static_cast<const dim3&>(::ember::emu::detail::block_dim))
#define gridDim (static_cast<const dim3&>(::ember::emu::detail::grid_dim))
inline constexpr int warpSize = 32;

// --- Synchronization, shuffles and votes -------------------------------------------------

inline void __syncthreads(const std::source_location& site = std::source_location::current()) {
  ::ember::emu::detail::syncthreads(site);
}
inline void __syncwarp(unsigned mask = 0xffffffffu,
                       const std::source_location& site = std::source_location::current()) {
  ::ember::emu::detail::warp_collective(::ember::emu::detail::WarpOp::kSync, mask, 0, 0, 32, site);
}
inline unsigned __activemask() { return ::ember::emu::detail::active_mask(); }

#define EMBER_EMU_SHUFFLE(fn, op, ParamT)                                                                  \
  template <class T>                                                                                       \
  T fn(unsigned mask, T var, ParamT param, int width = 32,                                                 \
       const std::source_location& site = std::source_location::current()) {                               \
    using namespace ::ember::emu::detail;                                                                  \
    return from_bits<T>(warp_collective(WarpOp::op, mask, to_bits(var), static_cast<int>(param), width, site)); \
  }
EMBER_EMU_SHUFFLE(__shfl_sync, kShflIdx, int)
EMBER_EMU_SHUFFLE(__shfl_up_sync, kShflUp, unsigned)
EMBER_EMU_SHUFFLE(__shfl_down_sync, kShflDown, unsigned)
EMBER_EMU_SHUFFLE(__shfl_xor_sync, kShflXor, int)
#undef EMBER_EMU_SHUFFLE

inline unsigned __ballot_sync(unsigned mask, int pred,
                              const std::source_location& site = std::source_location::current()) {
  using namespace ::ember::emu::detail;
  return static_cast<unsigned>(warp_collective(WarpOp::kBallot, mask, pred != 0, 0, 32, site));
}
inline int __any_sync(unsigned mask, int pred, const std::source_location& site = std::source_location::current()) {
  using namespace ::ember::emu::detail;
  return static_cast<int>(warp_collective(WarpOp::kAny, mask, pred != 0, 0, 32, site));
}
inline int __all_sync(unsigned mask, int pred, const std::source_location& site = std::source_location::current()) {
  using namespace ::ember::emu::detail;
  return static_cast<int>(warp_collective(WarpOp::kAll, mask, pred != 0, 0, 32, site));
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// --- Atomics: real ones, since blocks run on several OS threads -------------------------

template <class T>
T atomicAdd(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_add(val);
}
template <class T>
T atomicSub(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_sub(val);
}
template <class T>
T atomicExch(T* address, T val) {
  return std::atomic_ref<T>(*address).exchange(val);
}
template <class T>
T atomicCAS(T* address, T compare, T val) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, val);
  return compare;  // the old value, whether or not it was replaced
}
template <class T>
T atomicMax(T* address, T val) {
  static_assert(std::is_integral_v<T>, "CUDA's atomicMax takes integers");
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old < val && !ref.compare_exchange_weak(old, val)) {}
  return old;
}
template <class T>
T atomicMin(T* address, T val) {
  static_assert(std::is_integral_v<T>, "CUDA's atomicMin takes integers");
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old > val && !ref.compare_exchange_weak(old, val)) {}
  return old;
}

// --- Loads and the device math a kernel may call ----------------------------------------

template <class T>
T __ldg(const T* p) { return *p; }

inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(unsigned x) { return x == 0 ? 32 : std::countl_zero(x); }
inline int __ffs(unsigned x) { return x == 0 ? 0 : std::countr_zero(x) + 1; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((uint64_t(a) * b) >> 32); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
// The fast intrinsics are exact here; their GPU versions differ by a few ulp.
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
// expf, fmaxf, rsqrtf's friends and the rest of the float math come from <cmath> (glibc
// declares them in the global namespace, where CUDA puts them).
