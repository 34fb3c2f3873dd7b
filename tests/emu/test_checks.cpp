// The emulator's racecheck, initcheck and synccheck (kernels/emu/check.h): each mistake
// below is reported with the kernel, the threads and their source lines, and the same
// kernels written correctly pass. This file is compiled with the kernels' instrumentation
// (EMBER_EMU_INSTRUMENT); without it the tests skip.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/emu/check.h"

namespace ember::kernels::cuda {
namespace {

using emu::detail::CheckOptions;
using tc::cp_async;
using tc::cp_async_commit;
using tc::cp_async_wait;
using tc::ldmatrix;
using tc::shared_address;

// Turns checks on for one test, as EMBER_EMU_CHECK does for a process.
class Checks {
 public:
  explicit Checks(CheckOptions o) : old_(emu::detail::set_check_options(o)) {}
  ~Checks() { emu::detail::set_check_options(old_); }

 private:
  CheckOptions old_;
};
constexpr CheckOptions kAll{true, true, true};
// Racecheck alone, where the threads' order would let initcheck report first (a thread that
// runs before the writer reads a byte nobody has written yet).
constexpr CheckOptions kRace{true, false, false};

#define EMBER_NEED_INSTRUMENTATION()                                                        \
  do {                                                                                      \
    if (!kInstrumented) GTEST_SKIP() << "built without EMBER_EMU_INSTRUMENT's instrumentation"; \
  } while (0)
#if defined(__SANITIZE_THREAD__)
constexpr bool kInstrumented = true;
#else
constexpr bool kInstrumented = false;
#endif

std::string launch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Two rounds through one shared buffer; `barrier` says whether the second round waits
// until the first round's reads are done (the reuse CUB's BlockReduce needs).
constexpr unsigned kReuseFirstBarrier = __LINE__ + 5;
__global__ void reuse_shared(float* out, bool barrier) {
  __shared__ float tmp[64];
  const unsigned t = threadIdx.x;
  tmp[t] = float(t);
  __syncthreads();
  const float v = tmp[63 - t];
  if (barrier) __syncthreads();
  tmp[t] = v * 2.0f;
  __syncthreads();
  out[t] = tmp[63 - t];
}

// Each thread reads its lower neighbour's value; `barrier` between the writes and reads.
__global__ void neighbour_read(float* out, bool barrier) {
  EMBER_DYNAMIC_SHARED(float, buf);
  buf[threadIdx.x] = float(threadIdx.x);
  if (barrier) __syncthreads();
  out[threadIdx.x] = threadIdx.x > 0 ? buf[threadIdx.x - 1] : 0.0f;
}

// The same within one warp: `sync` orders the lanes with __syncwarp.
__global__ void warp_exchange(float* out, bool sync) {
  __shared__ float buf[32];
  buf[threadIdx.x] = float(threadIdx.x);
  if (sync) __syncwarp();
  out[threadIdx.x] = buf[threadIdx.x ^ 1];
}

// A counter in shared memory zeroed by thread 0, then counted with atomics; `barrier`
// between the zeroing and the counting.
__global__ void shared_counter(int* out, bool barrier) {
  __shared__ int counter;
  if (threadIdx.x == 0) counter = 0;
  if (barrier) __syncthreads();
  atomicAdd(&counter, 1);
  __syncthreads();
  if (threadIdx.x == 0) *out = counter;
}

// A per-block partial sum in global memory zeroed by thread 0, then accumulated by every
// thread (norm backward's shape); `barrier` after the zeroing.
__global__ void global_partial(float* partial, bool barrier) {
  if (threadIdx.x == 0) partial[blockIdx.x] = 0.0f;
  if (barrier) __syncthreads();
  atomicAdd(&partial[blockIdx.x], 1.0f);
}

// Threads of the upper half read shared values nobody wrote when `all_write` is false.
__global__ void half_written(float* out, bool all_write) {
  __shared__ float s[64];
  if (all_write || threadIdx.x < 32) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[63 - threadIdx.x];
}

// Lane 5 returns while its warp waits for it at a full-mask __syncwarp.
__global__ void lane_skips_syncwarp(float* out) {
  if (threadIdx.x == 5) return;
  __syncwarp();
  out[threadIdx.x] = 1.0f;
}

// A warp-level kernel: each warp rotates its 32 values by one lane through its own row of
// shared memory, ordered by __syncwarp (the line kRotateSyncwarp names).
constexpr unsigned kRotateSyncwarp = __LINE__ + 6;
__global__ void warp_rotate(const float* in, float* out) {
  __shared__ float rows[4][32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  rows[warp][lane] = in[i];
  __syncwarp();
  out[i] = rows[warp][(lane + 1) % 32];
}

// cp.async: each thread copies 16 bytes into a stage that a thread of another warp reads;
// `wait` and `barrier` say whether the copies are waited for and the block synchronised
// before the reads. One ldmatrix then reads rows of the stage that thread 0 overwrites,
// after a barrier when `barrier_before_reuse`.
__global__ void cp_async_stage(const float* in, float* out, bool wait, bool barrier, bool barrier_before_reuse) {
  EMBER_DYNAMIC_SHARED(float, stage);  // [64 threads][4 floats]
  const unsigned t = threadIdx.x;
  cp_async<16>(shared_address(stage + 4 * t), in + 4 * t);
  cp_async_commit();
  if (wait) cp_async_wait<0>();
  if (barrier) __syncthreads();
  const unsigned other = (t + 32) % 64;
  for (int k = 0; k < 4; ++k) out[4 * t + k] = stage[4 * other + k];
  cp_async_wait<0>();
  __syncthreads();
  uint32_t r[1];
  if (t < 32) ldmatrix<1, false>(r, shared_address(stage + 4 * (t % 8)));  // rows of threads 0..7's copies
  if (barrier_before_reuse) __syncthreads();
  if (t == 32) stage[0] = 0.0f;
}

// Skips a barrier site as EMBER_EMU_SKIP_BARRIER does, for one test.
class SkipBarrier {
 public:
  explicit SkipBarrier(const std::string& site) : old_(emu::detail::set_skipped_barrier(site)) {}
  ~SkipBarrier() { emu::detail::set_skipped_barrier(old_); }

 private:
  std::string old_;
};

TEST(EmulatorChecks, SharedMemoryReusedWithoutABarrierIsAWriteAfterRead) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kAll);
  std::vector<float> out(64);
  launch<reuse_shared>(LaunchConfig{dim3(2), dim3(64), 0}, nullptr, out.data(), true);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], float(t) * 2.0f);
  const std::string err =
      launch_error([&] { launch<reuse_shared>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, out.data(), false); });
  EXPECT_NE(err.find("reuse_shared"), std::string::npos) << err;
  // A write-after-read when the reader ran first, a read-after-write in the other order.
  EXPECT_TRUE(err.find("racecheck: write-after-read hazard on static shared memory") != std::string::npos ||
              err.find("racecheck: read-after-write hazard on static shared memory") != std::string::npos)
      << err;
  EXPECT_NE(err.find("with no __syncthreads() between them"), std::string::npos) << err;
  // Both source lines: the read and the write.
  EXPECT_EQ(count(err, "test_checks.cpp:"), 2) << err;
}

TEST(EmulatorChecks, AReadOfAnotherWarpsWriteNeedsABarrier) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kRace);
  std::vector<float> out(64);
  launch<neighbour_read>(LaunchConfig{dim3(1), dim3(64), 64 * sizeof(float)}, nullptr, out.data(), true);
  // Both orders of the threads: the read comes after the write or before it.
  for (int launch_no = 0; launch_no < 2; ++launch_no) {
    const std::string err = launch_error(
        [&] { launch<neighbour_read>(LaunchConfig{dim3(1), dim3(64), 64 * sizeof(float)}, nullptr, out.data(), false); });
    EXPECT_TRUE(err.find("read-after-write hazard on dynamic shared memory, byte 124") != std::string::npos ||
                err.find("write-after-read hazard on dynamic shared memory, byte 124") != std::string::npos)
        << err;
    EXPECT_NE(err.find("(warp 0, lane 31)"), std::string::npos) << err;
    EXPECT_NE(err.find("(warp 1, lane 0)"), std::string::npos) << err;
  }
}

TEST(EmulatorChecks, InsideAWarpAMissingSyncwarpIsAWarning) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kRace);
  std::vector<float> out(32);
  testing::internal::CaptureStderr();
  launch<warp_exchange>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data(), true);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  testing::internal::CaptureStderr();
  launch<warp_exchange>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data(), false);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("warning: racecheck:"), std::string::npos) << warning;
  EXPECT_NE(warning.find("with no __syncwarp or warp collective between them"), std::string::npos) << warning;
}

TEST(EmulatorChecks, AtomicsDoNotRaceEachOtherButDoRaceAPlainWrite) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kRace);
  int out = 0;
  launch<shared_counter>(LaunchConfig{dim3(3), dim3(96), 0}, nullptr, &out, true);
  EXPECT_EQ(out, 96);
  const std::string err =
      launch_error([&] { launch<shared_counter>(LaunchConfig{dim3(1), dim3(96), 0}, nullptr, &out, false); });
  EXPECT_NE(err.find("hazard on static shared memory"), std::string::npos) << err;
}

TEST(EmulatorChecks, GlobalMemoryOfOneBlockIsCheckedToo) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kRace);
  std::vector<float> partial(4);
  launch<global_partial>(LaunchConfig{dim3(4), dim3(128), 0}, nullptr, partial.data(), true);
  for (float p : partial) EXPECT_EQ(p, 128.0f);
  const std::string err =
      launch_error([&] { launch<global_partial>(LaunchConfig{dim3(4), dim3(128), 0}, nullptr, partial.data(), false); });
  EXPECT_NE(err.find("hazard on global memory"), std::string::npos) << err;
  EXPECT_NE(err.find("global_partial"), std::string::npos) << err;
}

TEST(EmulatorChecks, ReadingUnwrittenSharedMemoryIsAnInitcheckError) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kAll);
  std::vector<float> out(64);
  launch<half_written>(LaunchConfig{dim3(2), dim3(64), 0}, nullptr, out.data(), true);
  // What an earlier block left in static shared memory does not count as written.
  const std::string err =
      launch_error([&] { launch<half_written>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, out.data(), false); });
  EXPECT_NE(err.find("initcheck"), std::string::npos) << err;
  EXPECT_NE(err.find("which no thread of the block has written"), std::string::npos) << err;
  EXPECT_EQ(count(err, "test_checks.cpp:"), 1) << err;
}

TEST(EmulatorChecks, ALaneThatReturnsBeforeItsSyncwarpIsASynccheckError) {
  Checks on(kAll);
  std::vector<float> out(32);
  const std::string err =
      launch_error([&] { launch<lane_skips_syncwarp>(LaunchConfig{dim3(2), dim3(32), 0}, nullptr, out.data()); });
  EXPECT_NE(err.find("synccheck: __syncwarp"), std::string::npos) << err;
  EXPECT_NE(err.find("names lane 5 of warp 0"), std::string::npos) << err;
}

TEST(EmulatorChecks, APlantedMissingSyncwarpInAWarpLevelKernelIsCaught) {
  EMBER_NEED_INSTRUMENTATION();
  Checks on(kAll);
  std::vector<float> in(256), out(256);
  for (int i = 0; i < 256; ++i) in[i] = float(i);
  testing::internal::CaptureStderr();
  launch<warp_rotate>(LaunchConfig{dim3(2), dim3(128), 0}, nullptr, in.data(), out.data());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], float(i / 32 * 32 + (i + 1) % 32));
  // The emulator's mutation aid removes that __syncwarp (EMBER_EMU_SKIP_BARRIER). Racecheck
  // alone: in one of the two orders a lane reads its neighbour's slot before any write.
  SkipBarrier planted("emu/test_checks.cpp:" + std::to_string(kRotateSyncwarp));
  Checks race(kRace);
  testing::internal::CaptureStderr();
  launch<warp_rotate>(LaunchConfig{dim3(2), dim3(128), 0}, nullptr, in.data(), out.data());
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("warp_rotate, block"), std::string::npos) << warning;
  EXPECT_NE(warning.find("warning: racecheck:"), std::string::npos) << warning;
  EXPECT_NE(warning.find("with no __syncwarp or warp collective between them"), std::string::npos) << warning;
  // The store before the removed __syncwarp and the load after it.
  EXPECT_NE(warning.find("test_checks.cpp:" + std::to_string(kRotateSyncwarp - 1)), std::string::npos) << warning;
  EXPECT_NE(warning.find("test_checks.cpp:" + std::to_string(kRotateSyncwarp + 1)), std::string::npos) << warning;
}

TEST(EmulatorChecks, ASkippedBarrierIsNoBarrier) {
  std::vector<float> out(64);
  // reuse_shared's first __syncthreads: without it, half the threads read before the writes.
  const std::string err = launch_error([&] {
    SkipBarrier skip("tests/emu/test_checks.cpp:" + std::to_string(kReuseFirstBarrier));
    Checks on(kRace);
    launch<reuse_shared>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, out.data(), true);
  });
  if (kInstrumented) EXPECT_NE(err.find("racecheck"), std::string::npos) << err;
  EXPECT_NE(launch_error([&] { SkipBarrier bad("test_checks.cpp"); }).find("EMBER_EMU_SKIP_BARRIER"),
            std::string::npos);
}

TEST(EmulatorChecks, CpAsyncCopiesAreWritesOfTheIssuingThread) {
  EMBER_NEED_INSTRUMENTATION();
  std::vector<float> in(256), out(256);
  for (int i = 0; i < 256; ++i) in[i] = float(i);
  const LaunchConfig cfg{dim3(1), dim3(64), 64 * 16};
  {
    Checks on(kAll);
    launch<cp_async_stage>(cfg, nullptr, in.data(), out.data(), true, true, true);
    for (int t = 0; t < 64; ++t)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(out[4 * t + k], in[4 * ((t + 32) % 64) + k]);
  }
  // Landed but not synchronised: another warp's copy is read with no barrier between
  // (racecheck; the issuing thread is named as the writer).
  {
    Checks on(kRace);
    for (int launch_no = 0; launch_no < 2; ++launch_no) {
      const std::string err =
          launch_error([&] { launch<cp_async_stage>(cfg, nullptr, in.data(), out.data(), true, false, true); });
      EXPECT_NE(err.find("racecheck"), std::string::npos) << err;
      EXPECT_NE(err.find("with no __syncthreads() between them"), std::string::npos) << err;
    }
  }
  // Never waited for: a read of bytes no copy has landed in yet (initcheck).
  {
    Checks on(kAll);
    const std::string err =
        launch_error([&] { launch<cp_async_stage>(cfg, nullptr, in.data(), out.data(), false, true, true); });
    EXPECT_NE(err.find("initcheck"), std::string::npos) << err;
  }
  // ldmatrix's rows are reads: overwriting one with no barrier after it is a hazard.
  {
    Checks on(kRace);
    const std::string err =
        launch_error([&] { launch<cp_async_stage>(cfg, nullptr, in.data(), out.data(), true, true, false); });
    EXPECT_NE(err.find("racecheck"), std::string::npos) << err;
    EXPECT_NE(err.find("dynamic shared memory, byte 0"), std::string::npos) << err;
  }
}

TEST(EmulatorChecks, OffUnlessAskedFor) {
  EMBER_NEED_INSTRUMENTATION();
  Checks off(CheckOptions{});
  std::vector<float> out(64);
  EXPECT_EQ(launch_error([&] { launch<reuse_shared>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, out.data(), false); }),
            "");
}

}  // namespace
}  // namespace ember::kernels::cuda
