// The emulator's profile counters (kernels/emu/profile.h) on kernels whose counts Nsight
// Compute's definitions fix: coalesced, strided and 16-byte global accesses, shared-memory
// broadcasts and bank conflicts, unique bytes, the tensor-core instructions' requests (not
// their models' bookkeeping), and sm_90's occupancy rules. Compiled with
// the kernels' instrumentation (EMBER_EMU_INSTRUMENT); without it the counting tests skip.
#include <gtest/gtest.h>

#include <new>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/emu/profile.h"

namespace ember::kernels::cuda {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kInstrumented = true;
#else
constexpr bool kInstrumented = false;
#endif
#define EMBER_NEED_INSTRUMENTATION()                                                             \
  do {                                                                                           \
    if (!kInstrumented) GTEST_SKIP() << "built without EMBER_EMU_INSTRUMENT's instrumentation"; \
  } while (0)

// Host memory as cudaMalloc aligns it (256 bytes): a warp's 128 contiguous bytes are 4
// whole sectors only when they start on one.
template <class T>
struct Aligned {
  explicit Aligned(size_t n) : p(new (std::align_val_t(256)) T[n]()) {}
  ~Aligned() { ::operator delete[](p, std::align_val_t(256)); }
  T* data() { return p; }
  T* p;
};

// The profile of the one launch `run` makes.
template <class F>
emu::LaunchProfile profile_of(F run) {
  emu::set_profile("all", false);
  run();
  auto profiles = emu::take_profiles();
  emu::set_profile("", false);
  EXPECT_EQ(profiles.size(), 1u);
  return profiles.empty() ? emu::LaunchProfile{} : profiles[0];
}

__global__ void copy_strided(const float* in, float* out, int stride) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i * stride];
}

__global__ void copy_vec4(const float4* in, float4* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}

TEST(EmuProfile, CoalescedLoadsAreFourSectorsARequest) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float> in(1024), out(1024);
  const auto p = profile_of([&] {
    launch<copy_strided>(LaunchConfig{dim3(4), dim3(256), 0}, nullptr, in.data(), out.data(), 1);
  });
  EXPECT_EQ(p.global_load_requests, 32u);  // 1024 threads, 32 warps, one load each
  EXPECT_DOUBLE_EQ(p.load_sectors_per_request(), 4.0);
  EXPECT_EQ(p.global_store_requests, 32u);
  EXPECT_DOUBLE_EQ(p.store_sectors_per_request(), 4.0);
  EXPECT_EQ(p.unique_read_bytes, 4096u);
  EXPECT_EQ(p.unique_write_bytes, 4096u);
  EXPECT_EQ(p.shared_wavefronts, 0u);
  EXPECT_EQ(p.grid.x, 4u);
  EXPECT_EQ(p.block.x, 256u);
  EXPECT_NE(p.kernel.find("copy_strided"), std::string::npos);
}

TEST(EmuProfile, StridedLoadsTouchASectorALane) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float> in(256 * 32), out(256);
  const auto p = profile_of([&] {
    launch<copy_strided>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data(), 32);
  });
  EXPECT_DOUBLE_EQ(p.load_sectors_per_request(), 32.0);
  EXPECT_DOUBLE_EQ(p.store_sectors_per_request(), 4.0);
  EXPECT_EQ(p.unique_read_bytes, 1024u);  // 4 of every 128 bytes
}

TEST(EmuProfile, SixteenByteLoadsAreSixteenSectorsARequest) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float4> in(256), out(256);
  const auto p = profile_of([&] {
    launch<copy_vec4>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data());
  });
  EXPECT_EQ(p.global_load_requests, 8u);
  EXPECT_DOUBLE_EQ(p.load_sectors_per_request(), 16.0);
  EXPECT_DOUBLE_EQ(p.store_sectors_per_request(), 16.0);
}

// Each warp writes its row of shared memory, then reads it with `stride` words between
// lanes: a stride of 1 is conflict-free, 2 a two-way conflict, 32 a 32-way one, 0 a
// broadcast.
__global__ void shared_stride(float* out, int stride) {
  __shared__ float s[32 * 33];
  const int lane = threadIdx.x;
  for (int k = 0; k < 33; ++k) s[k * 32 + lane] = float(k);
  __syncthreads();
  out[lane] = s[(lane * stride) % (32 * 33)];
}

__global__ void shared_double(double* out) {
  __shared__ double s[32];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(EmuProfile, SharedMemoryBankConflicts) {
  EMBER_NEED_INSTRUMENTATION();
  std::vector<float> out(32);
  for (auto [stride, wavefronts] : {std::pair{1, 1}, {2, 2}, {32, 32}, {0, 1}, {33, 1}}) {
    const auto p = profile_of([&] {
      launch<shared_stride>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data(), stride);
    });
    EXPECT_EQ(p.shared_store_requests, 33u) << "stride " << stride;
    EXPECT_EQ(p.shared_load_requests, 1u) << "stride " << stride;
    // 33 conflict-free stores, then the load.
    EXPECT_EQ(p.shared_wavefronts, 33u + wavefronts) << "stride " << stride;
    EXPECT_EQ(p.bank_conflicts(), uint64_t(wavefronts - 1)) << "stride " << stride;
  }
}

TEST(EmuProfile, SixtyFourBitSharedAccessesTakeTwoPhases) {
  EMBER_NEED_INSTRUMENTATION();
  std::vector<double> out(32);
  const auto p = profile_of([&] { launch<shared_double>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data()); });
  EXPECT_EQ(p.shared_wavefronts, 4u);  // a store and a load, two half-warps each
  EXPECT_EQ(p.bank_conflicts(), 0u);
}

// One block reads n floats, then, after a barrier, the same n again (a row's statistics,
// then its normalisation).
__global__ void read_twice(const float* in, float* out, int n) {
  float s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
  out[threadIdx.x] = s;
}

TEST(EmuProfile, ReReadsThatFitTheBlocksL1ShareHit) {
  EMBER_NEED_INSTRUMENTATION();
  // 256 threads, no registers known: 8 blocks an SM, 31 KiB of L1 each. 4 KiB twice: the
  // second pass hits, and so do the lanes of later warps in a sector already read.
  Aligned<float> in(1024), out(256);
  const auto p = profile_of([&] {
    launch<read_twice>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data(), 1024);
  });
  EXPECT_EQ(p.global_load_sectors, 256u);  // 8 warps x 4 loads x 4 sectors, twice
  EXPECT_EQ(p.global_load_l1_miss_sectors, 128u);  // the 4 KiB once
  EXPECT_EQ(p.l2_sectors(), 128u + 32u);  // and the stores' 32 sectors
}

TEST(EmuProfile, ReReadsLargerThanTheBlocksL1ShareMiss) {
  EMBER_NEED_INSTRUMENTATION();
  // 64 KiB twice through 31 KiB: the least recently used sector is the next one read.
  Aligned<float> in(16384), out(256);
  const auto p = profile_of([&] {
    launch<read_twice>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data(), 16384);
  });
  EXPECT_EQ(p.global_load_sectors, 4096u);
  EXPECT_EQ(p.global_load_l1_miss_sectors, 4096u);
}

TEST(EmuProfile, EachLaunchStartsWithAColdL1) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float> in(1024), out(256);
  emu::set_profile("all", false);
  for (int i = 0; i < 2; ++i)
    launch<read_twice>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data(), 1024);
  const auto profiles = emu::take_profiles();
  emu::set_profile("", false);
  ASSERT_EQ(profiles.size(), 2u);
  EXPECT_EQ(profiles[0].global_load_l1_miss_sectors, 128u);
  EXPECT_EQ(profiles[1].global_load_l1_miss_sectors, 128u);
}

// One warp copies 32 rows of 16 bytes (contiguous in global memory) with one cp.async each
// into shared rows 128 bytes apart, then reads kCount 8 x 8 matrices of them back with
// ldmatrix. Unswizzled, the 8 rows of a quarter-warp all start in banks 0-3: 8 wavefronts
// a phase. Swizzled (row r's chunk moved by r % 8 chunks of 16 bytes, as the GEMM's tiles),
// they cover the 32 banks once.
template <int kCount>
__global__ void tc_rows(const uint4* src, uint4* out, bool swizzle) {
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int lane = int(threadIdx.x);
  const tc::SharedAddr row = tc::shared_address(smem + lane * 128 + (swizzle ? lane % 8 * 16 : 0));
  tc::cp_async<16>(row, src + lane);
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
  __syncwarp();
  uint32_t r[kCount], v[4] = {};
  tc::ldmatrix<kCount, false>(r, row);
  for (int i = 0; i < kCount; ++i) v[i] = r[i];
  out[lane] = make_uint4(v[0], v[1], v[2], v[3]);
}

template <int kCount>
void check_tc_rows(bool swizzle) {
  Aligned<uint4> src(32), out(32);
  const auto p = profile_of([&] {
    launch<tc_rows<kCount>>(LaunchConfig{dim3(1), dim3(32), 32 * 128}, nullptr, src.data(), out.data(), swizzle);
  });
  const uint64_t per_phase = swizzle ? 1 : 8;
  // cp.async: one global load of 512 contiguous bytes, .cg (past the L1: every sector a
  // miss), and one 16-byte shared store of the warp, four quarter-warp phases.
  EXPECT_EQ(p.global_load_requests, 1u);
  EXPECT_EQ(p.global_load_sectors, 16u);
  EXPECT_EQ(p.global_load_bytes, 512u);
  EXPECT_EQ(p.global_load_l1_miss_sectors, 16u);
  EXPECT_EQ(p.unique_read_bytes, 512u);
  EXPECT_EQ(p.shared_store_requests, 1u);
  // ldmatrix.xN: one shared load of the warp; lanes 8q..8q+7 name matrix q's rows.
  EXPECT_EQ(p.shared_load_requests, 1u);
  EXPECT_EQ(p.shared_ideal_wavefronts, 4u + kCount);
  EXPECT_EQ(p.shared_wavefronts, per_phase * (4 + kCount));
  EXPECT_EQ(p.global_store_requests, 1u);  // out
  EXPECT_EQ(p.unique_write_bytes, 512u);
}

TEST(EmuProfile, LdmatrixAndCpAsyncAreOneRequestAWarp) {
  EMBER_NEED_INSTRUMENTATION();
  check_tc_rows<4>(false);
  check_tc_rows<4>(true);
  check_tc_rows<2>(false);
  check_tc_rows<1>(true);
}

// Two 4-byte cp.async a lane, to consecutive bytes: two instructions (not one 8-byte access,
// as the host compiler's split vectors are joined), each of 8 sectors; .ca, so the second
// finds its sectors in the L1. Shared words 2 lane + k: lanes 0 and 16 share a bank.
__global__ void tc_small_copies(const uint32_t* src) {
  EMBER_DYNAMIC_SHARED(uint32_t, smem);
  const int lane = int(threadIdx.x);
  for (int k = 0; k < 2; ++k) tc::cp_async<4>(tc::shared_address(smem + 2 * lane + k), src + 2 * lane + k);
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
}

TEST(EmuProfile, SmallCpAsyncsAreSeparateRequests) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<uint32_t> src(64);
  const auto p =
      profile_of([&] { launch<tc_small_copies>(LaunchConfig{dim3(1), dim3(32), 256}, nullptr, src.data()); });
  EXPECT_EQ(p.global_load_requests, 2u);
  EXPECT_EQ(p.global_load_sectors, 16u);
  EXPECT_EQ(p.global_load_l1_miss_sectors, 8u);
  EXPECT_EQ(p.unique_read_bytes, 256u);
  EXPECT_EQ(p.shared_store_requests, 2u);
  EXPECT_EQ(p.shared_load_requests, 0u);
  EXPECT_EQ(p.shared_wavefronts, 4u);
  EXPECT_EQ(p.shared_ideal_wavefronts, 2u);
  EXPECT_EQ(p.global_store_requests, 0u);
}

// mma.sync works on registers: its model's exchange through per-warp slots is no memory.
__global__ void tc_mma(float* out) {
  const uint32_t x = 0x3F803F80u + threadIdx.x;  // two bf16 near 1
  const uint32_t a[4] = {x, x, x, x}, b[2] = {x, x};
  float d[4] = {};
  tc::mma_16816<__nv_bfloat16>(d, a, b);
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}

TEST(EmuProfile, MmaTouchesNoMemory) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float> out(32);
  const auto p = profile_of([&] { launch<tc_mma>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, out.data()); });
  EXPECT_EQ(p.global_load_requests, 0u);
  EXPECT_EQ(p.shared_load_requests + p.shared_store_requests, 0u);
  EXPECT_EQ(p.shared_wavefronts, 0u);
  EXPECT_EQ(p.global_store_requests, 1u);
  EXPECT_EQ(p.unique_write_bytes, 128u);
}

TEST(EmuProfile, L1ShareIsWhatSharedMemoryLeaves) {
  emu::Occupancy o;
  o.blocks_per_sm = 8;  // 8 KiB reserved: the 8 KiB carveout
  EXPECT_EQ(emu::l1_bytes_per_block(o, 0), (256u - 8u) * 1024u / 8u);
  o.blocks_per_sm = 2;  // 2 x 41 KiB: the 100 KiB carveout
  EXPECT_EQ(emu::l1_bytes_per_block(o, 40 * 1024), (256u - 100u) * 1024u / 2u);
  o.blocks_per_sm = 1;  // 228 KiB: all of it
  EXPECT_EQ(emu::l1_bytes_per_block(o, 227 * 1024), 28u * 1024u);
}

TEST(EmuProfile, OnlyWantedLaunchesAreProfiled) {
  EMBER_NEED_INSTRUMENTATION();
  Aligned<float> in(256), out(256);
  emu::set_profile("copy_vec4", false);
  launch<copy_strided>(LaunchConfig{dim3(1), dim3(256), 0}, nullptr, in.data(), out.data(), 1);
  EXPECT_TRUE(emu::take_profiles().empty());
  emu::set_profile("", false);
}

// Note [Sampled blocks]: each thread doubles elements a grid's stride apart.
__global__ void double_grid_stride(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = 2 * in[i];
}

// The profile of one launch of double_grid_stride over n elements, sampling `sample`
// blocks (0: none), and how many outputs it wrote.
struct Sampled {
  emu::LaunchProfile profile;
  int written = 0;
};
Sampled sampled_run(int grid, int n, uint64_t sample) {
  Aligned<float> in{size_t(n)}, out{size_t(n)};
  for (int i = 0; i < n; ++i) in.data()[i] = 1.0f;
  emu::set_profile_sampling(sample);
  Sampled r;
  r.profile = profile_of([&] {
    launch<double_grid_stride>(LaunchConfig{dim3(unsigned(grid)), dim3(64), 0}, nullptr, in.data(), out.data(), n);
  });
  emu::set_profile_sampling(0);
  for (int i = 0; i < n; ++i) r.written += out.data()[i] == 2.0f;
  return r;
}

void expect_same_counts(const emu::LaunchProfile& sampled, const emu::LaunchProfile& whole) {
  EXPECT_EQ(sampled.global_load_requests, whole.global_load_requests);
  EXPECT_EQ(sampled.global_load_sectors, whole.global_load_sectors);
  EXPECT_EQ(sampled.global_load_bytes, whole.global_load_bytes);
  EXPECT_EQ(sampled.global_store_requests, whole.global_store_requests);
  EXPECT_EQ(sampled.global_store_sectors, whole.global_store_sectors);
  EXPECT_EQ(sampled.global_store_bytes, whole.global_store_bytes);
  EXPECT_EQ(sampled.unique_read_bytes, whole.unique_read_bytes);
  EXPECT_EQ(sampled.unique_write_bytes, whole.unique_write_bytes);
  EXPECT_EQ(sampled.global_load_accesses, whole.global_load_accesses);
  EXPECT_EQ(sampled.global_load_bursts, whole.global_load_bursts);
  EXPECT_EQ(sampled.global_load_l1_miss_sectors, whole.global_load_l1_miss_sectors);
  EXPECT_EQ(sampled.grid_blocks, whole.grid_blocks);
}

TEST(EmuProfile, SampledGridStrideLaunchCountsAsTheWholeGrid) {
  EMBER_NEED_INSTRUMENTATION();
  const int grid = 40, n = grid * 64 * 5;  // 5 iterations a thread, every block alike
  const Sampled whole = sampled_run(grid, n, 0), sampled = sampled_run(grid, n, 6);
  EXPECT_EQ(whole.profile.blocks_run, 40u);
  EXPECT_EQ(whole.written, n);
  EXPECT_EQ(sampled.profile.blocks_run, 6u);
  EXPECT_EQ(sampled.written, 6 * 64 * 5);  // the others never ran
  EXPECT_EQ(whole.profile.global_load_requests, uint64_t(grid) * 2 * 5);  // 2 warps a block
  expect_same_counts(sampled.profile, whole.profile);
}

TEST(EmuProfile, SampledLaunchWithATailCountsAsTheWholeGrid) {
  EMBER_NEED_INSTRUMENTATION();
  // One element a thread, the last block a partial one (17 of 64 threads, half a warp):
  // the sample's last block is the grid's, counted once, the others scaled.
  const int grid = 37, n = 36 * 64 + 17;
  const Sampled whole = sampled_run(grid, n, 0), sampled = sampled_run(grid, n, 5);
  EXPECT_EQ(whole.written, n);
  EXPECT_EQ(sampled.profile.blocks_run, 5u);
  EXPECT_EQ(sampled.written, 4 * 64 + 17);
  expect_same_counts(sampled.profile, whole.profile);
}

__global__ void add_row(const float* x, const float* row, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = x[i] + row[threadIdx.x];
}

TEST(EmuProfile, SampledLaunchCountsDataEveryBlockReadsOnce) {
  EMBER_NEED_INSTRUMENTATION();
  // Every block reads the same 64-float row: the grid's unique bytes hold it once.
  const int grid = 30, n = grid * 64;
  Aligned<float> x{size_t(n)}, row{64}, out{size_t(n)};
  auto run = [&](uint64_t sample) {
    emu::set_profile_sampling(sample);
    const emu::LaunchProfile p = profile_of(
        [&] { launch<add_row>(LaunchConfig{dim3(unsigned(grid)), dim3(64), 0}, nullptr, x.data(), row.data(), out.data()); });
    emu::set_profile_sampling(0);
    return p;
  };
  const emu::LaunchProfile whole = run(0), sampled = run(4);
  EXPECT_EQ(whole.unique_read_bytes, uint64_t(n + 64) * 4);
  EXPECT_EQ(sampled.blocks_run, 4u);
  expect_same_counts(sampled, whole);
}

// Block b reads elements b, b + grid, b + 2 grid...: 8 blocks share each sector, not a byte.
__global__ void gather_interleaved(const float* in, float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = in[threadIdx.x * gridDim.x + blockIdx.x];
}

TEST(EmuProfile, SampledBlocksSharingSectorsNotBytesScale) {
  EMBER_NEED_INSTRUMENTATION();
  const int grid = 64, n = grid * 64;
  Aligned<float> in{size_t(n)}, out{size_t(n)};
  auto run = [&](uint64_t sample) {
    emu::set_profile_sampling(sample);
    const emu::LaunchProfile p = profile_of(
        [&] { launch<gather_interleaved>(LaunchConfig{dim3(unsigned(grid)), dim3(64), 0}, nullptr, in.data(), out.data()); });
    emu::set_profile_sampling(0);
    return p;
  };
  const emu::LaunchProfile whole = run(0), sampled = run(22);  // blocks 3 apart
  EXPECT_EQ(whole.unique_read_bytes, uint64_t(n) * 4);
  expect_same_counts(sampled, whole);
}

TEST(EmuProfile, SamplingIsOffUnlessAskedAndOnlyForProfiledLaunches) {
  EMBER_NEED_INSTRUMENTATION();
  const int grid = 20, n = grid * 64;
  EXPECT_EQ(sampled_run(grid, n, 0).written, n);
  // Asked for, but the launch is not profiled: it runs whole.
  Aligned<float> in{size_t(n)}, out{size_t(n)};
  for (int i = 0; i < n; ++i) in.data()[i] = 1.0f;
  emu::set_profile_sampling(4);
  launch<double_grid_stride>(LaunchConfig{dim3(unsigned(grid)), dim3(64), 0}, nullptr, in.data(), out.data(), n);
  emu::set_profile_sampling(0);
  int written = 0;
  for (int i = 0; i < n; ++i) written += out.data()[i] == 2.0f;
  EXPECT_EQ(written, n);
  EXPECT_THROW(emu::set_profile_sampling(1), Error);
}

TEST(EmuProfile, GridsNoLargerThanTheSampleRunWhole) {
  EMBER_NEED_INSTRUMENTATION();
  const int grid = 8, n = grid * 64 * 2;
  const Sampled at = sampled_run(grid, n, 8), above = sampled_run(grid, n, 100);
  EXPECT_EQ(at.profile.blocks_run, 8u);
  EXPECT_EQ(at.written, n);
  EXPECT_EQ(above.profile.blocks_run, 8u);
  EXPECT_EQ(above.written, n);
  expect_same_counts(at.profile, sampled_run(grid, n, 0).profile);
}

TEST(EmuProfile, Sm90OccupancyRules) {
  emu::KernelResources r{true, 32, 0, 0};
  auto o = emu::sm90_occupancy(r, 256, 0);
  EXPECT_EQ(o.blocks_per_sm, 8);  // 64 warps
  EXPECT_EQ(o.warps_per_sm, 64);
  r.registers = 64;  // 2048 registers a warp: 32 warps
  o = emu::sm90_occupancy(r, 1024, 0);
  EXPECT_EQ(o.blocks_per_sm, 1);
  EXPECT_STREQ(o.limiter, "registers");
  r.registers = 33;  // rounds up to 40 a thread (1280 a warp): 51 warps, 6 blocks of 8
  o = emu::sm90_occupancy(r, 256, 0);
  EXPECT_EQ(o.blocks_per_sm, 6);
  r.registers = 32;
  o = emu::sm90_occupancy(r, 256, 100 * 1024);  // 101 KiB a block with the reserved 1 KiB
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_STREQ(o.limiter, "shared memory");
  o = emu::sm90_occupancy(r, 32, 0);
  EXPECT_EQ(o.blocks_per_sm, 32);
  EXPECT_STREQ(o.limiter, "blocks");
}

}  // namespace
}  // namespace ember::kernels::cuda
