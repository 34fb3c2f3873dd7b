// The tensor-core primitives (kernels/cuda/tensor_core.cuh) against a scalar per-lane
// reference written here from the PTX ISA's fragment layouts: every ldmatrix form (.x1,
// .x2, .x4, with and without .trans), mma.sync m16n8k16 and m16n8k8 for bf16 and f16, the
// two together on a tile (what the GEMM and attention kernels do), and cp.async of 4, 8
// and 16 bytes with zero fill, at every wait_group depth and block sizes that are not a
// multiple of the warp. In the emulator this checks its models; on a GPU (the .gpu build
// of this file) the same checks run the PTX, so the two are held to one reference.
//
// Planted bugs: each test kernel takes a Plant, a deliberate mistake of the kind a kernel
// makes (a wrong fragment register, .trans swapped, a missing cp.async.wait_group), and the
// Planted* tests run those variants through the same checkers and require them to report
// mismatches. A missing wait shows only where copies land late: the emulator lands them at
// the wait, a GPU may land them early, so that test runs on the emulator.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/tensor_core.cuh"
#include "tests/cuda/harness.h"
#if !defined(__CUDACC__)
#include "kernels/emu/check.h"
#endif

namespace ember::kernels::cuda {
namespace {

using test::DeviceArray;

enum class Plant { kNone, kWrongFragment, kSwappedTrans, kMissingWait };

#if defined(__CUDACC__)
constexpr bool kEmulator = false;
// Stands in for the emulator's guard below.
struct WithoutInitcheck {};
#else
constexpr bool kEmulator = true;
// For the launches that read copies not landed yet on purpose (to see that the emulator
// lands them at the latest moment): the emulator's initcheck, when on (ctest runs these
// tests with EMBER_EMU_CHECK=all), reports such a read, as it should.
class WithoutInitcheck {
 public:
  WithoutInitcheck() : old_(emu::detail::check_options()) {
    emu::detail::CheckOptions o = old_;
    o.init = false;
    emu::detail::set_check_options(o);
  }
  ~WithoutInitcheck() { emu::detail::set_check_options(old_); }

 private:
  emu::detail::CheckOptions old_;
};
#endif

// --- Kernels ----------------------------------------------------------------------------------

// Each warp w loads kCount 8 x 8 matrices of 16-bit values from src[w] ([kCount][8][8],
// row-major) with ldmatrix; rows sit in shared memory in a scrambled order and with a padded
// stride, as the lanes' addresses may. out[w][lane][q]: register q of the lane.
template <int kCount, bool kTrans, Plant kPlant>
__global__ void ldmatrix_kernel(const uint16_t* src, uint32_t* out) {
  constexpr int kStride = 24;  // elements per shared row: 48 bytes, 16-byte aligned, not 16
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  uint16_t* mine = smem + warp * 4 * 8 * kStride;
  const uint16_t* from = src + warp * kCount * 64;
  auto slot = [](int q, int r) { return ((q * 8 + r) * 5 + 3) % 32; };  // row r of matrix q's shared row
  for (int x = lane; x < kCount * 64; x += 32) mine[slot(x / 64, x / 8 % 8) * kStride + x % 8] = from[x];
  __syncwarp();
  const int q = lane / 8 < kCount ? lane / 8 : 0;
  const tc::SharedAddr addr = tc::shared_address(mine + slot(q, lane % 8) * kStride);
  uint32_t r[kCount];
  tc::ldmatrix<kCount, (kPlant == Plant::kSwappedTrans) != kTrans>(r, addr);
  for (int i = 0; i < kCount; ++i) out[(warp * 32 + lane) * kCount + i] = r[i];
}

// Each warp w does d = a @ b + c on the per-lane registers given: a[w][lane][kK / 4],
// b[w][lane][kK / 8], c and d [w][lane][4].
template <class T, int kK, Plant kPlant>
__global__ void mma_kernel(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  const int i = int(threadIdx.x);
  float acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = c[i * 4 + j];
  if constexpr (kK == 16) {
    uint32_t fa[4] = {a[i * 4], a[i * 4 + 1], a[i * 4 + 2], a[i * 4 + 3]};
    if constexpr (kPlant == Plant::kWrongFragment) fa[1] = a[i * 4 + 2], fa[2] = a[i * 4 + 1];  // a1 <-> a2
    const uint32_t fb[2] = {b[i * 2], b[i * 2 + 1]};
    tc::mma_16816<T>(acc, fa, fb);
  } else {
    uint32_t fa[2] = {a[i * 2], a[i * 2 + 1]};
    if constexpr (kPlant == Plant::kWrongFragment) fa[0] = a[i * 2 + 1], fa[1] = a[i * 2];
    tc::mma_1688<T>(acc, fa, b[i]);
  }
  for (int j = 0; j < 4; ++j) d[i * 4 + j] = acc[j];
}

// One warp: D (16 x 16, f32, row-major) = A (16 x 16) @ B (16 x 16) through shared memory,
// fragments by ldmatrix, two m16n8k16 per k step. B is stored [n][k] (k-contiguous, as the
// keys of attention's Q K^T; ldmatrix without .trans) or [k][n] (as its values in P V;
// .trans).
template <class T, bool kBKContig, Plant kPlant>
__global__ void tile_kernel(const uint16_t* a, const uint16_t* b, float* d) {
  __shared__ __align__(16) uint16_t sa[16 * 16];
  __shared__ __align__(16) uint16_t sb[16 * 16];
  const int lane = int(threadIdx.x);
  for (int x = lane; x < 256; x += 32) sa[x] = a[x], sb[x] = b[x];
  __syncwarp();
  const int q = lane / 8, r = lane % 8;
  uint32_t fa[4], fb[4];
  // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  tc::ldmatrix<4, false>(fa, tc::shared_address(sa + (8 * (q % 2) + r) * 16 + 8 * (q / 2)));
  if constexpr (kPlant == Plant::kWrongFragment) {  // a0 <-> a1
    const uint32_t x = fa[0];
    fa[0] = fa[1], fa[1] = x;
  }
  // B: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15): b0, b1 of
  // the first n8 tile, then of the second.
  constexpr bool kTrans = (kPlant == Plant::kSwappedTrans) != !kBKContig;
  const int n = 8 * (q / 2), k = 8 * (q % 2);
  if constexpr (kBKContig)
    tc::ldmatrix<4, kTrans>(fb, tc::shared_address(sb + (n + r) * 16 + k));
  else
    tc::ldmatrix<4, kTrans>(fb, tc::shared_address(sb + (k + r) * 16 + n));
  for (int half = 0; half < 2; ++half) {
    float acc[4] = {0, 0, 0, 0};
    const uint32_t b2[2] = {fb[2 * half], fb[2 * half + 1]};
    tc::mma_16816<T>(acc, fa, b2);
    const int row = lane / 4, col = 8 * half + 2 * (lane % 4);
    d[row * 16 + col] = acc[0], d[row * 16 + col + 1] = acc[1];
    d[(row + 8) * 16 + col] = acc[2], d[(row + 8) * 16 + col + 1] = acc[3];
  }
}

// kGroups commit groups of one kBytes copy per thread each: copy (g, t) takes src_bytes[g n + t]
// bytes of src at (g n + t) kBytes to the same offset of shared memory (n = threads). Then
// cp_async_wait<kWait> (skipped by the plant), a barrier, and each thread reads the slots of
// thread (t + 1) % n into out, the usual pattern of copying for each other.
template <int kBytes, int kGroups, int kWait, Plant kPlant>
__global__ void cp_async_kernel(const unsigned char* src, const int* src_bytes, unsigned char* out) {
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int n = int(blockDim.x), t = int(threadIdx.x);
  const tc::SharedAddr base = tc::shared_address(smem);
  for (int g = 0; g < kGroups; ++g) {
    const int i = g * n + t;
    tc::cp_async<kBytes>(base + i * kBytes, src + i * kBytes, src_bytes[i]);
    tc::cp_async_commit();
  }
  if constexpr (kPlant != Plant::kMissingWait) tc::cp_async_wait<kWait>();
  __syncthreads();
  const int other = (t + 1) % n;
  for (int g = 0; g < kGroups; ++g) {
    const int i = g * n + other;
    for (int b = 0; b < kBytes; ++b) out[i * kBytes + b] = smem[i * kBytes + b];
  }
}

// --- The per-lane reference ------------------------------------------------------------------

uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

template <class T>
uint16_t bits_of(double v) {
  const T x = test::from_double<T>(v);
  uint16_t b;
  std::memcpy(&b, &x, 2);
  return b;
}

// What a checker found: mismatching elements and the first few, described.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 4) first += "\n  " + what;
  }
};

template <int kCount, bool kTrans, Plant kPlant = Plant::kNone>
Mismatches check_ldmatrix(int warps, uint32_t seed) {
  const std::vector<uint16_t> m = test::random_bits<uint16_t>(size_t(warps) * kCount * 64, seed);
  DeviceArray<uint16_t> src(m);
  DeviceArray<uint32_t> out(size_t(warps) * 32 * kCount);
  const size_t shared = size_t(warps) * 4 * 8 * 24 * 2;
  launch<ldmatrix_kernel<kCount, kTrans, kPlant>>(LaunchConfig{dim3(1), dim3(32 * warps), shared}, nullptr,
                                                   src.data(), out.data());
  const std::vector<uint32_t> got = out.host();
  Mismatches bad;
  for (int w = 0; w < warps; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int q = 0; q < kCount; ++q) {
        const int g = lane / 4, t = lane % 4;
        auto e = [&](int row, int col) { return m[size_t(w * kCount + q) * 64 + row * 8 + col]; };
        const uint32_t want = kTrans ? pack(e(2 * t, g), e(2 * t + 1, g)) : pack(e(g, 2 * t), e(g, 2 * t + 1));
        const uint32_t have = got[size_t(w * 32 + lane) * kCount + q];
        if (have != want)
          bad.add("warp " + std::to_string(w) + " lane " + std::to_string(lane) + " r" + std::to_string(q) + ": " +
                  std::to_string(have) + " != " + std::to_string(want));
      }
  return bad;
}

// Random small integers: every product and sum of an mma is exact in float, so the
// reference is exact whatever order the hardware adds in.
template <class T, int kK, Plant kPlant = Plant::kNone>
Mismatches check_mma(int warps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<double> A(size_t(warps) * 16 * kK), B(size_t(warps) * kK * 8), C(size_t(warps) * 128);
  for (double& x : A) x = small(rng);
  for (double& x : B) x = small(rng);
  for (double& x : C) x = small(rng) * 16;
  std::vector<uint32_t> a(size_t(warps) * 32 * (kK / 4)), b(size_t(warps) * 32 * (kK / 8));
  std::vector<float> c(size_t(warps) * 128);
  for (int w = 0; w < warps; ++w) {
    auto Ab = [&](int row, int k) { return bits_of<T>(A[size_t(w) * 16 * kK + row * kK + k]); };
    auto Bb = [&](int k, int col) { return bits_of<T>(B[size_t(w) * kK * 8 + k * 8 + col]); };
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4, i = w * 32 + lane;
      // a_j = A[g + 8 (j % 2)][2t + 8 (j / 2) + {0, 1}]; b_j = B[2t + 8 j + {0, 1}][g].
      for (int j = 0; j < kK / 4; ++j) {
        const int row = g + 8 * (j % 2), k = 2 * t + 8 * (j / 2);
        a[size_t(i) * (kK / 4) + j] = pack(Ab(row, k), Ab(row, k + 1));
      }
      for (int j = 0; j < kK / 8; ++j)
        b[size_t(i) * (kK / 8) + j] = pack(Bb(2 * t + 8 * j, g), Bb(2 * t + 8 * j + 1, g));
      // c_j = C[g + 8 (j / 2)][2t + j % 2].
      for (int j = 0; j < 4; ++j)
        c[size_t(i) * 4 + j] = float(C[size_t(w) * 128 + (g + 8 * (j / 2)) * 8 + 2 * t + j % 2]);
    }
  }
  DeviceArray<uint32_t> da(a), db(b);
  DeviceArray<float> dc(c), dd(c.size());
  launch<mma_kernel<T, kK, kPlant>>(LaunchConfig{dim3(1), dim3(32 * warps), 0}, nullptr, da.data(), db.data(),
                                     dc.data(), dd.data());
  const std::vector<float> d = dd.host();
  Mismatches bad;
  for (int w = 0; w < warps; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 4; ++j) {
        const int row = lane / 4 + 8 * (j / 2), col = 2 * (lane % 4) + j % 2;
        double want = C[size_t(w) * 128 + row * 8 + col];
        for (int k = 0; k < kK; ++k)
          want += A[size_t(w) * 16 * kK + row * kK + k] * B[size_t(w) * kK * 8 + k * 8 + col];
        const float have = d[size_t(w * 32 + lane) * 4 + j];
        if (double(have) != want)
          bad.add("warp " + std::to_string(w) + " D[" + std::to_string(row) + "][" + std::to_string(col) +
                  "] = " + std::to_string(have) + ", want " + std::to_string(want));
      }
  return bad;
}

template <class T, bool kBKContig, Plant kPlant = Plant::kNone>
Mismatches check_tile(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<double> A(256), B(256);  // B[k][n]
  for (double& x : A) x = small(rng);
  for (double& x : B) x = small(rng);
  std::vector<uint16_t> a(256), b(256);
  for (int i = 0; i < 256; ++i) a[i] = bits_of<T>(A[i]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) b[kBKContig ? n * 16 + k : k * 16 + n] = bits_of<T>(B[k * 16 + n]);
  DeviceArray<uint16_t> da(a), db(b);
  DeviceArray<float> dd(256);
  launch<tile_kernel<T, kBKContig, kPlant>>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, da.data(), db.data(),
                                             dd.data());
  const std::vector<float> d = dd.host();
  Mismatches bad;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = 0;
      for (int k = 0; k < 16; ++k) want += A[i * 16 + k] * B[k * 16 + j];
      if (double(d[i * 16 + j]) != want)
        bad.add("D[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(d[i * 16 + j]) +
                ", want " + std::to_string(want));
    }
  return bad;
}

// Groups older than the kWait most recent must have landed (source bytes, then zeros); in
// the emulator the kWait most recent must not have (still 0xFF), which a GPU does not promise.
template <int kBytes, int kGroups, int kWait, Plant kPlant = Plant::kNone>
Mismatches check_cp_async(int threads, uint32_t seed) {
  const size_t copies = size_t(kGroups) * threads;
  const std::vector<unsigned char> s = test::random_bits<unsigned char>(copies * kBytes, seed);
  std::mt19937 rng(seed + 1);
  std::vector<int> sb(copies);
  for (int& x : sb) x = int(rng() % (kBytes + 1));  // every src-size from 0 (all zero fill) to kBytes
  DeviceArray<unsigned char> src(s), out(copies * kBytes);
  DeviceArray<int> dsb(sb);
  {
    const WithoutInitcheck reads_pending_copies;
    launch<cp_async_kernel<kBytes, kGroups, kWait, kPlant>>(LaunchConfig{dim3(2), dim3(threads), copies * kBytes},
                                                             nullptr, src.data(), dsb.data(), out.data());
  }
  const std::vector<unsigned char> got = out.host();
  Mismatches bad;
  for (size_t i = 0; i < copies; ++i) {
    const int group = int(i / threads);
    const bool landed = group < kGroups - kWait;
    if (!landed && !kEmulator) continue;
    for (int b = 0; b < kBytes; ++b) {
      const unsigned char want = !landed ? 0xFF : (b < sb[i] ? s[i * kBytes + b] : 0);
      if (got[i * kBytes + b] != want)
        bad.add("copy " + std::to_string(i) + " (group " + std::to_string(group) + ", src-size " +
                std::to_string(sb[i]) + ") byte " + std::to_string(b) + ": " + std::to_string(got[i * kBytes + b]) +
                " != " + std::to_string(want));
    }
  }
  return bad;
}

#define EXPECT_CLEAN(expr)                                            \
  do {                                                                \
    const Mismatches m_ = (expr);                                     \
    EXPECT_EQ(m_.count, 0u) << #expr << " mismatches:" << m_.first;   \
  } while (0)
#define EXPECT_CAUGHT(expr)                                                             \
  do {                                                                                  \
    const Mismatches m_ = (expr);                                                       \
    EXPECT_GT(m_.count, 0u) << #expr << ": the planted bug went unnoticed";             \
  } while (0)

// sm_80 or newer for the PTX; the emulator always.
bool have_tensor_cores() {
#if defined(__CUDACC__)
  if (!test::have_device()) return false;
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  return major >= 8;
#else
  return true;
#endif
}
#define EMBER_NEED_TENSOR_CORES() \
  if (!have_tensor_cores()) GTEST_SKIP() << "no CUDA device of compute capability 8.0 or newer"

// --- Tests --------------------------------------------------------------------------------

TEST(TensorCore, LdmatrixEveryFormMatchesTheLaneLayout) {
  EMBER_NEED_TENSOR_CORES();
  for (int warps : {1, 3}) {
    const uint32_t seed = 10u * warps;
    EXPECT_CLEAN((check_ldmatrix<1, false>(warps, seed + 1)));
    EXPECT_CLEAN((check_ldmatrix<1, true>(warps, seed + 2)));
    EXPECT_CLEAN((check_ldmatrix<2, false>(warps, seed + 3)));
    EXPECT_CLEAN((check_ldmatrix<2, true>(warps, seed + 4)));
    EXPECT_CLEAN((check_ldmatrix<4, false>(warps, seed + 5)));
    EXPECT_CLEAN((check_ldmatrix<4, true>(warps, seed + 6)));
  }
}

TEST(TensorCore, MmaEveryShapeAndTypeMatchesTheLaneLayout) {
  EMBER_NEED_TENSOR_CORES();
  for (int warps : {1, 2}) {
    EXPECT_CLEAN((check_mma<__nv_bfloat16, 16>(warps, 100u + warps)));
    EXPECT_CLEAN((check_mma<__half, 16>(warps, 200u + warps)));
    EXPECT_CLEAN((check_mma<__nv_bfloat16, 8>(warps, 300u + warps)));
    EXPECT_CLEAN((check_mma<__half, 8>(warps, 400u + warps)));
  }
}

TEST(TensorCore, LdmatrixFeedsMmaForBothOperandLayouts) {
  EMBER_NEED_TENSOR_CORES();
  EXPECT_CLEAN((check_tile<__nv_bfloat16, true>(1)));
  EXPECT_CLEAN((check_tile<__nv_bfloat16, false>(2)));
  EXPECT_CLEAN((check_tile<__half, true>(3)));
  EXPECT_CLEAN((check_tile<__half, false>(4)));
}

TEST(TensorCore, CpAsyncEverySizeDepthAndBlockSize) {
  EMBER_NEED_TENSOR_CORES();
  for (int threads : {32, 45, 100, 257}) {  // 45, 100, 257: a partial last warp
    const uint32_t seed = uint32_t(threads);
    EXPECT_CLEAN((check_cp_async<4, 3, 0>(threads, seed)));
    EXPECT_CLEAN((check_cp_async<8, 3, 0>(threads, seed + 1)));
    EXPECT_CLEAN((check_cp_async<16, 3, 0>(threads, seed + 2)));
    EXPECT_CLEAN((check_cp_async<16, 3, 1>(threads, seed + 3)));
    EXPECT_CLEAN((check_cp_async<16, 3, 2>(threads, seed + 4)));
    EXPECT_CLEAN((check_cp_async<8, 4, 3>(threads, seed + 5)));
    EXPECT_CLEAN((check_cp_async<4, 4, 1>(threads, seed + 6)));
  }
}

TEST(TensorCore, PlantedWrongFragmentIndexIsCaught) {
  EMBER_NEED_TENSOR_CORES();
  EXPECT_CAUGHT((check_mma<__nv_bfloat16, 16, Plant::kWrongFragment>(1, 7)));
  EXPECT_CAUGHT((check_mma<__half, 8, Plant::kWrongFragment>(1, 8)));
  EXPECT_CAUGHT((check_tile<__nv_bfloat16, true, Plant::kWrongFragment>(9)));
}

TEST(TensorCore, PlantedSwappedTransIsCaught) {
  EMBER_NEED_TENSOR_CORES();
  EXPECT_CAUGHT((check_ldmatrix<1, false, Plant::kSwappedTrans>(1, 11)));
  EXPECT_CAUGHT((check_ldmatrix<2, true, Plant::kSwappedTrans>(1, 12)));
  EXPECT_CAUGHT((check_ldmatrix<4, false, Plant::kSwappedTrans>(1, 13)));
  EXPECT_CAUGHT((check_tile<__half, true, Plant::kSwappedTrans>(14)));
  EXPECT_CAUGHT((check_tile<__nv_bfloat16, false, Plant::kSwappedTrans>(15)));
}

TEST(TensorCore, PlantedMissingWaitGroupIsCaught) {
#if defined(__CUDACC__)
  GTEST_SKIP() << "a GPU may land cp.async copies before their wait_group; the emulator never does";
#else
  EXPECT_CAUGHT((check_cp_async<16, 2, 0, Plant::kMissingWait>(45, 21)));
  EXPECT_CAUGHT((check_cp_async<4, 3, 1, Plant::kMissingWait>(32, 22)));
#if defined(__SANITIZE_THREAD__)  // the emulator's checks see these kernels' accesses
  // The emulator's initcheck names the read of bytes no copy has landed in.
  const emu::detail::CheckOptions old = emu::detail::set_check_options(emu::detail::CheckOptions{.init = true});
  DeviceArray<unsigned char> src(2 * 64 * 16), out(2 * 64 * 16);
  DeviceArray<int> sizes(std::vector<int>(2 * 64, 16));
  std::string err;
  try {
    launch<cp_async_kernel<16, 2, 0, Plant::kMissingWait>>(LaunchConfig{dim3(1), dim3(64), 2 * 64 * 16}, nullptr,
                                                            src.data(), sizes.data(), out.data());
  } catch (const Error& e) {
    err = e.what();
  }
  emu::detail::set_check_options(old);
  EXPECT_NE(err.find("initcheck"), std::string::npos) << err;
#endif
#endif
}

#if !defined(__CUDACC__)
// The emulator's own rules: .aligned instructions need the whole warp; row addresses and
// copies must be aligned; a wait retires committed groups only.
__global__ void partial_warp_mma_kernel(float* d) {
  float acc[4] = {0, 0, 0, 0};
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  tc::mma_16816<__half>(acc, a, b);
  d[threadIdx.x] = acc[0];
}

__global__ void uncommitted_copy_kernel(const unsigned char* src, unsigned char* out) {
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  tc::cp_async<16>(tc::shared_address(smem + 16 * threadIdx.x), src + 16 * threadIdx.x);
  tc::cp_async_wait<0>();  // nothing committed: nothing retired
  for (int b = 0; b < 16; ++b) out[16 * threadIdx.x + b] = smem[16 * threadIdx.x + b];
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
}

__global__ void misaligned_ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t s[8 * 16];
  uint32_t r[1];
  tc::ldmatrix<1, false>(r, tc::shared_address(s + 1 + 8 * (threadIdx.x % 8)));
  out[threadIdx.x] = r[0];
}

TEST(TensorCoreEmulator, EnforcesThePtxRules) {
  DeviceArray<float> d(64);
  try {
    launch<partial_warp_mma_kernel>(LaunchConfig{dim3(1), dim3(48), 0}, nullptr, d.data());
    ADD_FAILURE() << "an mma.sync in a partial warp ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs all 32 lanes"), std::string::npos) << e.what();
  }
  DeviceArray<uint32_t> r(32);
  try {
    launch<misaligned_ldmatrix_kernel>(LaunchConfig{dim3(1), dim3(32), 0}, nullptr, r.data());
    ADD_FAILURE() << "an unaligned ldmatrix row ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not 16-byte aligned"), std::string::npos) << e.what();
  }
  DeviceArray<unsigned char> src(std::vector<unsigned char>(32 * 16, 7)), out(32 * 16);
  const WithoutInitcheck reads_pending_copies;
  launch<uncommitted_copy_kernel>(LaunchConfig{dim3(1), dim3(32), 32 * 16}, nullptr, src.data(), out.data());
  for (unsigned char x : out.host()) ASSERT_EQ(x, 0xFF) << "a wait_group retired an uncommitted copy";
}
#endif

}  // namespace
}  // namespace ember::kernels::cuda
