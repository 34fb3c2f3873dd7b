// The CUDA emulator itself: kernels written as for a GPU give the GPU's answers, and the
// mistakes a GPU punishes (divergent barriers, shared-memory overruns, impossible launches)
// are reported as errors naming the kernel instead of hanging or passing.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {
namespace {

// --- Kernels as they would be written for a GPU --------------------------------------------

// Sum of x into out[blockIdx.x]: grid-stride loads, a shuffle reduction per warp, then the
// warps' sums through shared memory.
__global__ void block_sum(const float* x, int64_t n, float* out) {
  __shared__ float warp_sums[32];
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += x[i];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < int(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) out[blockIdx.x] = acc;
  }
}

// out = in^T for a rows x cols matrix, through a 32 x 33 tile (the pad column avoids bank
// conflicts); blocks of 32 x 8 threads.
__global__ void transpose_tiled(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int r = blockIdx.y * 32 + k;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[int64_t(r) * cols + c];
  }
  __syncthreads();
  const int oc = blockIdx.y * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int orow = blockIdx.x * 32 + k;
    if (orow < cols && oc < rows) out[int64_t(orow) * rows + oc] = tile[threadIdx.x][k];
  }
}

// Inclusive prefix sum of each warp's values (Hillis-Steele with __shfl_up_sync); the mask
// names the lanes that exist, so a partial last warp takes part too.
__global__ void warp_scan(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned lanes = min(32u, blockDim.x - threadIdx.x / 32 * 32);
  const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  int v = i < n ? in[i] : 0;
  for (int d = 1; d < 32; d *= 2) {
    const int up = __shfl_up_sync(mask, v, d);
    if (int(threadIdx.x % 32) >= d) v += up;
  }
  if (i < n) out[i] = v;
}

__global__ void votes(const int* pred, unsigned* ballot, int* any, int* all) {
  const int p = pred[threadIdx.x];
  const unsigned b = __ballot_sync(0xffffffffu, p);
  const int a = __any_sync(0xffffffffu, p), l = __all_sync(0xffffffffu, p);
  if (threadIdx.x % 32 == 0) {
    ballot[threadIdx.x / 32] = b;
    any[threadIdx.x / 32] = a;
    all[threadIdx.x / 32] = l;
  }
}

__global__ void xor_butterfly_max(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int m = 16; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  out[threadIdx.x] = v;
}

__global__ void broadcast_lane(const float* in, float* out, int src, int width) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], src, width);
}

__global__ void count_with_atomics(int* counter, float* fsum) {
  atomicAdd(counter, 1);
  atomicAdd(fsum, 0.5f);
}

__global__ void dynamic_reverse(const float* in, float* out, int n) {
  EMBER_DYNAMIC_SHARED(float, buf);
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}

// --- Kernels with the mistakes the emulator must catch ---------------------------------------

__global__ void barrier_in_branch(float* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block never arrives
  out[threadIdx.x] = 1.0f;
}

__global__ void barriers_at_two_sites(float* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void early_return_then_barrier(const float* in, float* out, int n) {
  const int i = threadIdx.x;
  if (i >= n) return;
  __syncthreads();
  out[i] = in[i];
}

__global__ void shuffle_with_returned_lane(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void overrun_dynamic_shared(int n) {
  EMBER_DYNAMIC_SHARED(float, buf);
  if (threadIdx.x == 0) buf[n] = 1.0f;  // one past the end
}

__global__ void partial_warp_reads_missing_lane(float* out) {
  // 16-thread block: lane 0 reads lane 16, which does not exist.
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 16);
}

// Reads its lower neighbour's shared value with no barrier after the writes: right when
// threads happen to run in index order, wrong (the NaN dynamic shared memory starts as)
// when they do not.
__global__ void racy_neighbour_read(float* out) {
  EMBER_DYNAMIC_SHARED(float, buf);
  buf[threadIdx.x] = float(threadIdx.x);
  out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x > 0 ? buf[threadIdx.x - 1] : 0.0f;
}

__global__ void noop() {}

template <class T>
std::vector<T> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

std::string launch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Emulator, BlockReductionMatchesDoubleSum) {
  const int64_t n = int64_t(1) << 20;
  const auto x = random_vector<float>(n, 1);
  std::vector<float> partial(64, NAN);
  const auto start = std::chrono::steady_clock::now();
  launch<block_sum>(LaunchConfig{dim3(64), dim3(256), 0}, nullptr, x.data(), n, partial.data());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double want = std::accumulate(x.begin(), x.end(), 0.0);
  const double got = std::accumulate(partial.begin(), partial.end(), 0.0);
  // 2^20 float additions, each block summing ~16k values in a tree: |error| well below 1e-3.
  EXPECT_NEAR(got, want, 1e-3);
  RecordProperty("emulated_ms", std::to_string(ms));
  std::printf("64 blocks x 256 threads, 1 Mi floats: %.1f ms\n", ms);
}

TEST(Emulator, TiledTransposeOfAwkwardSizes) {
  for (auto [rows, cols] : {std::pair{1, 1}, {33, 31}, {70, 129}, {32, 64}}) {
    const auto in = random_vector<float>(size_t(rows) * cols, 2);
    std::vector<float> out(in.size(), NAN);
    launch<transpose_tiled>(LaunchConfig{dim3((cols + 31) / 32, (rows + 31) / 32), dim3(32, 8), 0}, nullptr,
                            in.data(), out.data(), rows, cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ASSERT_EQ(out[size_t(c) * rows + r], in[size_t(r) * cols + c]) << rows << "x" << cols;
  }
}

TEST(Emulator, WarpShuffleScanIncludingAPartialWarp) {
  const int n = 100;  // blocks of 48: a full warp and a 16-lane one each
  std::vector<int> in(n), out(n, -7);
  std::iota(in.begin(), in.end(), 1);
  launch<warp_scan>(LaunchConfig{dim3((n + 47) / 48), dim3(48), 0}, nullptr, in.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    const int block_start = i / 48 * 48, warp_start = block_start + (i - block_start) / 32 * 32;
    int want = 0;
    for (int j = warp_start; j <= i; ++j) want += in[j];
    ASSERT_EQ(out[i], want) << "element " << i;
  }
}

TEST(Emulator, VotesAndButterflyAndBroadcast) {
  std::vector<int> pred(64, 0);
  for (int i = 0; i < 32; ++i) pred[i] = 1;  // warp 0: all; warp 1: only lanes 3 and 30
  pred[32 + 3] = pred[32 + 30] = 1;
  std::vector<unsigned> ballot(2);
  std::vector<int> any(2), all(2);
  launch<votes>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, pred.data(), ballot.data(), any.data(), all.data());
  EXPECT_EQ(ballot[0], 0xffffffffu);
  EXPECT_EQ(ballot[1], (1u << 3) | (1u << 30));
  EXPECT_EQ(any[0], 1);
  EXPECT_EQ(any[1], 1);
  EXPECT_EQ(all[0], 1);
  EXPECT_EQ(all[1], 0);

  const auto in = random_vector<float>(32, 3);
  std::vector<float> out(32, NAN);
  launch<xor_butterfly_max>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, in.data(), out.data());
  for (float v : out) EXPECT_EQ(v, *std::max_element(in.begin(), in.end()));

  launch<broadcast_lane>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, in.data(), out.data(), 3, 8);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(out[l], in[l / 8 * 8 + 3]) << "lane " << l;
}

TEST(Emulator, AtomicsCountEveryThreadOfEveryBlock) {
  int counter = 0;
  float sum = 0.0f;
  launch<count_with_atomics>(LaunchConfig{dim3(37), dim3(96), 0}, nullptr, &counter, &sum);
  EXPECT_EQ(counter, 37 * 96);
  EXPECT_EQ(sum, 37 * 96 * 0.5f);  // exact: every partial sum is a multiple of 0.5 below 2^23
}

TEST(Emulator, DynamicSharedMemoryAndItsOptIn) {
  const int n = 1000;
  const auto in = random_vector<float>(n, 4);
  std::vector<float> out(n, NAN);
  launch<dynamic_reverse>(LaunchConfig{dim3(1), dim3(128), n * sizeof(float)}, nullptr, in.data(), out.data(), n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], in[n - 1 - i]);

  // 64 KiB needs the opt-in a GPU needs.
  const int big = 16384;
  const auto in2 = random_vector<float>(big, 5);
  std::vector<float> out2(big, NAN);
  const LaunchConfig cfg{dim3(1), dim3(256), big * sizeof(float)};
  const std::string err =
      launch_error([&] { launch<dynamic_reverse>(cfg, nullptr, in2.data(), out2.data(), big); });
  EXPECT_NE(err.find("65536 bytes of dynamic shared memory"), std::string::npos) << err;
  EXPECT_NE(err.find("dynamic_reverse"), std::string::npos) << err;
  allow_dynamic_shared<dynamic_reverse>(big * sizeof(float));
  launch<dynamic_reverse>(cfg, nullptr, in2.data(), out2.data(), big);
  EXPECT_EQ(out2[0], in2[big - 1]);
}

TEST(Emulator, ABarrierNotReachedByAllThreadsIsReportedNotHung) {
  std::vector<float> out(32);
  const std::string err = launch_error([&] { launch<barrier_in_branch>(LaunchConfig{dim3(2), dim3(32), 0}, nullptr, out.data()); });
  EXPECT_NE(err.find("barrier_in_branch"), std::string::npos) << err;
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  EXPECT_NE(err.find("16 of 32 threads wait at __syncthreads()"), std::string::npos) << err;
  EXPECT_NE(err.find("16 threads have returned"), std::string::npos) << err;
}

TEST(Emulator, BarriersAtDifferentSitesAreDivergent) {
  std::vector<float> out(64);
  const std::string err =
      launch_error([&] { launch<barriers_at_two_sites>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, out.data()); });
  EXPECT_NE(err.find("divergent __syncthreads()"), std::string::npos) << err;
  EXPECT_NE(err.find("barriers_at_two_sites"), std::string::npos) << err;
}

TEST(Emulator, EarlyReturnBeforeABarrierIsCaught) {
  std::vector<float> in(64, 1.0f), out(64);
  // n = 64 fills the block: fine. n = 50 leaves 14 threads that returned.
  launch<early_return_then_barrier>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, in.data(), out.data(), 64);
  const std::string err = launch_error(
      [&] { launch<early_return_then_barrier>(LaunchConfig{dim3(1), dim3(64), 0}, nullptr, in.data(), out.data(), 50); });
  EXPECT_NE(err.find("50 of 64 threads wait"), std::string::npos) << err;
}

TEST(Emulator, AShuffleNamingAReturnedLaneIsCaught) {
  std::vector<float> out(32);
  const std::string err =
      launch_error([&] { launch<shuffle_with_returned_lane>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data()); });
  EXPECT_NE(err.find("shuffle_with_returned_lane"), std::string::npos) << err;
  EXPECT_TRUE(err.find("lane 5, which has returned") != std::string::npos ||
              err.find("for lanes 5") != std::string::npos)
      << err;
}

TEST(Emulator, WritingPastDynamicSharedMemoryIsCaught) {
  auto overrun = [] { launch<overrun_dynamic_shared>(LaunchConfig{dim3(1), dim3(32), 40 * sizeof(float)}, nullptr, 40); };
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer catches the write itself, and stops the process.
  EXPECT_DEATH(overrun(), "use-after-poison");
#else
  const std::string err = launch_error(overrun);
  EXPECT_NE(err.find("wrote past the end of its 160 bytes of dynamic shared memory"), std::string::npos) << err;
#endif
}

TEST(Emulator, ReadsFromMissingLanesAreUndefined) {
  std::vector<float> out(16, 0.0f);
  launch<partial_warp_reads_missing_lane>(LaunchConfig{dim3(1), dim3(16), 0}, nullptr, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST(Emulator, AMissingBarrierShowsInTheResults) {
  // Two launches of one block: one runs the threads in index order, the other not.
  int wrong = 0;
  for (int launch_no = 0; launch_no < 2; ++launch_no) {
    std::vector<float> out(64, 0.0f);
    launch<racy_neighbour_read>(LaunchConfig{dim3(1), dim3(64), 64 * sizeof(float)}, nullptr, out.data());
    for (float v : out) wrong += std::isnan(v);
  }
  EXPECT_GT(wrong, 0) << "the race went unnoticed";
}

TEST(Emulator, LaunchesBeyondDeviceLimitsAreRejected) {
  auto expect = [](LaunchConfig cfg, const char* what) {
    const std::string err = launch_error([&] { launch<noop>(cfg, nullptr); });
    EXPECT_NE(err.find(what), std::string::npos) << err;
    EXPECT_NE(err.find("noop"), std::string::npos) << err;
  };
  expect(LaunchConfig{dim3(1), dim3(1025), 0}, "1025 threads exceeds");
  expect(LaunchConfig{dim3(1), dim3(32, 32, 2), 0}, "2048 threads exceeds");
  expect(LaunchConfig{dim3(1), dim3(1, 1, 65), 0}, "exceeds the device's limits");
  expect(LaunchConfig{dim3(1, 65536), dim3(32), 0}, "exceeds the device's limits");
  expect(LaunchConfig{dim3(1), dim3(0), 0}, "empty launch");
  expect(LaunchConfig{dim3(1), dim3(32), 48 * 1024 + 1}, "above the 49152-byte limit");
  // An empty grid is no work: launch() skips it.
  EXPECT_EQ(launch_error([] { launch<noop>(LaunchConfig{dim3(0), dim3(32), 0}, nullptr); }), "");
}

}  // namespace
}  // namespace ember::kernels::cuda
