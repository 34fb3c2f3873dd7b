// The caching allocator over a CUDA device (label `gpu`; a real GPU, or the emulated
// device in the EMULATED build; skipped where there is none): cached pairs make no
// cudaMalloc, statistics and the driver's free memory agree, a cap raises an
// OutOfMemoryError that explains itself, memory another user holds is named as such,
// empty_cache gives the memory back, and a CUDA error that is not lack of memory is no OOM.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

// EMBER_TEST_HAS_CUDART: the build links a CUDA runtime, real or emulated (tests/CMakeLists.txt).
#if defined(EMBER_TEST_HAS_CUDART)
#include <cuda_runtime_api.h>  // to hold device memory outside ember, as another library would
#endif
#if defined(EMBER_CUDA_EMULATED)
#include "kernels/emu/runtime.h"  // to fail the emulated device, as a kernel's fault fails a GPU
#endif

#include "core/device_runtime.h"
#include "ember.h"

namespace ember {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

memory::CachingAllocator* gpu_allocator() {
  if (!kernels::cuda_backend_built() || kernels::cuda_device_count() == 0) return nullptr;
  return &kernels::cuda_allocator(0);
}

#define REQUIRE_GPU(a)                                              \
  memory::CachingAllocator* a = gpu_allocator();                    \
  if (!a) GTEST_SKIP() << "no CUDA device (or a CPU-only build)"

TEST(CudaMemory, CachedPairsMakeNoRawAllocations) {
  REQUIRE_GPU(a);
  a->empty_cache();
  const int64_t raw = a->stats().num_device_alloc;
  for (int i = 0; i < 1000; ++i) a->free(a->allocate(3 * MiB).block);
  EXPECT_EQ(a->stats().num_device_alloc - raw, 1);
  EXPECT_EQ(a->device_name(), "cuda:0");
}

TEST(CudaMemory, EmptyCacheReturnsMemoryToTheDriver) {
  REQUIRE_GPU(a);
  a->empty_cache();
  const std::size_t free0 = a->source().info().free_bytes;
  memory::Allocation x = a->allocate(256 * MiB);
  EXPECT_LE(a->source().info().free_bytes + 256 * MiB, free0 + 2 * MiB);  // the driver sees it taken
  a->free(x.block);
  EXPECT_LE(a->source().info().free_bytes + 256 * MiB, free0 + 2 * MiB);  // cached, still reserved
  a->empty_cache();
  EXPECT_GE(a->source().info().free_bytes + 2 * MiB, free0);
}

TEST(CudaMemory, ACapOnAGpuRaisesAnExplainedOom) {
  REQUIRE_GPU(a);
  a->empty_cache();
  a->set_memory_limit(static_cast<std::size_t>(a->stats().reserved_bytes[memory::kAllPools].current) + 64 * MiB);
  memory::Allocation hold = a->allocate(48 * MiB);
  try {
    a->allocate(32 * MiB);
    ADD_FAILURE() << "32 MiB fit beside 48 MiB under a 64 MiB cap";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().device, "cuda:0");
    EXPECT_EQ(e.report().verdict, memory::OomVerdict::kCap);  // the cap ran out, not the device
    EXPECT_GT(e.report().device_total, 0u);
  }
  a->free(hold.block);
  a->set_memory_limit(0);
  a->empty_cache();
}

#if defined(EMBER_TEST_HAS_CUDART)
TEST(CudaMemory, MemoryHeldOutsideEmberIsTheVerdict) {
  REQUIRE_GPU(a);
  a->empty_cache();
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  // Another user takes all but 64 MiB; ember, uncapped, then cannot have 128 MiB.
  void* outside = nullptr;
  const std::size_t taken = free - 64 * MiB;
  if (cudaMalloc(&outside, taken) != cudaSuccess) GTEST_SKIP() << "could not take " << taken << " bytes";
  try {
    a->allocate(128 * MiB);
    ADD_FAILURE() << "128 MiB fit where 64 MiB were free";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().verdict, memory::OomVerdict::kOutsideMemory) << e.what();
    EXPECT_GE(e.report().outside, taken) << "measured with cudaMemGetInfo";
    EXPECT_EQ(e.report().device_total, total);
  }
  cudaFree(outside);
  a->empty_cache();
}
#endif

#if defined(EMBER_CUDA_EMULATED)
// After a kernel's fault the device is failed (a sticky error): cudaMalloc then fails
// with that error, which is no lack of memory and must not be explained as an OOM. In a
// child process, as the fault ends the device's work for the process.
TEST(CudaMemoryDeathTest, AFailedDeviceIsAnErrorNotAnOom) {
  REQUIRE_GPU(a);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const uint64_t stream = kernels::cuda_compute_stream(0);
        emu::enqueue(reinterpret_cast<cudaStream_t>(stream), [] { throw Error("a kernel's fault"); });
        try {
          kernels::cuda_stream_synchronize(0, stream);
        } catch (const Error&) {  // the fault, as expected
        }
        a->empty_cache();  // so that the request needs a cudaMalloc
        try {
          a->allocate(64 * MiB);
        } catch (const OutOfMemoryError& e) {
          std::fprintf(stderr, "OOM: %s\n", e.what());
          std::exit(2);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(0);
        }
        std::exit(3);
      },
      ::testing::ExitedWithCode(0), "cudaMalloc\\(67108864 bytes\\) on cuda:0 failed at .*: cudaErrorLaunchFailure");
}
#endif

TEST(CudaMemory, PinnedHostMemoryIsCachedToo) {
  REQUIRE_GPU(a);
  memory::CachingAllocator& pinned = kernels::pinned_allocator();
  EXPECT_EQ(pinned.device_name(), "pinned");
  memory::Allocation x = pinned.allocate(MiB);
  static_cast<char*>(x.ptr)[MiB - 1] = 7;  // host memory: writable from the CPU
  const int64_t raw = pinned.stats().num_device_alloc;
  pinned.free(x.block);
  pinned.free(pinned.allocate(MiB).block);
  EXPECT_EQ(pinned.stats().num_device_alloc, raw);
}

}  // namespace
}  // namespace ember
